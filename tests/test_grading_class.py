"""A class at once: `exercises grade FOLDER --class` grades one sub-folder per student in parallel into a gradebook
in Canvas's import layout, resumably, with a summary per exercise; an empty, broken, enormous or hostile submission
costs its own row, never the run.
"""

import csv
import os
import shutil
import sys
import time

import pytest
from _grading_answers import REFERENCE, REGIONS, indented, make_once, put_bodies, reference_body, wrong_body

from minitransformer.__main__ import main
from minitransformer.exercises.assignment import new_assignment, write_assignment
from minitransformer.exercises.classroom import class_paths, grade_class, students
from minitransformer.exercises.isolation import LINUX_ONLY

if sys.platform != "linux":
    pytest.skip(LINUX_ONLY, allow_module_level=True)

GRADED = ["gelu.backward", "gelu.forward", "relu.backward"]
GOOD = {name: reference_body(name) for name in GRADED}
# student -> (what is in their folder, their points (relu, gelu)): one of each kind among good ones
CLASS = {
    "ada": (GOOD, (1, 2)),
    "ben": ({**GOOD, "gelu.forward": wrong_body("gelu.forward")}, (1, 0)),        # a wrong forward
    "cy": ({**GOOD, "relu.backward": wrong_body("relu.backward")}, (0, 2)),       # a wrong backward
    "dee": (None, (0, 0)),                                                        # an empty folder
    "eve": ({**GOOD, "relu.backward": indented("relu.backward", "return dout *")}, (0, 2)),     # a syntax error
    "fay": ("enormous", (0, 0)),                                                  # a 2 MB source file
    "gus": ({**GOOD, "relu.backward": indented(                                  # hostile: kills, then hangs
        "relu.backward", "import os, signal", "try:", "    os.kill(os.getppid(), signal.SIGKILL)",
        "except OSError:", "    pass", "while True:", "    pass")}, (0, 2)),
    "hal": ("link", (0, 0)),                                                      # a link to the reference
}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return make_once(tmp_path_factory, ["relu", "gelu"])


def make_class(made, folder, names=CLASS):
    """The class folder: one sub-folder per student of `names`, as CLASS describes it."""
    for name in names:
        contents = CLASS[name][0]
        if contents == "link":
            (folder / name).symlink_to(REFERENCE.parent, target_is_directory=True)
            continue
        (folder / name).mkdir(parents=True)
        if contents is None:
            continue
        shutil.copytree(made, folder / name, dirs_exist_ok=True)
        if contents == "enormous":
            with open(folder / name / "minitransformer" / "layers" / "activations.py", "a", encoding="utf-8") as handle:
                handle.write("# padding\n" * 200_000)
        else:
            put_bodies(folder / name, contents)
    return folder


@pytest.fixture
def assignment(tmp_path):
    path = tmp_path / "a.json"
    write_assignment(path, new_assignment(GRADED, REFERENCE, seed=11))
    return path


def grade(folder, assignment, *more):
    return main(["exercises", "grade", str(folder), "--class", "--assignment", str(assignment), "-j", "2",
                 "--timeout", "15", "--isolation", "process", *more])


