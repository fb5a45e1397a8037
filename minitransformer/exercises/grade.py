"""Grade a student copy: forward outputs and gradient checks, one subprocess per exercise.

For each exercise the grader

1. reads the student's answer from between the SOLUTION markers of that
   exercise's regions (code elsewhere in the student copy is never run);
2. builds a temporary package: the reference package with those regions
   replaced by the student's, so building blocks and composites are the
   reference's (the attention exercise is graded with the reference softmax);
3. runs `runner.py` in a new Python process on it, with a time limit, which
   evaluates the forward output of every gradient-check case of the exercise's
   layers and runs the project's gradient checker on each;
4. compares those outputs, passed back in a .npz file, with the installed
   reference package's outputs on the same inputs, computed here.

A hang, a crash or an exception costs that exercise its points and is
reported; it never stops the grading. Each assigned region is worth one
point: a `.forward` region when the forward output equals the reference's
(relative error <= the tolerance) in every case, a `.backward` region when
every gradient check passes.

Left out: a sandbox. The separate process protects the grading from a hang or
a crash, not the machine from a malicious answer (it may read files and open
sockets as the instructor's user can); grade untrusted submissions inside a
container. Also left out: partial credit inside one layer.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from ..gradcheck.cases import all_cases
from ..gradcheck.checker import DEFAULT_TOLERANCE, rel_error
from .catalogue import EXERCISES, exercise_named, exercise_of
from .make import check_is_reference, read_manifest, reference_package
from .regions import find_regions, package_regions, replace_regions

_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
         "from minitransformer.exercises.runner import main; sys.exit(main(sys.argv[2]))")


@dataclass
class ExerciseGrade:
    exercise: str
    layers: list
    regions: list                      # the assigned regions, one point each
    status: str = "ok"                 # ok, wrong, not implemented, error, timed out, crashed, markers missing
    forward_ok: bool = False
    backward_error: float = None       # worst relative error over the cases, None if never computed
    points: int = 0
    max_points: int = 0
    problems: list = field(default_factory=list)
    cases: list = field(default_factory=list)


def student_package(directory):
    """The `minitransformer` package inside a student copy (or the directory itself if it is the package)."""
    directory = Path(directory)
    for candidate in (directory / "minitransformer", directory):
        if (candidate / "__init__.py").is_file() and candidate.name == "minitransformer":
            return candidate
    raise FileNotFoundError(f"exercises grade: no minitransformer package in {directory}")


def exercises_to_grade(directory, region_names, only=None):
    """What to grade: a list of (Exercise, its assigned region names).

    Args:
        directory: the student copy; its `exercises.json` says which regions were assigned.
        region_names: every region name of the reference.
        only: exercise names, or ["all"]; default: the exercises of the manifest (all without one).
    An exercise not in the manifest counts all its regions.
    """
    manifest = read_manifest(directory)
    assigned = set(manifest["regions"]) if manifest else set()
    if only == ["all"] or (not only and not assigned):
        chosen = list(EXERCISES)
    elif only:
        chosen = [exercise_named(name) for name in only]
    else:
        chosen = [e for e in EXERCISES if any(exercise_of(name) == e.name for name in assigned)]
    graded = []
    for exercise in chosen:
        own = sorted(name for name in region_names if exercise_of(name) == exercise.name)
        graded.append((exercise, [name for name in own if name in assigned] or own))
    return graded


def _student_bodies(student_pkg, names, reference_regions):
    """dict region name -> the student's lines between its markers; raise LookupError naming what is missing."""
    bodies, by_file = {}, {}
    for name in names:
        by_file.setdefault(reference_regions[name][0], []).append(name)
    for relative, wanted in by_file.items():
        path = student_pkg / relative
        if not path.is_file():
            raise LookupError(f"{relative} is missing from the student copy")
        try:
            found = {r.name: r for r in find_regions(path.read_text(), relative)}
        except ValueError as error:
            raise LookupError(f"the SOLUTION markers are broken: {error}") from None
        for name in wanted:
            if name not in found:
                raise LookupError(f"{relative} has no '### BEGIN SOLUTION {name}' ... '### END SOLUTION' region; "
                                  f"keep the markers around your answer")
            bodies[name] = found[name].body
    return bodies


