"""Grading a copy made to derive (`exercises make --derive`) shows the student nothing of the derivations it left out.

The copy asks for LayerNorm's derivation, so it leaves out the `Derivation:` sections of layers/layernorm.py and of
the files of the exercises that build on it (rmsnorm's, block's, ...). Each attack is a `layernorm.backward` that reads
a derivation in its process (a docstring, the source, `linecache`, the module's file) and raises it, so that the
grader's feedback would carry it: the score table and the rest of the command's output, the JSON, Gradescope's
results.json. Whether a copy was made to derive is the instructor's assignment's to say (`exercises make` records it
there), never the copy's exercises.json, which the student can edit. The lines looked for are read from the reference
by the convention (`derivation_lines`), not by the code that strips them.
"""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _grading_answers import REGIONS, fresh_copy, indented, isolation_levels, put_bodies
from test_grading_other_answers import OWN, SHAPE_MISTAKE, line_of, strings
from test_student_copy_derive import derivation_lines

from minitransformer.__main__ import main
from minitransformer.exercises.assignment import AssignmentError, read_assignment
from minitransformer.exercises.derivations import NOTE
from minitransformer.exercises.grade import grade_copy
from minitransformer.exercises.isolation import LINUX_ONLY
from minitransformer.exercises.make import derivation_files

ASSIGNED = ["block.backward", "layernorm.backward", "layernorm.forward"]
LEVELS = isolation_levels()
LINUX = pytest.mark.skipif(sys.platform != "linux", reason=LINUX_ONLY)     # grading; making a copy runs anywhere
# every derivation the copy left out, its lines with their spaces collapsed (the feedback collapses them)
LEFT_OUT = {relative: {" ".join(line.split()) for line in derivation_lines(relative)}
            for relative in derivation_files(ASSIGNED, REGIONS)}

HEAD = ["import inspect, linecache",
        "import minitransformer.layers.layernorm as layernorm, minitransformer.layers.rmsnorm as rmsnorm",
        "def derivation(text):",                        # from the backward's Derivation section on
        "    return text[text.find('Derivation:', max(text.find('def backward'), 0)):]"]
ATTACKS = {
    "LayerNorm.backward.__doc__": "stolen = derivation(inspect.unwrap(layernorm.LayerNorm.backward).__doc__)",
    "inspect.getsource(LayerNorm)": "stolen = derivation(inspect.getsource(layernorm.LayerNorm))",
    "the module's file": "stolen = derivation(open(layernorm.__file__, encoding='utf-8').read())",
    "linecache": "stolen = derivation(''.join(linecache.getlines(layernorm.__file__)))",
    # rmsnorm builds on layernorm, so the copy left its derivation out too; no region of its file is assigned
    "RMSNorm.backward.__doc__": "stolen = derivation(inspect.unwrap(rmsnorm.RMSNorm.backward).__doc__)",
    "RMSNorm's file": "stolen = derivation(open(rmsnorm.__file__, encoding='utf-8').read())",
}


def attack(name):
    """layernorm.backward doing the attack `name`, then raising what it found."""
    return indented("layernorm.backward", *HEAD, ATTACKS[name], "raise RuntimeError('STOLEN ' + stolen)")


def derivations_shown(text):
    """'file: line' of every left-out derivation line that `text` shows (empty: none)."""
    flat = " ".join(text.split())
    return sorted(f"{relative}: {line}" for relative, lines in LEFT_OUT.items() for line in lines if line in flat)


def make_copy(tmp_path_factory, *options):
    """A student copy of block and layernorm made by the command line with `options`, its assignment beside it."""
    out = tmp_path_factory.mktemp("made") / "student"
    assert main(["exercises", "make", str(out), "--only", "block,layernorm", *options]) == 0
    return out


@pytest.fixture(scope="module")
def derive_copy(tmp_path_factory):
    return make_copy(tmp_path_factory, "--derive")


@pytest.fixture(scope="module")
def plain_copy(tmp_path_factory):
    return make_copy(tmp_path_factory)


