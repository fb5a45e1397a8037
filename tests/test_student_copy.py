"""Student copies: no assigned answer anywhere in them, a suite that fails only where the student's work is
missing, and a self-check (`exercises check`, `pytest -m NAME`) that judges the student's own code.

One copy with every exercise and the notebooks is made once for the module; the tests that change
answers work on copies of that directory.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

from minitransformer.exercises.catalogue import EXERCISES
from minitransformer.exercises.make import make_student_copy, reference_package
from minitransformer.exercises.regions import find_regions, package_regions, replace_regions

REFERENCE = reference_package()
REGIONS = package_regions(REFERENCE)
NAMES = [exercise.name for exercise in EXERCISES]


@pytest.fixture(scope="module")
def every_exercise(tmp_path_factory):
    out = tmp_path_factory.mktemp("copies") / "all"
    make_student_copy(out, notebooks=(REFERENCE.parent / "notebooks").is_dir())
    return out


@pytest.fixture
def scratch(every_exercise, tmp_path):
    """A private copy of the module's student copy, to write answers into."""
    return shutil.copytree(every_exercise, tmp_path / "student")


def put_bodies(copy, bodies):
    """Write region bodies (dict name -> lines) into a student copy, as a student would."""
    for relative in {REGIONS[name][0] for name in bodies}:
        path = copy / "minitransformer" / relative
        path.write_text(replace_regions(path.read_text(encoding="utf-8"), bodies), encoding="utf-8")


def reference_bodies(*names):
    return {name: REGIONS[name][1].body for name in REGIONS if name.split(".")[0] in names or not names}


def changed(name, old, new):
    """The reference body of region `name` with `old` replaced by `new` (a known mistake)."""
    text = "".join(REGIONS[name][1].body)
    assert text.count(old) == 1
    return text.replace(old, new).splitlines(keepends=True)