def _hybrid_package(root, reference, bodies, reference_regions):
    """Copy the reference package to root/minitransformer and put the student's region bodies in."""
    target = root / "minitransformer"
    shutil.copytree(reference, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for relative in {reference_regions[name][0] for name in bodies}:
        path = target / relative
        path.write_text(replace_regions(path.read_text(), bodies, relative))
    return target


def reference_outputs(layers, seed):
    """Forward output of every catalogue case of `layers`, from the installed reference package."""
    outputs = {}
    for index, case in enumerate(c for c in all_cases() if c.layer in layers):
        module, inputs, forward = case.build(np.random.default_rng(seed))
        forward = module.forward if forward is None else forward
        outputs[f"case{index}"] = np.asarray(forward(*inputs), dtype=np.float64)
    return outputs


def _run(workdir, hybrid, timeout):
    """Run the runner; return None on success, else what went wrong."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    try:
        done = subprocess.run([sys.executable, "-c", _BOOT, str(hybrid.parent), str(workdir)], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timed out", f"stopped after the time limit of {timeout:g} s (an endless loop?)"
    if done.returncode != 0 or not (workdir / "result.json").is_file():
        return "crashed", f"the grading process ended with exit code {done.returncode}: {_last_error(done.stderr, hybrid)}"
    return None


def _last_error(stderr, package):
    """The last line of a traceback, with the deepest file and line inside `package` (a SyntaxError's place)."""
    lines = stderr.strip().splitlines() or ["no message"]
    places = [re.match(r'\s*File "(.+)", line (\d+)', line) for line in lines]
    places = [m for m in places if m and m.group(1).startswith(str(package))]
    if not places:
        return lines[-1]
    relative = Path(places[-1].group(1)).relative_to(package).as_posix()
    return f"{lines[-1]} (at {relative}:{places[-1].group(2)})"


def _finite(error):
    """A relative error, with NaN (a backward or forward that produced NaN) counted as the worst, 1."""
    return float(error) if np.isfinite(error) else 1.0


def _score(grade, records, student, reference, tolerance):
    """Fill forward_ok, backward_error, points, status and problems from the runner's records."""
    forward_ok, backward_ok, worst = True, True, 0.0
    for record in records:
        key, case = record["key"], record["case"]
        if record["forward_error"]:
            forward_ok = backward_ok = False
            grade.problems.append(f"{case}: forward {record['forward_error']}")
            continue
        error = _finite(rel_error(student[key], reference[key]) if student[key].shape == reference[key].shape else 1.0)
        record["output_error"] = error
        if error > tolerance:
            forward_ok = False
            grade.problems.append(f"{case}: forward output differs from the reference "
                                  f"(shape {student[key].shape} vs {reference[key].shape}, rel_error {error:.2e})")
        if record["backward_error"]:
            backward_ok = False
            grade.problems.append(f"{case}: backward {record['backward_error']}")
            continue
        for comparison_error, description in record["failures"]:
            comparison_error = _finite(comparison_error)
            worst = max(worst, comparison_error)
            if comparison_error > tolerance:
                backward_ok = False
                grade.problems.append(f"{case}: {description}")
    computed = [r for r in records if r["input_error"] is not None]
    grade.backward_error = worst if computed else None
    grade.forward_ok = forward_ok and bool(records)
    backward_ok = backward_ok and len(computed) == len(records) > 0
    grade.points = sum(grade.forward_ok if name.endswith(".forward") else backward_ok for name in grade.regions)
    raised = [r[side] for r in records for side in ("forward_error", "backward_error") if r[side]]
    if grade.points == grade.max_points:
        grade.status = "ok"
    elif any(message.startswith("not implemented") for message in raised):
        grade.status = "not implemented"
    else:
        grade.status = "error" if raised else "wrong"


def grade_exercise(exercise, assigned, student_pkg, reference, reference_regions, timeout=60.0, seed=0,
                   tolerance=DEFAULT_TOLERANCE):
    """Grade one exercise of the student package, `assigned` being its region names; returns an ExerciseGrade."""
    grade = ExerciseGrade(exercise.name, list(exercise.layers), list(assigned), max_points=len(assigned))
    names = sorted(n for n in reference_regions if exercise_of(n) == exercise.name)
    try:
        bodies = _student_bodies(student_pkg, names, reference_regions)
    except LookupError as error:
        grade.status, grade.problems = "markers missing", [str(error)]
        return grade
    with tempfile.TemporaryDirectory(prefix=f"grade-{exercise.name}-") as tmp:
        workdir = Path(tmp)
        hybrid = _hybrid_package(workdir / "package", reference, bodies, reference_regions)
        (workdir / "task.json").write_text(json.dumps({"layers": grade.layers, "seed": seed, "package": str(hybrid)}))
        failure = _run(workdir, hybrid, timeout)
        if failure:
            grade.status, grade.problems = failure[0], [failure[1]]
            return grade
        records = json.loads((workdir / "result.json").read_text())
        with np.load(workdir / "student_outputs.npz") as student:
            student = {key: student[key] for key in student.files}
    _score(grade, records, student, reference_outputs(set(exercise.layers), seed), tolerance)
    grade.cases = records
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


def grade_copy(directory, only=None, timeout=60.0, seed=0, tolerance=DEFAULT_TOLERANCE):
    """Grade the student copy in `directory`; returns a list of ExerciseGrade, one per exercise."""
    student_pkg = student_package(directory)
    reference = reference_package()
    if student_pkg.resolve() == reference.resolve():
        raise ValueError("exercises grade: that is the reference package itself; give the student copy's directory")
    regions = package_regions(reference)
    check_is_reference(regions)
    return [grade_exercise(exercise, assigned, student_pkg, reference, regions, timeout, seed, tolerance)
            for exercise, assigned in exercises_to_grade(directory, regions, only)]


def score_table(grades):
    """The score table as text: one row per exercise, a total, then every problem found."""
    rows = [("exercise", "layer", "forward ok", "backward rel. error", "points")]
    for g in grades:
        backward = "-" if g.backward_error is None else f"{g.backward_error:.1e}"
        forward = "yes" if g.forward_ok else "no"
        rows.append((g.exercise, ", ".join(g.layers), forward, backward, f"{g.points}/{g.max_points}"))
    total, best = sum(g.points for g in grades), sum(g.max_points for g in grades)
    rows.append(("total", "", "", "", f"{total}/{best}"))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]:>{widths[3]}}  {r[4]:>{widths[4]}}"
             for r in rows]
    lines.insert(len(lines) - 1, "")
    for g in grades:
        if g.status != "ok":
            lines.append(f"\n{g.exercise}: {g.status}")
            lines += [f"  {problem}" for problem in g.problems]
    return "\n".join(lines)


def grades_json(grades, tolerance=DEFAULT_TOLERANCE):
    """The same results as a JSON-ready dict, for a learning platform."""
    total, best = sum(g.points for g in grades), sum(g.max_points for g in grades)
    return _json_safe({"points": total, "max_points": best, "full_marks": total == best, "tolerance": tolerance,
                       "exercises": [asdict(g) for g in grades]})


def _json_safe(value):
    """Replace NaN and infinities (not valid JSON) by None, recursively."""
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value