def graded_output(copy, assignment, tmp_path, level, capsys):
    """Everything a student can be shown of the grade: the command's stdout and stderr, the JSON, results.json."""
    json_path, results = tmp_path / "grades.json", tmp_path / "results.json"
    code = main(["exercises", "grade", str(copy), "--assignment", str(assignment), "--json", str(json_path),
                 "--gradescope", str(results), "--isolation", level])
    out = capsys.readouterr()
    assert code == 1, out.err
    return {"stdout (the score table)": out.out, "stderr": out.err,
            "--json": strings(json.loads(json_path.read_text(encoding="utf-8"))),
            "results.json": strings(json.loads(results.read_text(encoding="utf-8")))}


def edit_manifest(copy, change):
    """Edit the copy's exercises.json as a student could."""
    path = copy / "exercises.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    change(manifest)
    path.write_text(json.dumps(manifest), encoding="utf-8")


def test_the_assignment_says_whether_the_copy_was_made_to_derive(derive_copy, plain_copy, tmp_path):
    assert read_assignment(f"{derive_copy}.assignment.json").derive is True
    assert read_assignment(f"{plain_copy}.assignment.json").derive is False
    data = json.loads(Path(f"{derive_copy}.assignment.json").read_text(encoding="utf-8"))
    for value, expected in ((True, True), (False, False), (None, False), ("yes", "true or false, got 'yes'")):
        path = tmp_path / f"{value}.json"          # None: a file written before the field, which means not derive
        path.write_text(json.dumps({**data, "derive": value} if value is not None else
                                   {key: v for key, v in data.items() if key != "derive"}), encoding="utf-8")
        if isinstance(expected, bool):
            assert read_assignment(path).derive is expected
        else:
            with pytest.raises(AssignmentError, match=f"derive expected {expected}"):
                read_assignment(path)


@pytest.mark.sandbox
@LINUX
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", list(ATTACKS))
def test_an_answer_shows_nothing_of_a_derivation_the_copy_left_out(derive_copy, tmp_path, level, name, capsys):
    copy = fresh_copy(derive_copy, tmp_path)
    put_bodies(copy, {"layernorm.forward": OWN["layernorm.forward"], "layernorm.backward": attack(name)})
    edit_manifest(copy, lambda manifest: manifest.pop("derive"))     # the assignment says it, not the copy
    shown = graded_output(copy, f"{derive_copy}.assignment.json", tmp_path, level, capsys)
    assert {where: derivations_shown(text) for where, text in shown.items()} == dict.fromkeys(shown, [])
    assert "STOLEN Derivation: " + NOTE in shown["stdout (the score table)"]    # read where the derivation was
    assert "disagree on whether it was made to derive; graded as the assignment says: made to" in shown["stderr"]


@pytest.mark.sandbox
@LINUX
def test_a_class_grading_shows_nothing_of_a_derivation_the_copy_left_out(derive_copy, tmp_path, capsys):
    """`exercises grade --class`: each student's kept grade, the gradebook and the command's output."""
    folder = tmp_path / "class"
    for name in ("doc", "file"):
        shutil.copytree(derive_copy, folder / name)
        put_bodies(folder / name, {"layernorm.forward": OWN["layernorm.forward"], "layernorm.backward": attack(
            "LayerNorm.backward.__doc__" if name == "doc" else "RMSNorm's file")})
    assert main(["exercises", "grade", str(folder), "--class", "--assignment", f"{derive_copy}.assignment.json",
                 "-j", "1", "--isolation", "process"]) == 0
    out = capsys.readouterr()
    kept = {path.name: strings(json.loads(path.read_text(encoding="utf-8")))
            for path in (tmp_path / "class.gradebook.grades").glob("*.json")}
    shown = {"stdout": out.out, "stderr": out.err,
             "gradebook": (tmp_path / "class.gradebook.csv").read_text(encoding="utf-8"), **kept}
    assert len(kept) == 2 and all("STOLEN Derivation: " + NOTE in text for text in kept.values())
    assert {where: derivations_shown(text) for where, text in shown.items()} == dict.fromkeys(shown, [])


