"""A class at once: `exercises grade FOLDER --class` grades one sub-folder per student in parallel into a gradebook
in Canvas's import layout, resumably, with a summary per exercise; an empty, broken, enormous or hostile submission
costs its own row, never the run.

The first tests grade a class in the sandbox (seconds each). The gradebook, the summary, the paths, the students and
the fingerprint that resumes are then held by hand on rows and copies written out here, with points that are not one
per region (so that a count of regions, or partial credit taken as right, shows), and the class run on worker tasks
that grade nothing (a fraction of a second each).
"""

import csv
import os
import shutil
import sys
import time
from dataclasses import asdict

import pytest
from _grading_answers import REFERENCE, REGIONS, indented, make_once, put_bodies, reference_body, wrong_body

from minitransformer.__main__ import main
from minitransformer.exercises import classroom
from minitransformer.exercises.assignment import Assignment, ReferenceChanged, new_assignment, write_assignment
from minitransformer.exercises.classroom import class_paths, grade_class, students
from minitransformer.exercises.grade import SOURCE_LIMIT, ExerciseGrade
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


# ---------------------------------------------------------------- the gradebook, the summary, the paths: by hand
# An assignment whose points are not one per region (relu 0.5; gelu 3: its forward 1, its backward 2), so that a sum
# of regions, or full marks taken for any points, gives other numbers than these.
POINTS = {"gelu.backward": 2, "gelu.forward": 1, "relu.backward": 0.5}


def saved_grade(exercise, earned, status=None, wrong=()):
    """One exercise's grade as a student's saved row holds it (an ExerciseGrade as a dict): `earned` {region: points};
    `wrong`: per case, the arrays found wrong."""
    worth = {region: points for region, points in POINTS.items() if region.startswith(f"{exercise}.")}
    points = sum(earned.values())
    status = status or ("ok" if points == sum(worth.values()) else "wrong")
    return asdict(ExerciseGrade(exercise, [exercise], sorted(worth), status, points=points,
                                max_points=sum(worth.values()), region_points=dict(earned), region_max=worth,
                                cases=[{"case": f"case {number}", "wrong": list(arrays)}
                                       for number, arrays in enumerate(wrong)]))


def relu(status=None):
    return saved_grade("relu", {"relu.backward": 0.5 if status is None else 0}, status)


def gelu(forward=1, backward=2, wrong=()):
    return saved_grade("gelu", {"gelu.backward": backward, "gelu.forward": forward}, wrong=wrong)


def row(student, *grades, error=None):
    return {"student": student, "grades": list(grades), "error": error}


CLASS_ROWS = [
    row("ada", relu(), gelu()),
    row("ben", relu(), gelu(backward=0, wrong=[["input 0 (x)"], ["input 0 (x)"]])),       # partial credit: 1 of 3
    row("cy", relu("error"), gelu(0, 0, wrong=[["forward output", "input 0 (x)"], ["forward output"]])),
    row("dee", error="FileNotFoundError: no minitransformer package in dee"),
    row("eve", relu("error"), gelu()),
    row("fay", relu("timed out"), gelu()),
    row("gus", relu("crashed"), gelu()),
    row("hal", relu("markers missing"), gelu()),
]


def test_the_gradebook_is_canvass_layout_its_points_possible_the_sum_of_each_exercises_points(tmp_path):
    """Canvas's four columns, one per exercise in the catalogue's order, Final Points; a row not graded scores 0."""
    path = tmp_path / "class.gradebook.csv"
    classroom.write_gradebook(path, CLASS_ROWS[:4], Assignment(POINTS, seed=1))
    assert path.read_bytes().decode("utf-8").split("\r\n") == [
        "Student,ID,SIS User ID,Section,relu,gelu,Final Points",
        "Points Possible,,,,0.5,3,3.5",
        "ada,,ada,,0.5,3,3.5",
        "ben,,ben,,0.5,1,1.5",
        "cy,,cy,,0,0,0",
        "dee,,dee,,0,0,0",
        ""]
    assert [p.name for p in tmp_path.iterdir()] == [path.name]           # written whole, by a rename