def run(copy, *args, timeout=600):
    """Run python with `args` in the copy, importing the copy's package (not the reference)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout, encoding="utf-8")


# ---------------------------------------------------------------- no answer anywhere

def _normalised(line):
    return re.sub(r"\s+", "", line.split("#", 1)[0]).replace("self.", "")


def _does_something(code):
    """An operator, a call or a subscript: `return dx`, `C = self.d` and block headers do nothing to give away."""
    return not code.endswith(":") and re.search(r"[-+*/@%<>]|[\w\])][(\[]", re.sub(r"(?<![\w)\]])-(?=\d)", "", code))


def _answer_lines(name):
    """The normalised non-trivial lines of a reference region, less those its own file shows outside the regions."""
    relative, region = REGIONS[name]
    text = (REFERENCE / relative).read_text(encoding="utf-8")
    inside = {i for r in find_regions(text) for i in range(r.begin, r.end + 1)}
    shown = {_normalised(line) for i, line in enumerate(text.splitlines()) if i not in inside}
    return {_normalised(line): line.strip() for line in region.body
            if _does_something(_normalised(line)) and _normalised(line) not in shown}


def _texts(root):
    """(where, text) of every file of a copy, notebooks cell by cell."""
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        where = path.relative_to(root).as_posix()
        if path.suffix == ".ipynb":
            for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
                yield f"{where} cell {index}", "".join(cell["source"])
        elif path.suffix not in (".npz", ".pyc"):
            try:
                yield where, path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                pass


def test_no_line_of_an_assigned_answer_is_anywhere_in_the_copy(every_exercise):
    assigned = json.loads((every_exercise / "exercises.json").read_text(encoding="utf-8"))["regions"]
    assert sorted(assigned) == sorted(REGIONS)
    answers = {key: (name, line) for name in assigned for key, line in _answer_lines(name).items()}
    assert len(answers) > 40
    found = []
    for where, text in _texts(every_exercise):
        lines = [_normalised(line) for line in text.splitlines()]
        joined = "\n".join(lines)                              # a quick look first: most files hold no answer
        found += [f"{where}: {answers[key][0]}: {answers[key][1]}" for key in answers if key in joined]
    assert not found, "the student copy gives answers away:\n" + "\n".join(found)
    assert not (every_exercise / "notebooks" / "_src").exists()


def test_a_copy_blanks_only_what_repeats_an_assigned_answer(tmp_path):
    copy = tmp_path / "layernorm"
    manifest = make_student_copy(copy, only=["layernorm"])
    for relative in ("variants/relative_position.py", "variants/sliding_window.py", "fast/activations.py"):
        assert (copy / "minitransformer" / relative).read_text(encoding="utf-8") == (REFERENCE / relative).read_text(encoding="utf-8")
    assert not (copy / "minitransformer/fast/layernorm.py").exists()
    gradcheck_tests = (copy / "tests/test_gradcheck.py").read_text(encoding="utf-8")
    assert "class LayerNormWithoutMeanTerm" not in gradcheck_tests                  # a near-solution
    assert "def test_wrong_layernorm_backward_is_caught_and_located" not in gradcheck_tests   # its test
    assert "def test_rel_error_definition" in gradcheck_tests                        # the rest stays
    assert "def test_gelu_in_place_form_equals_the_formula" in (copy / "tests/test_fast_forms.py").read_text(encoding="utf-8")
    assert {"path": "tests/test_gradcheck.py", "what": "LayerNormWithoutMeanTerm", "exercises": "layernorm"} \
        in manifest["left_out"]
    assert not [e for e in manifest["left_out"] if e["path"].startswith("minitransformer/variants/")]
    assert (copy / "benchmarks/bench_train.py").is_file()
    assert not (copy / "tests/test_student_copy.py").exists() and not (copy / "tests/test_compatibility.py").exists()
    # a test module that runs the blank exercise when imported is one failing item, not a collection error
    collected = run(copy, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/test_fast.py")
    assert collected.returncode == 0, collected.stdout[-2000:]
    assert "tests/test_fast.py::needs exercise layernorm.forward (LayerNorm.forward)" in collected.stdout


def test_a_copy_that_would_still_give_an_answer_away_is_not_written(tmp_path, monkeypatch):
    """The last scan: the reference README's "How to read a backward pass" quotes LayerNorm's code."""
    from minitransformer.exercises import make

    monkeypatch.setattr(make, "_README_SECTIONS", ("## How to read a backward pass",))
    monkeypatch.setattr(make, "unavailable_layers", lambda *args: {})          # not under test: no probes
    if "## How to read a backward pass" not in (REFERENCE.parent / "README.md").read_text(encoding="utf-8"):
        pytest.skip("the reference README has no such section")
    with pytest.raises(RuntimeError, match=r"no student copy written: .*README\.md:\d+: layernorm\.(forward|backward)"):
        make_student_copy(tmp_path / "student", only=["layernorm"])
    assert not (tmp_path / "student").exists()


def test_what_repeats_an_answer_is_left_out_and_said_so(every_exercise):
    manifest = json.loads((every_exercise / "exercises.json").read_text(encoding="utf-8"))
    readme = (every_exercise / "README.md").read_text(encoding="utf-8")
    package = [entry for entry in manifest["left_out"] if entry["path"].startswith("minitransformer/")]
    assert package and all(entry["path"].startswith("minitransformer/fast/") for entry in package)
    assert not any((every_exercise / entry["path"]).exists() for entry in package)
    for layer, needs in manifest["unavailable_layers"].items():     # variants wait for the exercise they call
        assert f"- {layer}: needs {', '.join(needs)}" in readme
    assert "python -m minitransformer exercises check" in readme and "python -m pytest -m " in readme


# ---------------------------------------------------------------- the copy's own test suite

SELECTION = ["tests/test_gradcheck.py", "tests/test_exercise_markers.py", "tests/test_sliding_window.py",
             "tests/test_relative_position.py", "tests/test_notebooks.py",
             "tests/test_benchmarks.py::test_the_replayed_products_add_up_to_the_models_flops"]


def _junit(copy, *args):
    """Run pytest in the copy; return (exit code, {test id: failure text}, number of tests, number skipped)."""
    done = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not runs_top_to_bottom",
               "--junitxml", str(copy / "report.xml"), *args)
    suite = ElementTree.parse(copy / "report.xml").getroot().find("testsuite")
    failures = {f"{case.get('classname')}::{case.get('name')}": "".join(element.itertext()) + element.get("message", "")
                for case in suite.iter("testcase") for element in case if element.tag in ("failure", "error")}
    return done.returncode, failures, int(suite.get("tests")), int(suite.get("skipped")), done.stdout


def test_the_copys_tests_fail_only_where_work_is_missing_and_pass_when_it_is_done(scratch):
    code, failures, tests, _, out = _junit(scratch, *SELECTION)
    assert code == 1 and failures, out[-2000:]
    exercise = re.compile(r"\b(" + "|".join(NAMES) + r")\b")
    unrelated = {test: text[:300] for test, text in failures.items() if not exercise.search(text)}
    assert not unrelated, unrelated
    put_bodies(scratch, reference_bodies())
    code, failures, tests, skipped, out = _junit(scratch, *SELECTION)
    assert (code, failures) == (0, {}), out[-3000:]
    assert tests - skipped > 40


# ---------------------------------------------------------------- the self-check: markers and `exercises check`

def test_the_markers_fail_until_the_exercise_is_right_and_pass_when_it_is(scratch):
    # the whole suite is collected (no module's import error interrupts it) and `-m` picks the exercise's checks;
    # outcomes come from pytest's JUnit report, never from its summary line (which changes with what is installed)
    code, failures, tests, skipped, out = _junit(scratch, "-m", "layernorm")
    assert code == 1, out[-3000:]
    assert sorted(failures) == [f"tests.test_exercise_markers::test_{what}[layernorm]"
                                for what in ("backward_matches_finite_differences_of_the_forward",
                                             "forward_gives_the_expected_outputs")], (sorted(failures), out[-3000:])
    assert tests - skipped == 2, out[-3000:]
    assert "forward not implemented (layernorm.forward) at minitransformer/layers/layernorm.py:" in out

    marked = ["tests/test_exercise_markers.py", "-m", "layernorm"]
    put_bodies(scratch, {"layernorm.forward": REGIONS["layernorm.forward"][1].body,           # no mean(g) term
                         "layernorm.backward": changed("layernorm.backward", "g - g.mean(-1, keepdims=True) - ", "g - ")})
    code, failures, tests, skipped, out = _junit(scratch, *marked)
    assert (code, tests - skipped, len(failures)) == (1, 2, 1), out[-2000:]
    assert re.search(r"input 0 \(x\): rel_error \S+, worst at index \(\d+, \d+(, \d+)?\)", out)

    put_bodies(scratch, {"layernorm.forward": changed("layernorm.forward", "(centered ** 2).mean(axis=-1, keepdims=True)",
                                                      "centered.var(axis=-1, ddof=1, keepdims=True)"),
                         "layernorm.backward": REGIONS["layernorm.backward"][1].body})
    code, failures, tests, skipped, out = _junit(scratch, *marked)
    assert "tests.test_exercise_markers::test_forward_gives_the_expected_outputs[layernorm]" in failures, out[-2000:]
    assert "forward output: rel_error" in out, out[-2000:]

    put_bodies(scratch, reference_bodies("layernorm"))
    code, failures, tests, skipped, out = _junit(scratch, *marked)
    assert (code, failures, tests - skipped) == (0, {}, 2), out[-2000:]


def test_exercises_check_judges_the_students_own_code(scratch):
    blank = run(scratch, "-m", "minitransformer", "exercises", "check", "softmax")
    assert blank.returncode == 1 and "NOT IMPLEMENTED" in blank.stdout and "Traceback" not in blank.stderr
    put_bodies(scratch, {"softmax.forward": changed("softmax.forward", "total = exp.sum(axis=axis, keepdims=True)",
                                                    "total = exp.sum()"),
                         "softmax.backward": REGIONS["softmax.backward"][1].body})
    wrong_forward = run(scratch, "-m", "minitransformer", "exercises", "check", "softmax")
    assert wrong_forward.returncode == 1, wrong_forward.stdout
    assert "forward   WRONG" in wrong_forward.stdout and "against the expected outputs shipped with this copy" \
        in wrong_forward.stdout
    put_bodies(scratch, reference_bodies("softmax"))
    right = run(scratch, "-m", "minitransformer", "exercises", "check", "softmax,relu")
    assert right.returncode == 1 and "1 of 2 exercises pass" in right.stdout        # relu is still blank
    put_bodies(scratch, reference_bodies("relu"))
    assert run(scratch, "-m", "minitransformer", "exercises", "check", "softmax,relu").returncode == 0
    unknown = run(scratch, "-m", "minitransformer", "exercises", "check", "batchnorm")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: ") and "layernorm" in unknown.stderr


def test_gradcheck_in_a_copy_reports_unwritten_exercises_as_rows(scratch):
    blank = run(scratch, "-m", "minitransformer", "gradcheck", "--only", "layernorm,Linear")
    assert blank.returncode == 1 and "Traceback" not in blank.stderr, blank.stderr
    rows = {line.split()[0]: line for line in blank.stdout.splitlines()[1:3]}
    assert rows["LayerNorm"].endswith("not implemented") and rows["Linear"].endswith("not implemented")
    assert "not implemented: Exercise layernorm.forward" in blank.stdout
    put_bodies(scratch, reference_bodies("layernorm"))
    assert run(scratch, "-m", "minitransformer", "gradcheck", "--only", "layernorm").returncode == 0


def test_the_instructors_commands_refuse_to_run_from_a_copy_even_when_it_is_complete(scratch):
    put_bodies(scratch, reference_bodies())
    done = run(scratch, "-m", "minitransformer", "exercises", "make", str(scratch / "again"))
    assert done.returncode == 2 and "student copy" in done.stdout + done.stderr
    assert not (scratch / "again").exists()