@LINUX
@pytest.mark.parametrize("level", LEVELS)
def test_a_copy_not_made_to_derive_is_graded_with_its_docstrings_whole(plain_copy, tmp_path, level, capsys):
    """The copy keeps the derivations, so its grading may show them: as before, whatever its exercises.json says."""
    copy = fresh_copy(plain_copy, tmp_path)
    put_bodies(copy, {"layernorm.forward": OWN["layernorm.forward"],
                      "layernorm.backward": attack("LayerNorm.backward.__doc__")})
    edit_manifest(copy, lambda manifest: manifest.update(derive={"exercises": ["layernorm"], "files": []}))
    shown = graded_output(copy, f"{plain_copy}.assignment.json", tmp_path, level, capsys)
    assert "layers/layernorm.py" in " ".join(derivations_shown(shown["stdout (the score table)"]))
    assert "disagree on whether it was made to derive; graded as the assignment says: not made" in shown["stderr"]


@LINUX
def test_the_feedback_points_at_the_students_own_lines_in_a_copy_made_to_derive(derive_copy, tmp_path):
    """The copy's files lost their derivations' lines, so did those graded: the line numbers agree, in the file of
    the exercise that failed (layers/layernorm.py) and in that of one which calls it (layers/block.py)."""
    copy = fresh_copy(derive_copy, tmp_path)
    put_bodies(copy, {**OWN, "layernorm.backward": indented("layernorm.backward", "g = dout * self.gamma.data",
                                                            SHAPE_MISTAKE)})
    put_bodies(copy, {"block.backward": REGIONS["block.backward"][1].body})
    grades = {g.exercise: g for g in grade_copy(copy, f"{derive_copy}.assignment.json", isolation="process")}
    line = line_of(copy, "layers/layernorm.py", SHAPE_MISTAKE)
    where = f"(at layers/layernorm.py:{line} in backward: {SHAPE_MISTAKE})"
    assert grades["layernorm"].status == "error" and all(where in p for p in grades["layernorm"].problems)
    block = grades["block"]
    assert block.status == "failed in layernorm.backward, which it calls"
    assert [case for case in block.cases if case["failed_in"]] and all(
        where in case["backward_problems"][0] for case in block.cases if case["failed_in"])

    mistake = "raise ValueError('a mistake of my own')"
    put_bodies(copy, {**OWN, "block.backward": indented("block.backward", mistake)})
    (block,) = grade_copy(copy, f"{derive_copy}.assignment.json", only=["block"], isolation="process")
    where = f"(at layers/block.py:{line_of(copy, 'layers/block.py', mistake)} in backward: {mistake})"
    assert block.status == "error" and all(where in p for p in block.problems if "backward raised" in p)
    assert sum("backward raised" in p for p in block.problems) == len(block.cases)


@pytest.mark.sandbox
@LINUX
def test_the_gradescope_bundle_grades_a_copy_made_to_derive_alike(derive_copy, tmp_path):
    from test_grading_gradescope import install_bundle  # that module skips itself off Linux

    submission = fresh_copy(derive_copy, tmp_path)
    put_bodies(submission, {"layernorm.forward": OWN["layernorm.forward"],
                            "layernorm.backward": attack("LayerNorm.backward.__doc__")})
    root, env = install_bundle(f"{derive_copy}.assignment.json", submission, tmp_path)
    graded = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                            text=True, cwd=root / "submission", encoding="utf-8")
    assert graded.returncode == 0, graded.stderr
    results = (root / "results" / "results.json").read_text(encoding="utf-8")
    shown = {"stdout": graded.stdout, "stderr": graded.stderr, "results.json": strings(json.loads(results))}
    assert {where: derivations_shown(text) for where, text in shown.items()} == dict.fromkeys(shown, [])
    assert "STOLEN Derivation: " + NOTE in shown["results.json"]
    with zipfile.ZipFile(tmp_path / "autograder.zip") as bundle:
        assert json.loads(bundle.read("assignment.json"))["derive"] is True