def test_the_summary_counts_full_marks_alone_as_right_and_each_student_once(tmp_path):
    """By hand from CLASS_ROWS: ben's gelu (1 of 3) is not right; x wrong in two of ben's cases counts ben once;
    statuses other than ok and wrong, the three most common (ties in the students' order); dee is not graded."""
    assert classroom.summary(CLASS_ROWS, Assignment(POINTS, seed=1)).splitlines() == [
        "relu: 2 of 8 right; failed: backward 5; status: error 2, timed out 1, crashed 1",
        "gelu: 5 of 8 right; failed: backward 2, forward 1; wrong most often: input 0 (x) 2, forward output 1",
        "not graded (1): dee"]
    assert classroom.summary(CLASS_ROWS[:1], Assignment(POINTS, seed=1)) == "relu: 1 of 1 right\ngelu: 1 of 1 right"


def test_the_gradebook_and_the_grades_go_beside_the_class_or_beside_the_gradebook_given(tmp_path, monkeypatch):
    (tmp_path / "class").mkdir()
    beside = (tmp_path / "class.gradebook.csv", tmp_path / "class.gradebook.grades")
    assert class_paths(tmp_path / "class") == beside
    monkeypatch.chdir(tmp_path / "class")
    assert class_paths(".") == beside
    assert class_paths(".", tmp_path / "marks.csv") == (tmp_path / "marks.csv", tmp_path / "marks.grades")


def test_the_students_are_the_sub_folders_by_name_without_hidden_ones_or_files(tmp_path):
    for name in ("b", "a", "B", ".ipynb_checkpoints"):
        (tmp_path / name).mkdir()
    (tmp_path / "notes.txt").write_text("not a student", encoding="utf-8")
    assert [p.name for p in students(tmp_path)] == ["B", "a", "b"]
    for child in tmp_path.iterdir():
        if child.name != ".ipynb_checkpoints":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    with pytest.raises(FileNotFoundError, match="holds no sub-folder"):
        students(tmp_path)


# ---------------------------------------------------------------- one student's grading, the fingerprint that resumes
def test_a_students_row_names_their_folder_and_what_stopped_their_grading(tmp_path, monkeypatch):
    """Any error is that student's row, cut to 500 characters; a reference that changed under the run stops it."""
    grade = ExerciseGrade("relu", ["relu"], ["relu.backward"], points=0.5, max_points=0.5)
    outcomes = iter([[grade], ValueError("x" * 600), ReferenceChanged("the reference changed")])

    def fake_grade_copy(student, assignment, **options):
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(classroom, "grade_copy", fake_grade_copy)
    ada = (tmp_path / "class" / "ada", None, None, None, None)
    assert classroom.grade_student(*ada) == {"student": "ada", "grades": [asdict(grade)], "error": None}
    assert classroom.grade_student(*ada) == {"student": "ada", "grades": [], "error": "ValueError: " + "x" * 488}
    with pytest.raises(ReferenceChanged):
        classroom.grade_student(*ada)


def fingerprint(folder, files, assignment):
    """The fingerprint of a copy in `folder` whose package holds `files` {path in the package: text}."""
    for relative, text in {"__init__.py": "", **files}.items():
        (folder / "minitransformer" / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / "minitransformer" / relative).write_text(text, encoding="utf-8")
    return classroom.fingerprint(folder, assignment, REGIONS)


def test_a_grade_is_kept_while_the_assignment_and_every_file_graded_stay_the_same(tmp_path):
    """Graded here: gelu (layers/activations.py) and layernorm (layers/layernorm.py); layers/linear.py is not."""
    assignment = Assignment({"gelu.forward": 1, "layernorm.backward": 1}, seed=1)
    files = {"layers/activations.py": "gelu", "layers/layernorm.py": "layernorm", "layers/linear.py": "linear"}
    ada = fingerprint(tmp_path / "ada", files, assignment)
    assert fingerprint(tmp_path / "ben", files, assignment) == ada                          # the same files
    assert fingerprint(tmp_path / "cy", {**files, "layers/linear.py": "changed"}, assignment) == ada
    for changed in ("layers/activations.py", "layers/layernorm.py"):
        assert fingerprint(tmp_path / changed.replace("/", " "), {**files, changed: "changed"}, assignment) != ada
    for other in (Assignment({"gelu.forward": 2, "layernorm.backward": 1}, seed=1),
                  Assignment({"gelu.forward": 1, "layernorm.backward": 1}, seed=2)):
        assert fingerprint(tmp_path / "ada", files, other) != ada, other


