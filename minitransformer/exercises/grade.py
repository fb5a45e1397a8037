"""Grade a student copy by the instructor's assignment, the verdict out of the student's reach.

For each exercise of the assignment (`assignment.py`: which regions, how many points, the seed of
the inputs, the reference's hashes), the grader

1. checks the reference package against the assignment's hashes (a submission that wrote to it,
   or another installed version, stops the grading with an error: one submission cannot change
   another's grade);
2. reads the student's answer from between the SOLUTION markers of the assigned regions (code
   elsewhere in the copy is never run; the copy's own exercises.json is not read);
3. builds a temporary package: the reference package as a student copy for this one exercise
   would hold it (the exercise's regions blank, its fast form and every place repeating its answer
   left out, `make._copy_package`), then the student's answer put in. Building blocks and
   composites are the reference's, so attention is graded with the reference softmax;
4. computes, in this process, the reference's numbers for the exercise's gradient-check cases on
   inputs drawn from the assignment's seed (`verdict.py`): forward outputs, and gradients of the
   *reference* forward by finite differences, cross-checked by the reference backward;
5. runs `runner.py` contained (`isolation.py`: bubblewrap, else a process group with limits),
   which builds each case's layer in the temporary package, puts the given inputs and parameter
   values in, and hands back forward outputs and the gradients of `backward(G)` as arrays;
6. reads those arrays as untrusted (bounded, no pickles, exact shapes) and compares them here.

A `.forward` region earns its points when every case's output is within the tolerance
(`rel_error`), a `.backward` region when every gradient of every case is. A hang, a crash, an
exception or arrays that are not what a runner writes cost that exercise its points and are
reported; they never stop the grading.

What this cannot catch:

* an answer that computes the right numbers another way: a backward that takes finite
  differences of the forward (in float64 it passes to ~1e-10), or that calls another correct
  piece of the package (attention's backward through `MultiHeadAttention`'s, when only one is
  assigned), or a solution copied from a classmate or the internet. The grader checks numbers,
  not authorship;
* with the `process` fallback, an answer that reads world-readable files: the installed reference
  among them (under root the answer runs as `nobody`, which cannot read the grader's /proc entries
  nor write the reference; as another user, it can do what that user can). Grade untrusted
  submissions where bubblewrap works;
* answers that are right on the catalogue's cases only: the cases are small and few (they are the
  gradient checker's), though the inputs are drawn afresh from the assignment's seed;
* time and memory beyond the limits an honest answer needs: an answer over them scores 0 even
  when right.

Left out: partial credit inside one region.
"""

import atexit
import compileall
import hashlib
import json
import os
import py_compile
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from .assignment import Assignment, ReferenceChanged, read_assignment, verify_reference
from .isolation import Limits, choose_isolation, count_processes, new_workdir, open_for_student, run_contained, scratch
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


_BLANK = {}         # (reference, its hash, regions) -> (a one-exercise student copy's package, its files' hash)


def _tree_hash(package):
    """One sha256 over every file under `package` (sources and byte code)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(package).rglob("*") if p.is_file()):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _blank_package(reference, names, reference_regions, reference_hash):
    """The reference as a student copy with only `names` assigned holds it; made once per grader process.

    Byte code is compiled for it once ("checked hash" .pyc: a file the student's answer changes is
    compiled afresh at import, every other one loads at once; the student's process starts ~0.25 s
    sooner). It lives in a directory of the grader's own (mode 0700) and is checked against the hash
    it had when made before each use: nothing a student's process did can have changed it unseen.
    """
    from .make import _copy_package

    key = (str(reference), reference_hash, tuple(names))
    if key in _BLANK:
        package, files_hash = _BLANK[key]
        if package.is_dir() and _tree_hash(package) == files_hash:
            return package
        raise ReferenceChanged(f"the grader's blanked copy of the reference in {package} changed while grading: "
                               f"refusing to go on")
    root = Path(tempfile.mkdtemp(prefix="grader-blank-", dir=scratch()))
    atexit.register(shutil.rmtree, root, True)
    package = root / "minitransformer"
    _copy_package(reference, package, list(names), reference_regions)
    compileall.compile_dir(package, quiet=2, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    _BLANK[key] = package, _tree_hash(package)
    return package


def _build_package(target, reference, bodies, reference_regions, reference_hash):
    """The temporary package: the reference as a one-exercise student copy holds it, with the student's answer in."""
    shutil.copytree(_blank_package(reference, sorted(bodies), reference_regions, reference_hash), target)
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


