"""`exercises grade FOLDER --class`: a whole class, one sub-folder per student, graded in parallel by `jobs` worker
processes (each keeps the reference's numbers from one student to the next), resumably: a student's grade is kept in
`<gradebook>.grades/<student>.json` (written by a rename) the moment it is done, and a student whose file is there
for this assignment and these files is not graded again. Then the gradebook, in Canvas's import layout (Student, ID,
SIS User ID, Section, a column per exercise, Final Points: the total; the second row, the points possible), and a
summary per exercise. A folder without a copy, a broken or enormous copy, or one that kills its grading process
costs that student's row (0 points and why), never the run. The instructor's guide:
docs/guide/instructors-class-grading.md.
"""

import csv
import hashlib
import json
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import suppress
from dataclasses import asdict
from pathlib import Path

from .assignment import ReferenceChanged
from .grade import SOURCE_LIMIT, grade_copy, student_package

COLUMNS = ("Student", "ID", "SIS User ID", "Section")       # Canvas's first four; the student's folder is the name


def class_paths(folder, gradebook=None):
    """(the gradebook CSV, the folder of per-student grades): by default `<folder>.gradebook.csv` beside the class."""
    folder = Path(folder).resolve()
    gradebook = Path(gradebook) if gradebook else folder.with_name(f"{folder.name}.gradebook.csv")
    return gradebook, gradebook.with_name(f"{gradebook.stem}.grades")


def students(folder):
    """The sub-folders of `folder` (one per student), by name; FileNotFoundError when there is none."""
    found = sorted((p for p in Path(folder).iterdir() if p.is_dir() and not p.name.startswith(".")), key=str)
    if not found:
        raise FileNotFoundError(f"{folder} holds no sub-folder: --class expects one folder per student")
    return found


def fingerprint(student, assignment, regions):
    """What a grade is computed from: the assignment, and the student's files that hold its regions."""
    digest = hashlib.sha256(json.dumps(assignment.to_json(), sort_keys=True).encode())
    with suppress(OSError):                                 # no copy in the folder: the assignment alone
        package = student_package(student)
        for relative in sorted({regions[name][0] for name in assignment.points}):
            if (package / relative).is_file() and not (package / relative).is_symlink():
                with open(package / relative, "rb") as handle:
                    digest.update(relative.encode() + handle.read(SOURCE_LIMIT + 1))
    return digest.hexdigest()


def grade_student(student, assignment, limits, isolation, reference):
    """A worker's task: {"student", "grades": [ExerciseGrade as dict], "error": why it could not be graded, or None}."""
    try:
        grades = grade_copy(student, assignment, limits=limits, isolation=isolation, reference=reference)
        return {"student": Path(student).name, "grades": [asdict(grade) for grade in grades], "error": None}
    except ReferenceChanged:
        raise
    except Exception as error:                              # this student's folder only: its own row says why
        return {"student": Path(student).name, "grades": [], "error": f"{type(error).__name__}: {error}"[:500]}


def _saved(grades_dir, student):
    """The saved row of `student` ({} when none, or unreadable)."""
    with suppress(OSError, ValueError):
        row = json.loads((grades_dir / f"{student.name}.json").read_text(encoding="utf-8"))
        return row if isinstance(row, dict) else {}
    return {}


def _run_pool(todo, workers, task, args, done):
    """Grade `todo` with `workers` processes, `done(student, row)` as each ends; returns those whose worker died."""
    broken = []
    with ProcessPoolExecutor(workers) as pool:
        futures = {pool.submit(task, student, *args): student for student in todo}
        for future in as_completed(futures):
            try:
                done(futures[future], future.result())
            except BrokenProcessPool:
                broken.append(futures[future])
    return broken


def grade_class(folder, assignment, regions, jobs, grades_dir, grade_args, say=print, task=grade_student):
    """Grade the students of `folder` not graded before into `grades_dir`; grade_args: (limits, isolation, reference)."""
    everyone, grades_dir = students(folder), Path(grades_dir)
    grades_dir.mkdir(exist_ok=True)
    prints = {student: fingerprint(student, assignment, regions) for student in everyone}
    todo = [s for s in everyone if _saved(grades_dir, s).get("fingerprint") != prints[s]]
    say(f"{len(everyone)} students: {len(everyone) - len(todo)} graded before, {len(todo)} to grade "
        f"({min(jobs, len(todo) or 1)} at a time); grades kept in {grades_dir}")

    def done(student, row):                                 # kept at once, by a rename: an interruption loses none
        (grades_dir / f".{student.name}.partial").write_text(json.dumps({**row, "fingerprint": prints[student]}), encoding="utf-8")
        (grades_dir / f".{student.name}.partial").replace(grades_dir / f"{student.name}.json")
        points = sum(g["points"] for g in row["grades"])
        say(f"  {student.name}: {row['error'] or f'{points:g}/{sum(assignment.points.values()):g}'}")

    broken = _run_pool(todo, jobs, task, (assignment, *grade_args), done)
    for student in broken:                                  # apart, one pool each: only a culprit breaks its own
        for _ in _run_pool([student], 1, task, (assignment, *grade_args), done):
            done(student, {"student": student.name, "grades": [], "error": "its grading process died (killed?)"})
    return [_saved(grades_dir, student) for student in everyone]


def write_gradebook(path, rows, assignment):
    """The gradebook CSV at `path` (replaced): Canvas's columns, the points possible, one row per student."""
    most = {exercise.name: sum(points.values()) for exercise, points in assignment.exercises()}
    lines = [[*COLUMNS, *most, "Final Points"], ["Points Possible", "", "", "", *(f"{p:g}" for p in most.values()),
                                          f"{sum(most.values()):g}"]]
    for row in rows:
        points = {g["exercise"]: g["points"] for g in row.get("grades", [])}
        lines.append([row["student"], "", row["student"], "", *(f"{points.get(name, 0):g}" for name in most),
                      f"{sum(points.values()):g}"])
    partial = Path(path).with_name(f".{Path(path).name}.partial")
    with open(partial, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(lines)
    partial.replace(path)


def summary(rows, assignment):
    """Per exercise: how many got it right, and what failed most: the forward, the backward, which array."""
    lines, graded = [], [row for row in rows if not row.get("error")]
    for exercise, points in assignment.exercises():
        mine = [g for row in graded for g in row["grades"] if g["exercise"] == exercise.name]
        right = sum(g["points"] == g["max_points"] for g in mine)
        failed = Counter(region.rsplit(".", 1)[1] for g in mine for region in points if not g["region_points"][region])
        arrays = Counter(what for g in mine for what in {w for case in g["cases"] for w in case.get("wrong", [])})
        statuses = Counter(g["status"] for g in mine if g["status"] not in ("ok", "wrong"))
        lines.append(f"{exercise.name}: {right} of {len(rows)} right" + "".join(
            f"; {what}: {', '.join(f'{name} {count}' for name, count in counter.most_common(3))}"
            for what, counter in (("failed", failed), ("wrong most often", arrays), ("status", statuses)) if counter))
    errors = [row["student"] for row in rows if row.get("error")]
    return "\n".join(lines + ([f"not graded ({len(errors)}): {', '.join(errors)}"] if errors else []))