def test_the_fingerprint_reads_one_byte_past_the_graded_size_and_follows_no_link(tmp_path):
    """A file one byte over SOURCE_LIMIT is refused when graded; trimmed to the limit it must be graded again. A link
    in place of a graded file is not read (it could point anywhere): the copy is as one without that file."""
    assignment = Assignment({"gelu.forward": 1}, seed=1)
    at_limit = "#" * SOURCE_LIMIT
    over = fingerprint(tmp_path / "over", {"layers/activations.py": at_limit + "#"}, assignment)
    assert fingerprint(tmp_path / "at", {"layers/activations.py": at_limit}, assignment) != over
    (tmp_path / "elsewhere.py").write_text("gelu", encoding="utf-8")
    (tmp_path / "linked" / "minitransformer" / "layers").mkdir(parents=True)
    (tmp_path / "linked" / "minitransformer" / "layers" / "activations.py").symlink_to(tmp_path / "elsewhere.py")
    assert fingerprint(tmp_path / "linked", {}, assignment) == fingerprint(tmp_path / "none", {}, assignment)


# ---------------------------------------------------------------- the class run, on worker tasks that grade nothing
def scripted(student, assignment, *grade_args):
    """A worker task that grades a student as CLASS_ROWS says (its grades, not its folder)."""
    return next(r for r in CLASS_ROWS if r["student"] == student.name)


def test_a_class_run_says_each_students_points_out_of_the_points_and_grades_again_only_what_it_cannot_read(tmp_path):
    """Three students (ada 3.5 points, ben 1.5, dee not graded) of 3.5 points possible, two at a time; then again:
    nothing to grade; then a record that is not JSON, and one that is JSON but not a row: each graded again alone."""
    folder, grades, assignment = tmp_path / "class", tmp_path / "grades", Assignment(POINTS, seed=1)
    for name in ("ada", "ben", "dee"):
        (folder / name).mkdir(parents=True)

    def run():
        lines = []
        rows = grade_class(folder, assignment, REGIONS, 2, grades, (None, None, None), say=lines.append, task=scripted)
        assert [row["student"] for row in rows] == ["ada", "ben", "dee"]
        return lines[0], sorted(lines[1:])

    assert run() == (f"3 students: 0 graded before, 3 to grade (2 at a time); grades kept in {grades}",
                     ["  ada: 3.5/3.5", "  ben: 1.5/3.5", "  dee: FileNotFoundError: no minitransformer package in dee"])
    assert run() == (f"3 students: 3 graded before, 0 to grade (1 at a time); grades kept in {grades}", [])
    for damaged, record in (("ben", "not json"), ("ada", "[]")):
        (grades / f"{damaged}.json").write_text(record, encoding="utf-8")
        assert run()[0] == f"3 students: 2 graded before, 1 to grade (1 at a time); grades kept in {grades}"


def meet(student, assignment, meeting, *grade_args):
    """A worker task that says it is here and waits (a minute at most) for the other student's task to be too."""
    (meeting / student.name).touch()
    other = meeting / ({"ada": "ben", "ben": "ada"}[student.name])
    for _ in range(600):
        if other.exists():
            return {"student": student.name, "grades": [], "error": None}
        time.sleep(0.1)
    return {"student": student.name, "grades": [], "error": "graded alone"}


def test_a_class_is_graded_by_as_many_processes_at_once_as_asked(tmp_path):
    """Two students, -j 2: each one's task runs while the other's does (one at a time, the first would wait alone)."""
    (tmp_path / "meeting").mkdir()
    for name in ("ada", "ben"):
        (tmp_path / "class" / name).mkdir(parents=True)
    rows = grade_class(tmp_path / "class", Assignment(POINTS, seed=1), REGIONS, 2, tmp_path / "grades",
                       (tmp_path / "meeting", None, None), say=lambda line: None, task=meet)
    assert [(row["student"], row["error"]) for row in rows] == [("ada", None), ("ben", None)]
