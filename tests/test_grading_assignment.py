"""The instructor's assignment (issue 19): written by `exercises make` beside the copy, the only thing that
says what `exercises grade` grades, for how many points, on which inputs."""

import json
import shutil
import sys

import pytest
from _grading_answers import REFERENCE, REGIONS, put_bodies, reference_body, wrong_body

from minitransformer.__main__ import main
from minitransformer.exercises.assignment import (
    AssignmentError,
    new_assignment,
    read_assignment,
    reference_files,
    write_assignment,
)
from minitransformer.exercises.grade import grade_copy
from minitransformer.exercises.isolation import LINUX_ONLY
from minitransformer.exercises.make import make_student_copy

if sys.platform != "linux":
    pytest.skip(LINUX_ONLY, allow_module_level=True)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("made") / "student"
    make_student_copy(out, only=["relu", "layernorm.backward"])
    return out


@pytest.fixture
def student(made, tmp_path):
    copy = tmp_path / "student"
    shutil.copytree(made, copy)
    return copy


def _one_error(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_make_writes_the_assignment_beside_the_copy_and_never_over_one(tmp_path, capsys):
    copy = tmp_path / "student"
    assert main(["exercises", "make", str(copy), "--only", "relu"]) == 0
    path = tmp_path / "student.assignment.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["exercises"] == [{"name": "relu", "points": {"relu.backward": 1}}]
    assert data["reference"]["files"] == reference_files(REFERENCE)          # the reference it grades against, pinned
    assert isinstance(data["seed"], int) and not list(copy.glob("*assignment*"))
    capsys.readouterr()
    before = path.read_text(encoding="utf-8")
    assert main(["exercises", "make", str(tmp_path / "second"), "--only", "relu", "--assignment", str(path)]) == 2
    line = _one_error(capsys)
    assert "exists already" in line and "--force" in line
    assert path.read_text(encoding="utf-8") == before and not (tmp_path / "second").exists()      # checked before the copy
    assert main(["exercises", "make", str(tmp_path / "third"), "--only", "relu", "--assignment",
                 str(tmp_path / "third" / "a.json")]) == 2
    assert "inside the student copy" in _one_error(capsys) and not (tmp_path / "third").exists()


def test_grade_needs_an_assignment_and_says_so_once(student, capsys):
    assert main(["exercises", "grade", str(student)]) == 2
    line = _one_error(capsys)
    assert line.count("exercises grade:") == 1 and "--assignment" in line


def test_the_assignment_file_is_checked_field_by_field(student, tmp_path, capsys):
    good = new_assignment(["relu.backward"], REFERENCE, seed=5).to_json()
    bad = {"seed": -1, "tolerance": 0, "points": 0, "region": "relu.forward", "format": "v0"}
    for what, value in bad.items():
        data = json.loads(json.dumps(good))
        if what in ("seed", "tolerance", "format"):
            data[what] = value
        elif what == "points":
            data["exercises"][0]["points"]["relu.backward"] = value
        else:
            data["exercises"][0]["points"] = {value: 1}
        path = tmp_path / f"{what}.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        with pytest.raises(AssignmentError, match=str(path)):
            read_assignment(path, REGIONS)
        assert main(["exercises", "grade", str(student), "--assignment", str(path)]) == 2
        line = _one_error(capsys)
        assert str(path) in line and line.count("exercises grade:") == 1
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    with pytest.raises(AssignmentError, match="not valid JSON"):
        read_assignment(tmp_path / "broken.json", REGIONS)


def test_only_what_the_assignment_grades_is_graded_for_its_points(student, tmp_path, capsys):
    put_bodies(student, {"relu.backward": reference_body("relu.backward")})
    assignment = new_assignment(["relu.backward"], REFERENCE, seed=5)
    assignment.points["relu.backward"] = 2.5
    path = write_assignment(tmp_path / "a.json", assignment)
    report = tmp_path / "grades.json"
    assert main(["exercises", "grade", str(student), "--assignment", str(path), "--json", str(report)]) == 0
    result = json.loads(report.read_text(encoding="utf-8"))
    assert (result["points"], result["max_points"], [e["exercise"] for e in result["exercises"]]) == (2.5, 2.5, ["relu"])
    err = capsys.readouterr().err                        # the copy's own list differs: said, and not used
    assert "note: the copy's exercises.json lists layernorm.backward, relu.backward" in err
    assert main(["exercises", "grade", str(student), "--assignment", str(path), "--only", "layernorm"]) == 2
    assert "not in the assignment" in _one_error(capsys)


def test_a_regrade_is_identical_and_the_seed_draws_the_inputs(student):
    put_bodies(student, {"layernorm.backward": wrong_body("layernorm.backward")})
    assignment = new_assignment(["layernorm.backward"], REFERENCE, seed=11)
    first, again = (grade_copy(student, assignment, isolation="process")[0] for _ in range(2))
    other = grade_copy(student, new_assignment(["layernorm.backward"], REFERENCE, seed=12), isolation="process")[0]
    assert first.points == again.points == other.points == 0
    assert first.backward_error == again.backward_error != other.backward_error
    assert first.problems == again.problems != other.problems