def _task(isolation, workdir, cases, specs, limits):
    paths = isolation.paths(workdir)
    uid = isolation.user[0] if isolation.user else os.geteuid()
    count = count_processes(uid) if uid != 0 else None       # RLIMIT_NPROC never holds for root
    nproc = None if count is None else count + limits.processes
    return {"package_root": paths["package_root"], "site": paths["site"], "cases": specs,
            "user": list(isolation.user) if isolation.user else None, "nproc": nproc, "preload": isolation.preload(),
            "limits": {"memory_mb": limits.memory_mb, "file_mb": limits.file_mb}}


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
    seed = assignment.seed if seed is None else seed
    cases = reference_cases(tuple(exercise.layers), seed, assignment.tolerance)
    workdir = new_workdir(isolation, f"grade-{exercise.name}-")
    try:
        _build_package(workdir / "pkg" / "minitransformer", reference, bodies, reference_regions,
                       assignment.reference["sha256"])
        shutil.copy2(RUNNER, workdir / "harness" / "runner.py")
        arrays, specs = task_inputs(cases)
        np.savez(workdir / "task" / "inputs.npz", **arrays)
        (workdir / "task" / "task.json").write_text(json.dumps(_task(isolation, workdir, cases, specs, limits)))
        if isolation.user:
            open_for_student(workdir)
        private = workdir / "private"
        result_fd = os.open(private / "result.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        arrays_fd = os.open(private / "arrays.npz", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            outcome = run_contained(isolation, workdir, [isolation.paths(workdir)["task"], str(result_fd),
                                                         str(arrays_fd)],
                                    limits, (result_fd, arrays_fd), private / "stdout.txt", private / "stderr.txt")
        finally:
            os.close(result_fd)
            os.close(arrays_fd)
        if outcome.timed_out:
            grade.status = "timed out"
            grade.problems = [f"stopped after the time limit of {limits.timeout:g} s (an endless loop?)"]
            return grade
        if outcome.returncode != 0:
            grade.status = "crashed"
            grade.problems = [f"the grading process ended with exit code {outcome.returncode}: "
                              f"{_error_of_crash(outcome.stderr)}"]
            return grade
        try:
            records = read_records(private / "result.json", {case.key for case in cases})
            student = read_arrays(private / "arrays.npz", expected_shapes(cases))
        except OutputRefused as error:
            grade.status, grade.problems = "crashed", [f"refused what the student's process handed back: {error}"]
            return grade
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    _score(grade, judge(cases, records, student, assignment.tolerance), points)
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
    limits = Limits() if limits is None else limits
    reference = Path(reference or reference_package()).resolve()
    if not isinstance(assignment, Assignment):
        assignment = read_assignment(assignment)
    verify_reference(reference, assignment)                 # first: nothing is read from a changed reference
    if reference != reference_package().resolve():
        verify_reference(reference_package(), assignment)   # the numbers are computed by the installed package
    regions = package_regions(reference)
    check_is_reference(regions)
    assignment.check_regions(regions)
    student_pkg = student_package(directory)
    if student_pkg.resolve() == reference:
        raise ValueError("that is the reference package itself; give the student copy's directory")
    chosen = select_exercises(assignment, only)
    if isinstance(isolation, str):
        isolation = choose_isolation(isolation, reference)
    return [grade_exercise(exercise, points, student_pkg, reference, regions, assignment, limits, isolation, seed)
            for exercise, points in chosen]


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
    return _json_safe({"points": total, "max_points": best, "full_marks": total == best, "tolerance": tolerance,
                       "isolation": isolation, "exercises": [asdict(g) for g in grades]})


def _json_safe(value):
    """Replace NaN and infinities (not valid JSON) by None, recursively."""
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value
