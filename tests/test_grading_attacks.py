"""A student who wants full marks without the work (issue 19): every attack scores 0.

Each test is an answer a student could hand in, graded as the instructor grades it: by the
assignment, under each isolation level this machine has (bubblewrap where it works, and the
process fallback). Before issue 19 every one of them scored full marks or escaped the grader's
limits (see the report of that change); `test_grading_isolation.py` tests the levels themselves.
"""

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from _grading_answers import (
    KINDS,
    REFERENCE,
    REGIONS,
    answers,
    fresh_copy,
    indented,
    isolation_levels,
    make_once,
    put_bodies,
    reference_body,
)

from minitransformer.__main__ import main
from minitransformer.exercises.assignment import ReferenceChanged, new_assignment, write_assignment
from minitransformer.exercises.grade import grade_copy
from minitransformer.exercises.isolation import LINUX_ONLY, Limits

if sys.platform != "linux":
    pytest.skip(LINUX_ONLY, allow_module_level=True)

pytestmark = pytest.mark.sandbox

ASSIGNED = ["layernorm.backward", "relu.backward"]


LEVELS = isolation_levels()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One student copy with relu and layernorm.backward assigned, shared by the tests (each grades a copy of it)."""
    return make_once(tmp_path_factory, ASSIGNED)


@pytest.fixture
def student(made, tmp_path):
    return fresh_copy(made, tmp_path)


@pytest.fixture(params=LEVELS)
def level(request):
    return request.param


def assignment(regions=ASSIGNED, seed=19):
    return new_assignment(regions, REFERENCE, seed=seed)


def grade(copy, exercise, level, reference=None, **limits):
    (result,) = grade_copy(copy, assignment(), only=[exercise], isolation=level, reference=reference,
                           limits=Limits(**limits))
    return result


def _processes_with(token):
    """Pids of the processes whose command line holds `token`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


# ---------------------------------------------------------------- cheating the verdict

def test_patching_the_checkers_rel_error_scores_nothing(student, level):
    put_bodies(student, {"layernorm.backward": indented(
        "layernorm.backward",
        "import minitransformer, minitransformer.gradcheck.checker as checker",
        "checker.rel_error = minitransformer.rel_error = lambda analytic, numeric: 0.0",
        "return np.zeros_like(dout)")})
    assert grade(student, "layernorm", level).points == 0


def test_replacing_numpy_max_scores_nothing(student, level):
    put_bodies(student, {"layernorm.backward": indented(
        "layernorm.backward",
        "import numpy",
        "numpy.max = lambda *args, **kwargs: 0.0          # rel_error divides by a max: every error 0",
        "return numpy.zeros_like(dout)")})
    assert grade(student, "layernorm", level).points == 0


# An answer that finds the grader's reference through /proc/<parent>/ (its working directory, or
# the PYTHONPATH it was started with), takes the reference's region out of it and runs that.
_STEAL = [
    "import os, re, textwrap",
    "places = [f'/proc/{os.getppid()}/cwd', f'/proc/{os.getppid()}/root' + os.getcwd()]",
    "try:",
    "    environ = open(f'/proc/{os.getppid()}/environ', 'rb').read().decode().split('\\0')",
    "    places += [p for e in environ if e.startswith('PYTHONPATH=') for p in e[11:].split(':')]",
    "except OSError:",
    "    pass",
    "stolen = None",
    "for place in places:",
    "    try:",
    "        source = open(place + '/minitransformer/layers/layernorm.py').read()",
    "    except OSError:",
    "        continue",
    "    found = re.search(r'BEGIN SOLUTION layernorm.backward\\n(.*?)\\n\\s*### END', source, re.S)",
    "    if found and 'NotImplementedError' not in found.group(1):",
    "        stolen = found.group(1)",
    "if stolen is None:",
    "    return np.zeros_like(dout)",
    "scope = {'np': np}",
    "exec('def answer(self, dout):\\n' + textwrap.indent(textwrap.dedent(stolen), '    '), scope)",
    "return scope['answer'](self, dout)",
]


