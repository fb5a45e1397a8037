"""Grade a student copy by the instructor's assignment, the verdict out of the student's reach.

For each exercise of the assignment (`assignment.py`), the grader

1. checks the reference package against the assignment's hashes (one submission cannot change
   another's grade);
2. reads the student's answer from between the SOLUTION markers of the assigned regions (nothing
   else of the copy is run or read, its exercises.json included);
3. builds a temporary package: the reference as a copy for this one exercise holds it, with the
   student's answer put in (building blocks are the reference's: attention is graded with the
   reference softmax);
4. computes the reference's numbers here (`verdict.py`), on inputs drawn from the assignment's seed;
5. runs `runner.py` contained (`isolation.py`) on those inputs, and reads the arrays it hands back
   as untrusted; `verdict.judge` compares them.

A `.forward` region earns its points when every case's output is within the tolerance, a
`.backward` region when every gradient of every case is. A hang, a crash or an exception costs that
exercise its points and is reported; it never stops the grading. What this cannot catch (an answer
that computes the right numbers another way, one copied, one reading world-readable files under
the process fallback): README.md, "What grading cannot catch". Left out: partial credit in a region.
"""

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from .assignment import Assignment, read_assignment, verify_reference
from .isolation import Limits, choose_isolation, count_processes, new_workdir, open_for_student, run_contained
from .make import check_is_reference, read_manifest, reference_package
from .regions import find_regions, package_regions, replace_regions
from .verdict import OutputRefused, expected_shapes, judge, read_arrays, read_records, reference_cases, task_inputs

RUNNER = Path(__file__).resolve().with_name("runner.py")


@dataclass
class ExerciseGrade:
    exercise: str
    layers: list
    regions: list                      # the graded regions
    status: str = "ok"                 # ok, wrong, not implemented, error, timed out, crashed, markers missing
    forward_ok: bool = False
    backward_error: float = None       # worst relative error over the cases, None if never computed
    points: float = 0
    max_points: float = 0
    region_points: dict = field(default_factory=dict)    # region -> points earned
    region_max: dict = field(default_factory=dict)       # region -> points it is worth
    problems: list = field(default_factory=list)
    cases: list = field(default_factory=list)


def student_package(directory):
    """The `minitransformer` package inside a student copy (or the directory itself if it is the package).

    A copy handed in inside one folder (`submission/student/minitransformer/`) is found too; a package that
    is a symbolic link is refused (it could point at the reference).
    """
    directory = Path(directory)
    candidates = [directory / "minitransformer", directory]
    if directory.is_dir():
        candidates += sorted(p.parent for p in directory.glob("*/minitransformer/__init__.py"))[:1]
    for candidate in candidates:
        if (candidate / "__init__.py").is_file() and candidate.name == "minitransformer":
            if candidate.is_symlink() or candidate.parent.is_symlink() and candidate.parent != directory:
                raise FileNotFoundError(f"{candidate} is a symbolic link; hand in the copy itself")
            return candidate
    raise FileNotFoundError(f"no minitransformer package in {directory} (hand in the student copy: the folder "
                            f"that holds minitransformer/)")


SOURCE_LIMIT = 2**20                  # bytes of a student's source file the grader reads


def _check_plain(student_pkg, relative):
    """Raise LookupError unless `relative` is a plain file of the copy: no symbolic link on the way (one could
    point at the reference's own file, or at a file of the grader's), and not larger than SOURCE_LIMIT."""
    path = student_pkg
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink():
            raise LookupError(f"{Path(relative).as_posix()}: {path.relative_to(student_pkg).as_posix()} is a "
                              f"symbolic link; hand in the files themselves")
    if path.stat().st_size > SOURCE_LIMIT:
        raise LookupError(f"{Path(relative).as_posix()} is larger than {SOURCE_LIMIT} bytes")


def _student_bodies(student_pkg, names, reference_regions):
    """dict region name -> the student's lines between its markers; raise LookupError naming what is missing."""
    bodies, by_file = {}, {}
    for name in names:
        by_file.setdefault(reference_regions[name][0], []).append(name)
    for relative, wanted in by_file.items():
        path = student_pkg / relative
        if not path.is_file():
            raise LookupError(f"{relative} is missing from the student copy")
        _check_plain(student_pkg, relative)
        try:
            found = {r.name: r for r in find_regions(path.read_text(encoding="utf-8"), relative)}
        except UnicodeDecodeError:
            raise LookupError(f"{relative} is not UTF-8 text") from None
        except ValueError as error:
            raise LookupError(f"the SOLUTION markers are broken: {error}") from None
        for name in wanted:
            if name not in found:
                raise LookupError(f"{relative} has no '### BEGIN SOLUTION {name}' ... '### END SOLUTION' region; "
                                  f"keep the markers around your answer")
            bodies[name] = found[name].body
    return bodies