@pytest.mark.sandbox
def test_a_class_is_graded_into_a_canvas_gradebook_each_bad_folder_costing_its_own_row(made, assignment, tmp_path,
                                                                                       capsys):
    folder = make_class(made, tmp_path / "class")
    assert grade(folder, assignment) == 0
    out = capsys.readouterr().out
    gradebook, _ = class_paths(folder)
    with open(gradebook, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["Student", "ID", "SIS User ID", "Section", "relu", "gelu", "Final Points"]
    assert rows[1] == ["Points Possible", "", "", "", "1", "2", "3"]
    assert {row[0]: tuple(map(int, row[4:])) for row in rows[2:]} == {
        name: (*points, sum(points)) for name, (_, points) in CLASS.items()}
    assert [row[2] for row in rows[2:]] == sorted(CLASS)                  # SIS User ID: the folder's name
    relu, gelu = (next(line for line in out.splitlines() if line.startswith(f"{name}: ")) for name in ("relu", "gelu"))
    assert relu.startswith("relu: 2 of 8 right; failed: backward 4; wrong most often: input 0 (x) 1; status: ")
    assert {"error 1", "markers missing 1", "timed out 1"} == set(relu.split("status: ")[1].split(", "))
    assert gelu.startswith("gelu: 4 of 8 right; failed: ") and {"forward 2", "backward 2"} <= set(
        gelu.split("failed: ")[1].split(";")[0].split(", "))
    assert "forward output 1" in gelu and "input 0 (x) 1" in gelu
    assert "not graded (2): dee, hal" in out
    assert f"wrote the gradebook {gradebook} (8 students)" in out


def test_a_class_run_again_grades_only_what_was_not_graded_or_changed(made, assignment, tmp_path, capsys):
    folder = make_class(made, tmp_path / "class", ["ada", "cy"])
    assert grade(folder, assignment) == 0
    _, grades = class_paths(folder)
    assert "2 students: 0 graded before, 2 to grade" in capsys.readouterr().out
    first = (grades / "ada.json").read_text(encoding="utf-8")
    make_class(made, folder, ["ben"])                   # a late submission, and what a crash leaves half-written
    (grades / ".cy.partial").write_text("{", encoding="utf-8")
    assert grade(folder, assignment) == 0
    out = capsys.readouterr().out
    assert "3 students: 2 graded before, 1 to grade" in out and "  ben: 1/3" in out and "  ada" not in out
    assert (grades / "ada.json").read_text(encoding="utf-8") == first
    put_bodies(folder / "cy", GOOD)                     # the student fixed their answer: graded again
    (grades / "ben.json").write_text("not json", encoding="utf-8")        # a damaged record: graded again
    assert grade(folder, assignment) == 0
    out = capsys.readouterr().out
    assert "3 students: 1 graded before, 2 to grade" in out and "  cy: 3/3" in out and "  ben: 1/3" in out


def killer(student, *args):
    """A worker task that dies on the student "b-killer" and grades the others (no exercise) in a second each."""
    if student.name == "b-killer":
        os._exit(9)
    time.sleep(1)
    return {"student": student.name, "grades": [], "error": None}


@pytest.mark.sandbox
def test_a_student_that_kills_its_grading_process_costs_its_own_row(made, tmp_path):
    folder = tmp_path / "class"
    for name in ("a", "b", "b-killer", "c", "d"):      # in flight with others (2 workers), pending before others
        (folder / name).mkdir(parents=True)
    assignment = new_assignment(GRADED, REFERENCE, seed=11)
    lines = []
    rows = grade_class(folder, assignment, REGIONS, 2, tmp_path / "grades", (None, None, None), say=lines.append,
                       task=killer)
    assert [(row["student"], row["error"]) for row in rows] == [
        ("a", None), ("b", None), ("b-killer", "its grading process died (killed?)"), ("c", None), ("d", None)]
    assert sum("b-killer: its grading process died" in line for line in lines) == 1
    assert [p.name for p in students(folder)] == ["a", "b", "b-killer", "c", "d"]


@pytest.mark.parametrize("args, message", [
    (["-j", "0"], "-j expected a whole number >= 1, got 0"),
    (["--json", "x.json"], "--json and --gradescope are for one copy"),
])
def test_class_options_that_make_no_sense_are_one_error_line(made, assignment, tmp_path, capsys, args, message):
    folder = make_class(made, tmp_path / "class", ["ada"])
    assert grade(folder, assignment, *args) == 2
    assert message in capsys.readouterr().err


def test_a_gradebook_without_a_class_and_a_class_without_students_are_refused(assignment, tmp_path, capsys):
    (tmp_path / "class").mkdir()
    assert grade(tmp_path / "class", assignment) == 2
    assert "holds no sub-folder: --class expects one folder per student" in capsys.readouterr().err
    assert main(["exercises", "grade", str(tmp_path), "--gradebook", str(tmp_path / "g.csv")]) == 2
    assert "--gradebook is for a class (--class)" in capsys.readouterr().err


@pytest.mark.sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="as the grader's own user an answer may signal all the grader's processes")
def test_an_answer_cannot_kill_another_students_answer_graded_at_the_same_time(made, assignment, tmp_path, capsys):
    """Under the fallback every answer runs as nobody: one that signals every process of nobody's it finds (here only
    the other student's, named by a token, so as to spare other nobody processes) kills none of them."""
    token = f"victim{os.getpid() % 10**6}"
    victim = indented("relu.backward", "import ctypes, time", f"ctypes.CDLL(None).prctl(15, b'{token}', 0, 0, 0)",
                      "time.sleep(4)") + reference_body("relu.backward")             # PR_SET_NAME, then slow
    hunter = indented("relu.backward", "import os, signal, time", "end = time.time() + 12", "while time.time() < end:",
                      "    for pid in filter(str.isdigit, os.listdir('/proc')):", "        try:",
                      f"            if open(f'/proc/{{pid}}/comm').read().strip() == '{token}':",
                      "                os.kill(int(pid), signal.SIGKILL)", "        except OSError:", "            pass")
    folder = make_class(made, tmp_path / "class", ["ada", "ben"])
    put_bodies(folder / "ada", {"relu.backward": victim})
    put_bodies(folder / "ben", {"relu.backward": hunter})
    assert grade(folder, assignment) == 0
    assert "  ada: 3/3" in capsys.readouterr().out