def test_reading_the_reference_through_the_graders_proc_entries_scores_nothing(student, level, monkeypatch):
    if level == "process" and os.geteuid() != 0:
        pytest.skip("not graded as root, the fallback runs the answer as the grader's own user, who may read the "
                    "grader's /proc entries (its guarantee line says so); bubblewrap hides them")
    monkeypatch.chdir(REFERENCE.parent)           # the instructor grades from the reference's checkout
    put_bodies(student, {"layernorm.backward": indented("layernorm.backward", *_STEAL)})
    assert grade(student, "layernorm", level).points == 0


def test_one_submission_cannot_change_the_next_ones_grade(student, level, tmp_path):
    reference = tmp_path / "reference" / "minitransformer"       # a reference this test may see corrupted
    shutil.copytree(REFERENCE, reference, ignore=shutil.ignore_patterns("__pycache__"))
    checker = reference / "gradcheck" / "checker.py"
    put_bodies(student, {"layernorm.backward": indented(
        "layernorm.backward",
        "try:",
        f"    with open({str(checker)!r}, 'a') as handle:",
        "        handle.write('\\ndef rel_error(analytic, numeric):\\n    return 0.0\\n')",
        "except OSError:",
        "    pass",
        "return np.zeros_like(dout)")})
    first = grade(student, "layernorm", level, reference=reference)
    nextone = tmp_path / "next"
    shutil.copytree(student, nextone)
    put_bodies(nextone, {"layernorm.backward": indented("layernorm.backward", "return np.zeros_like(dout)")})
    try:
        second = grade(nextone, "layernorm", level, reference=reference)
    except ReferenceChanged as error:                              # refusing to grade is also right
        second = error
    assert first.points == 0
    assert getattr(second, "points", 0) == 0


def test_a_copy_that_links_to_the_reference_scores_nothing(student, tmp_path):
    """Not in the issue's list, found on the way: a folder of the copy linked to the reference's (whose path
    is no secret: /autograder/grader on Gradescope) gave full marks, the grader reading the reference's bodies."""
    layers = student / "minitransformer" / "layers"
    shutil.rmtree(layers)
    layers.symlink_to(REFERENCE / "layers")
    grades = grade_copy(student, assignment(), isolation="process")
    assert [(g.status, g.points) for g in grades] == [("markers missing", 0), ("markers missing", 0)]
    assert "symbolic link" in grades[0].problems[0]
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "minitransformer").symlink_to(REFERENCE)
    with pytest.raises(FileNotFoundError, match="symbolic link"):
        grade_copy(linked, assignment(), isolation="process")


def test_an_edited_exercises_json_does_not_choose_what_is_graded(student, level):
    put_bodies(student, {"relu.backward": reference_body("relu.backward")})
    manifest = json.loads((student / "exercises.json").read_text(encoding="utf-8"))
    manifest.update(exercises=["relu"], regions=["relu.backward"])
    (student / "exercises.json").write_text(json.dumps(manifest), encoding="utf-8")
    grades = grade_copy(student, assignment(), isolation=level)
    assert {g.exercise: g.points for g in grades} == {"relu": 1, "layernorm": 0}


# ---------------------------------------------------------------- containment

def _daemon(token, then):
    """relu.backward that leaves a process behind (new session, double fork), then does `then`."""
    return indented(
        "relu.backward",
        "import os",
        "if os.fork() == 0:",
        "    try:",
        "        os.setsid()",
        "        if os.fork() == 0:",
        "            null = os.open(os.devnull, os.O_RDWR)",
        "            for fd in (0, 1, 2):",
        "                os.dup2(null, fd)",
        f"            os.execv('/bin/sh', ['/bin/sh', '-c', 'sleep 60; exit 0', {token!r}])",   # sh stays, token and all
        "    finally:",
        "        os._exit(0)",
        *then)