def _build_package(target, reference, bodies, reference_regions):
    """The temporary package: the reference as a student copy for this one exercise holds it (its regions blank,
    its fast form left out: `make._copy_package`), with the student's answer put in."""
    from .make import _copy_package

    _copy_package(reference, target, sorted(bodies), reference_regions)
    for relative in sorted({reference_regions[name][0] for name in bodies}):
        path = target / relative
        path.write_text(replace_regions(path.read_text(), bodies, relative))


def _error_of_crash(stderr):
    """The last line of what a crashed process wrote on stderr (the exception, usually)."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"


def _score(grade, verdicts, points):
    """Fill forward_ok, backward_error, points, status and problems from the case verdicts."""
    grade.cases = [asdict(v) for v in verdicts]
    grade.forward_ok = bool(verdicts) and all(v.forward_ok for v in verdicts)
    backward_ok = bool(verdicts) and all(v.backward_ok for v in verdicts)
    computed = [v.backward_error for v in verdicts if v.backward_error is not None]
    grade.backward_error = max(computed) if computed else None
    for name, worth in points.items():
        grade.region_points[name] = worth if (grade.forward_ok if name.endswith(".forward") else backward_ok) else 0
    grade.points = sum(grade.region_points.values())
    grade.problems += [problem for v in verdicts for problem in v.problems]
    raised = [message for v in verdicts for message in v.raised]
    if grade.points == grade.max_points:
        grade.status = "ok"
    elif any(message.startswith("not implemented") for message in raised):
        grade.status = "not implemented"
    else:
        grade.status = "error" if raised else "wrong"


def _task(isolation, workdir, cases, limits):
    """Write the task the runner reads (task.json, inputs.npz) into the job directory `workdir`."""
    paths = isolation.paths(workdir)
    uid = isolation.user[0] if isolation.user else os.geteuid()
    count = count_processes(uid) if uid != 0 else None       # RLIMIT_NPROC never holds for root
    arrays, specs = task_inputs(cases)
    np.savez(workdir / "task" / "inputs.npz", **arrays)
    (workdir / "task" / "task.json").write_text(json.dumps({
        "package_root": paths["package_root"], "site": paths["site"], "cases": specs,
        "user": list(isolation.user) if isolation.user else None, "preload": isolation.preload(),
        "nproc": None if count is None else count + limits.processes,
        "limits": {"memory_mb": limits.memory_mb, "file_mb": limits.file_mb}}))


def _run_student(isolation, workdir, limits):
    """Run the runner contained; the outcome, and the paths of the two files it wrote through descriptors."""
    private = workdir / "private"
    result, arrays = private / "result.json", private / "arrays.npz"
    fds = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for path in (result, arrays)]
    try:
        outcome = run_contained(isolation, workdir, [isolation.paths(workdir)["task"], *map(str, fds)], limits,
                                tuple(fds), private / "stdout.txt", private / "stderr.txt")
    finally:
        for fd in fds:
            os.close(fd)
    return outcome, result, arrays


def _student_arrays(grade, isolation, workdir, cases, limits):
    """(records, arrays) the student's process handed back, read as untrusted; None, with the grade's status
    and problem said, when it timed out, crashed or handed back what a runner does not write."""
    outcome, result, arrays = _run_student(isolation, workdir, limits)
    if outcome.timed_out:
        grade.status, grade.problems = "timed out", [f"stopped after the time limit of {limits.timeout:g} s "
                                                     f"(an endless loop?)"]
    elif outcome.returncode != 0:
        grade.status, grade.problems = "crashed", [f"the grading process ended with exit code {outcome.returncode}: "
                                                   f"{_error_of_crash(outcome.stderr)}"]
    else:
        try:
            return read_records(result, {case.key for case in cases}), read_arrays(arrays, expected_shapes(cases))
        except OutputRefused as error:
            grade.status, grade.problems = "crashed", [f"refused what the student's process handed back: {error}"]
    return None


def grade_exercise(exercise, points, student_pkg, reference, reference_regions, assignment, limits, isolation,
                   seed=None):
    """Grade one exercise of the student package; `points` maps its graded regions to their points.

    Returns:
        ExerciseGrade.
    """
    grade = ExerciseGrade(exercise.name, list(exercise.layers), sorted(points), max_points=sum(points.values()),
                          region_points=dict.fromkeys(points, 0), region_max=dict(points))
    try:
        bodies = _student_bodies(student_pkg, sorted(points), reference_regions)
    except LookupError as error:
        grade.status, grade.problems = "markers missing", [str(error)]
        return grade
    verify_reference(reference, assignment)                 # before each exercise: nobody changed it since
    cases = reference_cases(tuple(exercise.layers), assignment.seed if seed is None else seed, assignment.tolerance)
    workdir = new_workdir(isolation, f"grade-{exercise.name}-")
    try:
        _build_package(workdir / "pkg" / "minitransformer", reference, bodies, reference_regions)
        shutil.copy2(RUNNER, workdir / "harness" / "runner.py")
        _task(isolation, workdir, cases, limits)
        if isolation.user:
            open_for_student(workdir)
        handed_back = _student_arrays(grade, isolation, workdir, cases, limits)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if handed_back is not None:
        _score(grade, judge(cases, *handed_back, assignment.tolerance), points)
    return grade


def version_warning(directory):
    """A warning when the copy was made by another version of minitransformer than the one grading it, else None.

    The grader puts the student's regions into the *installed* reference package; if a region's
    surroundings changed between versions (GELU's backward moved into a row kernel in 0.2.0; multi-head
    attention's backward lost its fused path), an answer written for the old copy can fail here.
    """
    made_by = read_manifest(directory).get("minitransformer")
    if made_by is None or made_by == __version__:
        return None
    return (f"warning: this copy was made by minitransformer {made_by} and is graded by {__version__}; "
            f"regions whose surroundings changed in between may fail here (make the copy with this version)")


def manifest_note(directory, assignment):
    """A note when the copy's exercises.json lists other regions than the assignment (it is not used), else None."""
    listed = read_manifest(directory).get("regions")
    if listed is None or sorted(listed) == sorted(assignment.points):
        return None
    return (f"note: the copy's exercises.json lists {', '.join(sorted(map(str, listed))) or 'nothing'}; graded are "
            f"the assignment's {', '.join(sorted(assignment.points))} (the copy's list is not used)")


def select_exercises(assignment, only=None):
    """The (Exercise, {region: points}) of the assignment to grade: all, or those named in `only`.

    KeyError naming the assignment's exercises for a name it does not grade.
    """
    chosen = assignment.exercises()
    if only and only != ["all"]:
        known = [exercise.name for exercise, _ in chosen]
        unknown = [name for name in only if name not in known]
        if unknown:
            raise KeyError(f"--only {', '.join(unknown)}: not in the assignment, whose exercises are "
                           f"{', '.join(known)}")
        chosen = [(exercise, points) for exercise, points in chosen if exercise.name in only]
    return chosen


def checked_reference(reference, assignment, where="the assignment"):
    """The regions of the reference package `reference`, checked against `assignment` (its hashes first: nothing
    is read from a changed reference), and refused if the package is a student copy."""
    verify_reference(reference, assignment)
    regions = package_regions(reference)
    check_is_reference(regions)
    assignment.check_regions(regions, where)
    return regions


def grade_copy(directory, assignment, only=None, limits=None, isolation="auto", reference=None, seed=None):
    """Grade the student copy in `directory` by `assignment`; returns a list of ExerciseGrade, one per exercise.

    Args:
        directory: the student copy (or a folder holding it, or its minitransformer/ package).
        assignment: the instructor's assignment: a path (`exercises make` wrote it) or an Assignment.
        only: exercise names to grade, all of the assignment's by default ("all" too).
        limits: isolation.Limits (time, memory, processes, file size).
        isolation: "auto", "bubblewrap", "process", or an Isolation from `choose_isolation`.
        reference: the reference package directory (default: the installed package this runs from).
        seed: the inputs' seed, instead of the assignment's (the assignment's keeps a regrade identical).
    """
    reference = Path(reference or reference_package()).resolve()
    if not isinstance(assignment, Assignment):
        assignment = read_assignment(assignment)
    regions = checked_reference(reference, assignment)
    if reference != reference_package().resolve():
        verify_reference(reference_package(), assignment)   # the numbers are computed by the installed package
    student_pkg = student_package(directory)
    if student_pkg.resolve() == reference:
        raise ValueError("that is the reference package itself; give the student copy's directory")
    if isinstance(isolation, str):
        isolation = choose_isolation(isolation, reference)
    return [grade_exercise(exercise, points, student_pkg, reference, regions, assignment, limits or Limits(),
                           isolation, seed) for exercise, points in select_exercises(assignment, only)]


def _number(value):
    return f"{value:g}"


def score_table(grades):
    """The score table as text: one row per exercise, a total, then every problem found."""
    rows = [("exercise", "layer", "forward ok", "backward rel. error", "points")]
    for g in grades:
        backward = "-" if g.backward_error is None else f"{g.backward_error:.1e}"
        forward = "yes" if g.forward_ok else "no"
        rows.append((g.exercise, ", ".join(g.layers), forward, backward,
                     f"{_number(g.points)}/{_number(g.max_points)}"))
    total, best = sum(g.points for g in grades), sum(g.max_points for g in grades)
    rows.append(("total", "", "", "", f"{_number(total)}/{_number(best)}"))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]:>{widths[3]}}  {r[4]:>{widths[4]}}"
             for r in rows]
    lines.insert(len(lines) - 1, "")
    for g in grades:
        if g.status != "ok":
            lines.append(f"\n{g.exercise}: {g.status}")
            lines += [f"  {problem}" for problem in g.problems]
    return "\n".join(lines)


def grades_json(grades, tolerance, isolation=""):
    """The same results as a JSON-ready dict, for the instructor's records."""
    total, best = sum(g.points for g in grades), sum(g.max_points for g in grades)
    return {"points": total, "max_points": best, "full_marks": total == best, "tolerance": tolerance,
            "isolation": isolation, "exercises": [asdict(g) for g in grades]}