@pytest.mark.parametrize("ending", ["hangs", "returns"])
def test_a_process_left_behind_is_killed_with_its_exercise(student, level, ending):
    token = f"left-behind-{ending}-{os.getpid()}"
    # returning: after a second, so that the watcher below sees the daemon before its exercise ends
    then = ["while True:", "    pass"] if ending == "hangs" else ["import time", "time.sleep(1)",
                                                                   "return dout * self.positive"]
    put_bodies(student, {"relu.backward": _daemon(token, then)})
    seen, done = [], threading.Event()

    def watch():                                    # the daemon did start (else this test proves nothing)
        while not done.is_set() and not seen:
            seen.extend(_processes_with(token))
            time.sleep(0.02)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        # a hanging answer is stopped after 3 s; one that returns gets time to spare on a loaded machine
        result = grade(student, "relu", level, timeout=3 if ending == "hangs" else 60)
        done.set()
        watcher.join()
        time.sleep(0.3)
        survivors = _processes_with(token)
    finally:
        done.set()
        for pid in _processes_with(token):
            try:
                os.killpg(pid, signal.SIGKILL)            # its session's group: the shell and its sleep
            except ProcessLookupError:
                pass
    assert seen, "the answer's daemon never started"
    assert survivors == []
    assert result.status == ("timed out" if ending == "hangs" else "ok")


def test_memory_is_limited(student, level):
    put_bodies(student, {"relu.backward": indented(
        "relu.backward",
        "hoard = np.zeros(6 * 2**30, dtype=np.uint8)      # 6 GB of address space (calloc: never touched)",
        "return dout * self.positive")})
    result = grade(student, "relu", level)
    assert result.points == 0 and "MemoryError" in " ".join(result.problems)


def test_the_number_of_processes_is_limited(student, level):
    put_bodies(student, {"relu.backward": indented(
        "relu.backward",
        "import os, time",
        "children = []",
        "for _ in range(200):",
        "    pid = os.fork()",
        "    if pid == 0:",
        "        time.sleep(3)",
        "        os._exit(0)",
        "    children.append(pid)",
        "return dout * self.positive")})
    result = grade(student, "relu", level, timeout=30)
    assert result.points == 0 and "BlockingIOError" in " ".join(result.problems)


def test_file_size_is_limited(student, level):
    put_bodies(student, {"relu.backward": indented(
        "relu.backward",
        "import tempfile",
        "with tempfile.TemporaryFile() as handle:",
        "    for _ in range(200):",
        "        handle.write(bytes(2**20))                  # 200 MB",
        "return dout * self.positive")})
    result = grade(student, "relu", level)
    assert result.points == 0


@pytest.mark.parametrize("timeout", ["-1", "0", "nan", "inf"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(student, timeout, capsys):
    put_bodies(student, {"relu.backward": reference_body("relu.backward")})
    assert main(["exercises", "grade", str(student), "--only", "relu", "--timeout", timeout]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--timeout" in err[0] and timeout in err[0]


def test_a_right_answer_scores_full_marks_under_the_same_conditions(student, level):
    put_bodies(student, {name: reference_body(name) for name in ASSIGNED})
    grades = grade_copy(student, assignment(), isolation=level)
    assert [(g.exercise, g.status, g.points, g.max_points) for g in grades] == [
        ("relu", "ok", 1, 1), ("layernorm", "ok", 1, 1)]


def test_a_reference_changed_on_disk_refuses_to_grade(student, tmp_path, capsys):
    reference = tmp_path / "reference" / "minitransformer"
    shutil.copytree(REFERENCE, reference, ignore=shutil.ignore_patterns("__pycache__"))
    put_bodies(student, {"relu.backward": reference_body("relu.backward")})
    (before,) = grade_copy(student, assignment(), only=["relu"], isolation="process", reference=reference)
    assert before.points == 1
    with open(reference / "gradcheck" / "checker.py", "a", encoding="utf-8") as handle:        # what one submission might leave
        handle.write("\ndef rel_error(analytic, numeric):\n    return 0.0\n")
    with pytest.raises(ReferenceChanged, match=r"gradcheck/checker\.py changed.*refusing to grade"):
        grade_copy(student, assignment(), only=["relu"], isolation="process", reference=reference)


def test_the_command_refuses_a_changed_reference_in_one_line(student, tmp_path, monkeypatch, capsys):
    from minitransformer.commands import exercises as instructor

    reference = tmp_path / "reference" / "minitransformer"
    shutil.copytree(REFERENCE, reference, ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "assignment.json"
    write_assignment(path, new_assignment(ASSIGNED, reference, seed=19))
    (reference / "layers" / "layernorm.py").write_text("# emptied\n", encoding="utf-8")
    monkeypatch.setattr(instructor, "reference_package", lambda: reference)
    assert main(["exercises", "grade", str(student), "--assignment", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: exercises grade: the reference package ")
    assert "layers/layernorm.py changed" in err[0] and err[0].count("exercises grade:") == 1


# ---------------------------------------------------------------- the verdicts before issue 19, again

RECORD = json.loads((Path(__file__).parent / "fixtures" / "grading_verdicts.json").read_text(encoding="utf-8"))["verdicts"]

# What issue 19 changed on purpose: a backward is held to the gradient of the *reference* forward, so a
# wrong forward that leaves what the backward reads intact costs the forward's point only (cross-entropy's
# mistake counts ignored rows in the loss; the probabilities its backward reads are still right).
CHANGED = {("wrong forward", "crossentropy.backward"): (0, 1)}
# What grading with the student's own answers to the other assigned regions a case calls changed on purpose (the
# reference's answers to them were in the exercise's process before): multihead's cases call attention's forward,
# blank in a blank copy, so its forward fails there too, and says where.
CALLED = {("blank", "multihead"): {"forward_ok": False, "status": "failed in attention.forward, which it calls"}}


@pytest.fixture(scope="module")
def blank_everywhere(made, tmp_path_factory):
    """The shared copy with every region blank, as `exercises make` leaves an assigned one."""
    from minitransformer.exercises.regions import blank_regions

    copy = tmp_path_factory.mktemp("blank") / "student"
    shutil.copytree(made, copy)
    for relative in {relative for relative, _ in REGIONS.values()}:
        path = copy / "minitransformer" / relative
        path.write_text(blank_regions(path.read_text(encoding="utf-8"), set(REGIONS), relative), encoding="utf-8")
    return copy


def _level_kinds():
    """Every kind of answer under the strongest level here; the wrong backward under the fallback too (the
    numbers do not depend on the level; the tests above grade right answers and attacks under each level)."""
    strongest, fallback = LEVELS
    if strongest.marks:                                          # no bubblewrap: everything under the fallback
        return [pytest.param("process", kind, id=f"process-{kind}") for kind in KINDS]
    return ([pytest.param("bubblewrap", kind, id=f"bubblewrap-{kind}") for kind in KINDS]
            + [pytest.param("process", "wrong backward", id="process-wrong backward")])


@pytest.mark.parametrize(("level", "kind"), _level_kinds())
def test_the_recorded_verdicts_hold_but_where_the_issue_changed_them(blank_everywhere, tmp_path, level, kind):
    copy = tmp_path / "student"
    shutil.copytree(blank_everywhere, copy)
    put_bodies(copy, answers(kind))
    graded = sorted(name for name in REGIONS if name.split(".")[0] in RECORD[kind]      # the exercises 0.2 had
                    and (kind != "wrong forward"                                       # with a forward region
                         or any(other.startswith(name.split(".")[0] + ".") and other.endswith(".forward")
                                for other in REGIONS)))
    grades = grade_copy(copy, assignment(graded), isolation=level)
    assert {g.exercise for g in grades} == {name.split(".")[0] for name in graded}
    for g in grades:
        recorded = {**RECORD[kind][g.exercise], **CALLED.get((kind, g.exercise), {})}
        expected = {region: CHANGED.get((kind, region), (None, points))[1] for region, points in recorded["regions"].items()}
        assert {region: int(points > 0) for region, points in g.region_points.items()} == expected, g.exercise
        assert g.forward_ok == recorded["forward_ok"], g.exercise
        assert g.status == recorded["status"] or (kind, g.exercise) == ("wrong forward", "crossentropy"), g.exercise
    for (kind_changed, region), (before, _) in CHANGED.items():       # the tables record real changes
        assert RECORD[kind_changed][region.split(".")[0]]["regions"][region] == before
    for (kind_changed, exercise), now in CALLED.items():
        assert all(RECORD[kind_changed][exercise][what] != value for what, value in now.items())
