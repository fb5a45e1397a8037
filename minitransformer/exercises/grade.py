"""Grade a student copy by the instructor's assignment, the verdict out of the student's reach.

Per submission: check the reference against the assignment's hashes (before and after); read the student's answers
from between the assigned markers (nothing else of the copy); compute the reference's numbers here; start
`runner.py` contained (`isolation.py`) on a temporary copy of the reference made as the student's was (every
assigned region blank; the same derivations left out), and hand each exercise's child its files on inputs from the
assignment's seed, every assigned region the student's answer (one to another exercise that does not compile: its
hint), so no reference answer nor left-out derivation is in the contained process, its lines are the student's, and
an exercise calling another runs the student's answer there, as the self-check does (a failure there is said to be
that region's); judge the arrays each hands back (read with bounded sizes, no pickles) against the reference's
output and the central differences, in float64, of the reference forward (this process compiles answers but imports
no student code). A wrong forward costs the forward's points only; a hang, a crash or an exception costs the
exercise, never the grading. What this cannot catch: docs/guide/for-instructors.md, "What grading cannot catch".
"""

import functools
import io
import json
import os
import select
import shutil
import stat
import zipfile
from collections import namedtuple
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from ..gradcheck.cases import all_cases
from ..gradcheck.checker import compare, compare_gradients, float_inputs, input_names
from .assignment import Assignment, read_assignment, verify_reference
from .catalogue import EXERCISES, exercise_of
from .isolation import Limits, choose_isolation, contained, new_workdir, open_for_student
from .make import _copy_package, check_is_reference, copy_text, read_manifest, reference_package, unavailable_layers
from .regions import find_regions, package_regions, replace_regions
from .runner import count_processes

HARNESS = [Path(__file__).resolve().with_name(name) for name in ("runner.py", "located.py")]   # runner.py imports located.py
SOURCE_LIMIT = 2**20                  # bytes of a student's source file the grader reads
RESULT_LIMIT = 2**20                  # bytes of the JSON the student's process may hand back
GRACE = 30                            # seconds the contained process may take beyond the time limit (its start)
# How an exercise's child ended: its exit code (None when stopped at the time limit), and its stderr's last 16 kB
Outcome = namedtuple("Outcome", "returncode timed_out stderr")


# ---------------------------------------------------------------- the reference's numbers

class ReferenceBroken(RuntimeError):
    """The reference's own backward disagrees with finite differences of its forward: nothing can be graded."""


class OutputRefused(ValueError):
    """What the student's process handed back is not what a runner writes (too large, not .npz, wrong shapes)."""


@dataclass
class ReferenceCase:
    """One case of an exercise: what the student's process is given, and what it must hand back."""

    key: str                       # "case0": how the case's arrays are named in the files
    index: int                     # position in the catalogue (all_cases())
    id: str                        # "LayerNorm[x (2, 3, 6)]"
    inputs: list                   # forward's positional arguments
    params: list                   # parameter values
    upstream: np.ndarray           # G, the output's shape
    expected: dict                 # array name -> (what it is, the reference's float64 array): the output first
    rng: dict = None               # the generator's state it was built from: a frozen base, a memory built alike


def _reference_case(case, index, key, seed, tolerance):
    """One ReferenceCase: inputs and parameters from `default_rng([seed, index])`, G from `default_rng([seed, index,
    1])`; ReferenceBroken when the reference backward disagrees with central differences of its forward."""
    module, inputs, forward = case.build(np.random.default_rng([seed, index]))
    forward = module.forward if forward is None else forward
    if not all(isinstance(value, np.ndarray) for value in inputs):
        raise ReferenceBroken(f"{case.id}: every input of a graded case must be an array")
    names, params = input_names(forward, len(inputs)), module.named_parameters()
    given = [value.copy() for value in inputs], [param.data.copy() for _, param in params]
    output = np.asarray(forward(*inputs), dtype=np.float64)
    upstream = np.random.default_rng([seed, index, 1]).standard_normal(output.shape)
    report, (input_grads, param_grads) = compare_gradients(
        module, inputs, forward, float(upstream) if upstream.ndim == 0 else upstream, names=names)
    wrong = [c.describe() for c in report.failures(tolerance)]
    if wrong:
        raise ReferenceBroken(f"the reference backward of {case.id} disagrees with finite differences of the reference "
                              f"forward ({'; '.join(wrong)}): the reference is broken, nothing is graded")
    expected = {f"{key}.out": ("forward output", output)}
    expected.update({f"{key}.dinput{i}": (names[i], input_grads[i]) for i in float_inputs(inputs)})
    expected.update({f"{key}.dparam{j}": (f"parameter {name}", param_grads[j]) for j, (name, _) in enumerate(params)})
    return ReferenceCase(key, index, case.id, given[0], given[1], upstream, expected,
                         np.random.default_rng([seed, index]).bit_generator.state)


@functools.cache
def reference_cases(layers, seed, tolerance):
    """The ReferenceCase of every catalogue case of `layers` (a tuple), for `seed`; computed once per process."""
    cases = [(index, case) for index, case in enumerate(all_cases()) if case.layer in layers]
    return [_reference_case(case, index, f"case{n}", seed, tolerance) for n, (index, case) in enumerate(cases)]


# ---------------------------------------------------------------- reading what the student's process wrote

def _read_bounded(path, limit):
    """The bytes of the regular file `path` (no symlink, no FIFO); OutputRefused when larger than `limit`."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise OutputRefused(f"cannot open what the student's process wrote ({error.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OutputRefused("what the student's process wrote is not a regular file")
        if info.st_size > limit:
            raise OutputRefused(f"the student's process wrote {info.st_size} bytes, more than the {limit} expected")
        return handle.read(limit + 1)[:limit]


def read_records(path, keys, regions=()):
    """The runner's JSON records as {key: {"forward_error": str or None, "backward_error": ..., "region": the one of
    `regions` (the assigned regions its child ran) it raised in, or None}}, checked."""
    try:
        records = json.loads(_read_bounded(path, RESULT_LIMIT).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise OutputRefused(f"the student's process handed back no valid result ({type(error).__name__})") from None
    if not isinstance(records, list):
        raise OutputRefused("the student's process handed back a result that is not a list of cases")
    checked = {}
    for record in records:
        if not isinstance(record, dict) or not isinstance(record.get("key"), str) or record["key"] not in keys:
            raise OutputRefused("the student's process handed back a result for a case that was not asked for")
        messages = {side: record.get(side) for side in ("forward_error", "backward_error")}
        if any(message is not None and not isinstance(message, str) for message in messages.values()):
            raise OutputRefused("the student's process handed back a result with a malformed message")
        region = record.get("region")
        if region is not None and (not isinstance(region, str) or region not in regions):
            raise OutputRefused("the student's process handed back a result naming a region it was not given")
        checked[record["key"]] = {side: message and " ".join(message.split())[:500] for side, message in messages.items()}
        checked[record["key"]]["region"] = region
    return checked


def read_arrays(path, shapes):
    """The arrays the runner handed back, {name: float64 array}: only names in `shapes` (others are ignored), each
    of exactly that shape. OutputRefused for a file that is not a plain .npz of real arrays of those shapes."""
    data = _read_bounded(path, sum(8 * int(np.prod(shape)) + 4096 for shape in shapes.values()) + 65536)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = [m for m in archive.infolist() if m.filename.endswith(".npy") and m.filename[:-4] in shapes]
    except (zipfile.BadZipFile, ValueError, OSError):
        raise OutputRefused("the arrays the student's process handed back are not a valid .npz") from None
    arrays = {}
    for member in members:
        name, shape = member.filename[:-4], tuple(shapes[member.filename[:-4]])
        limit = 8 * int(np.prod(shape)) + 4096              # a member may not inflate beyond its array's size
        try:
            with archive.open(member) as handle:
                raw = handle.read(limit + 1)
            array = np.load(io.BytesIO(raw), allow_pickle=False) if len(raw) <= limit else None
        except Exception as error:                         # a malformed header, a pickle, a bad CRC
            raise OutputRefused(f"{name}: not a plain NumPy array ({type(error).__name__})") from None
        if array is None:
            raise OutputRefused(f"{name}: more bytes than an array of shape {shape} needs")
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "fiub":
            raise OutputRefused(f"{name}: not an array of real numbers")
        if array.shape != shape:
            raise OutputRefused(f"{name}: shape {array.shape}, expected {shape}")
        arrays[name] = array.astype(np.float64)
    return arrays


# ---------------------------------------------------------------- judging

@dataclass
class CaseVerdict:
    case: str
    forward_ok: bool = False
    backward_ok: bool = False
    forward_error: float = None         # relative error of the output, None if there was none
    backward_error: float = None        # worst relative error over the gradients, None if there were none
    raised: list = field(default_factory=list)      # messages of what the student's code raised
    failed_in: list = field(default_factory=list)   # another exercise's region it raised in: "layernorm.backward"
    forward_problems: list = field(default_factory=list)
    backward_problems: list = field(default_factory=list)
    wrong: list = field(default_factory=list)       # what is missing or off: "forward output", "x", "parameter w"


def judge(case, record, arrays, tolerance, calls=(), left_out=()):
    """The CaseVerdict of one reference case, from the runner's record and arrays (already read as untrusted):
    each array within `tolerance` of the reference's (a NaN counts as an error of 1). `calls`: the regions of other
    exercises in what its child ran; `left_out`: those whose answer does not compile (their hint stood in)."""
    verdict = CaseVerdict(case.id)
    if record is None:
        verdict.forward_problems.append(f"{case.id}: the student's process handed back nothing for this case")
        return verdict
    output, *gradients = case.expected
    for part, names in (("forward", [output]), ("backward", gradients)):
        problems, errors = getattr(verdict, f"{part}_problems"), []
        if record[f"{part}_error"]:                        # the student's code raised: what follows is not judged
            message, region = record[f"{part}_error"], record.get("region")
            if region in calls:                            # in another exercise's answer, which this one calls
                verdict.failed_in.append(region)
                message = (f"failed because {region}, which it calls, does not compile (see exercise "
                           f"{exercise_of(region)})" if region in left_out else
                           f"failed because {region}, which it calls, failed: {message}")
            verdict.raised.append(message)
            problems.append(f"{case.id}: {part} {message}")
            return verdict
        for name in names:
            what, reference = case.expected[name]
            if name not in arrays:
                verdict.wrong.append(what)
                problems.append(f"{case.id}: " + (f"no {what}" if part == "forward" else
                                                  f"backward returned no gradient for {what}"))
                continue
            comparison = compare(what, arrays[name], reference)
            errors.append(min(comparison.error, 1.0))
            if not comparison.error <= tolerance:
                verdict.wrong.append(what)
                gave = "yours" if part == "forward" else "backward gave"
                problems.append(f"{case.id}: {comparison.describe(gave, 'expected')}")
        setattr(verdict, f"{part}_error", max(errors, default=None if part == "forward" else 0.0))
        setattr(verdict, f"{part}_ok", not problems)
    return verdict


# ---------------------------------------------------------------- grading

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
    """The `minitransformer` package in `directory`, in it, or one folder down (`submission/student/`); refused
    behind a symbolic link (one could point at the reference)."""
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


def _student_source(student_pkg, relative):
    """The text of the copy's file `relative`; LookupError when it is missing, not UTF-8, larger than SOURCE_LIMIT,
    or reached through a symbolic link (one could point at the reference's file, or at one of the grader's)."""
    path = student_pkg
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink():
            raise LookupError(f"{relative}: {path.relative_to(student_pkg).as_posix()} is a symbolic link; hand in "
                              f"the files themselves")
    if not path.is_file():
        raise LookupError(f"{relative} is missing from the student copy")
    if path.stat().st_size > SOURCE_LIMIT:
        raise LookupError(f"{relative} is larger than {SOURCE_LIMIT} bytes")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise LookupError(f"{relative} is not UTF-8 text") from None


def _student_bodies(student_pkg, names, reference_regions):
    """dict region name -> the student's lines between its markers, or the LookupError saying why there are none."""
    bodies = {}
    for relative in sorted({reference_regions[name][0] for name in names}):
        here = [name for name in names if reference_regions[name][0] == relative]
        try:
            found = {r.name: r for r in find_regions(_student_source(student_pkg, relative), relative)}
        except (LookupError, ValueError) as error:         # the file missing, a link, too large; broken markers
            why = error if isinstance(error, LookupError) else LookupError(f"the SOLUTION markers are broken: {error}")
            bodies.update(dict.fromkeys(here, why))
            continue
        for name in here:
            bodies[name] = found[name].body if name in found else LookupError(
                f"{relative} has no '### BEGIN SOLUTION {name}' ... '### END SOLUTION' region; keep the markers "
                f"around your answer")
    return bodies


def _exercise_files(reference, reference_regions, assigned, bodies, derive=False):
    """{file relative to the package: text} of every file holding an `assigned` region, as an exercise's child compiles
    it: as in a student copy (`copy_text`; `derive`: one made to derive), each assigned region the lines `bodies` gives
    it (the student's answer), else its hint. No reference answer to an assigned region, nor derivation left out."""
    return {relative: replace_regions(copy_text((reference / relative).read_text(encoding="utf-8"), relative, assigned,
                                                reference_regions, derive), bodies, relative)
            for relative in sorted({reference_regions[name][0] for name in assigned})}


def _not_compiling(reference, reference_regions, assigned, answers):
    """The names of the `answers` ({region: lines}) that do not compile in their file (compiled, never run): another
    exercise's child gets the region's hint in their place, so one such answer does not break every exercise."""
    broken = set()
    for name, body in answers.items():
        relative = reference_regions[name][0]
        beside = [other for other in assigned if reference_regions[other][0] == relative]
        text = _exercise_files(reference, reference_regions, beside, {name: body})[relative]
        try:
            compile(text, relative, "exec", dont_inherit=True)
        except Exception:                               # SyntaxError, or a source the compiler refuses otherwise
            broken.add(name)
    return broken


def _region_lines(files, assigned):
    """[[file, region, first line, last line]] of the `assigned` regions' bodies in `files` ({file: text}), the lines
    counted from 1, as a traceback counts them: where the runner finds which answer a case failed in."""
    return [[relative, region.name, region.begin + 2, region.end] for relative, text in files.items()
            for region in find_regions(text, relative) if region.name in assigned]


def _score(grade, verdicts, points):
    """Fill forward_ok, backward_error, points, status and problems from the case verdicts."""
    grade.cases = [asdict(v) for v in verdicts]
    grade.forward_ok = bool(verdicts) and all(v.forward_ok for v in verdicts)
    backward_ok = bool(verdicts) and all(v.backward_ok for v in verdicts)
    grade.backward_error = max((v.backward_error for v in verdicts if v.backward_error is not None), default=None)
    for name, worth in points.items():
        grade.region_points[name] = worth if (grade.forward_ok if name.endswith(".forward") else backward_ok) else 0
    grade.points = sum(grade.region_points.values())
    grade.problems += [problem for v in verdicts for problem in v.forward_problems + v.backward_problems]
    raised = [message for v in verdicts if not v.failed_in for message in v.raised]      # in its own code
    called = sorted({region for v in verdicts for region in v.failed_in})
    if grade.points == grade.max_points:
        grade.status = "ok"
    elif any(message.startswith("not implemented") for message in raised):
        grade.status = "not implemented"
    elif raised or not called:
        grade.status = "error" if raised else "wrong"
    else:
        grade.status = f"failed in {', '.join(called)}, which it calls"


@functools.cache
def _calls(assigned):
    """dict exercise -> the other exercises of `assigned` (region names, a tuple) whose regions its cases reach
    (traced on the reference, as `exercises make` finds the layers a copy cannot run yet)."""
    package = reference_package()
    reached = unavailable_layers(package, assigned, package_regions(package))
    return {exercise.name: sorted({other for layer in exercise.layers for other in reached.get(layer, ())}
                                  - {exercise.name}, key=[e.name for e in EXERCISES].index) for exercise in EXERCISES}


def _say_what_it_calls(grades, assigned):
    """Add to each exercise that failed, and whose cases call other assigned exercises not all right here, a line
    naming them and how they fared: it was graded with the student's answers there."""
    failed = [g for g in grades if g.status not in ("ok", "markers missing")]
    if not failed or len({exercise_of(name) for name in assigned}) < 2:
        return
    states = {g.exercise: g.status for g in grades}
    for grade in failed:
        called = _calls(tuple(assigned))[grade.exercise]
        if any(states.get(other) != "ok" for other in called):
            grade.problems.append(f"{grade.exercise}'s cases call your answers to " + ", ".join(
                f"{other} ({states.get(other, 'not graded in this run')})" for other in called)
                + f": a mistake there fails {grade.exercise} too")


@dataclass
class _Job:
    """One exercise of a submission on its way through the contained process."""

    index: int                         # its place in task.json's "exercises"
    grade: ExerciseGrade
    points: dict                       # graded region -> points
    cases: list                        # its ReferenceCases
    files: dict                        # what its child compiles (`_exercise_files`)
    regions: list                      # where the assigned regions are in `files` (`_region_lines`)
    left_out: set                      # other exercises' regions whose answer does not compile: their hint stands in
    handed_back: tuple = None          # (records, arrays) the child handed back, read as untrusted

    def calls(self):
        """The regions of other exercises in its files: a case that raised in one failed because of it."""
        return {name for _, name, _, _ in self.regions if exercise_of(name) != self.grade.exercise}


def _write_task(isolation, workdir, jobs, limits):
    """Write the task the runner reads into the job directory `workdir`: inputs.npz, the cases' inputs, parameter
    values and upstream gradients; task.json, what to run and under which limits; and, where only the grader reads
    them (private/, 0600), each exercise's files, handed to its child alone as a descriptor."""
    uid = isolation.student_uid()
    count = count_processes(uid) if uid != 0 else None       # RLIMIT_NPROC never holds for root
    arrays, exercises = {}, []
    for job in jobs:
        for case in job.cases:
            prefix = f"{job.index}/{case.key}"
            arrays.update({f"{prefix}.input{i}": value for i, value in enumerate(case.inputs)})
            arrays.update({f"{prefix}.param{j}": value for j, value in enumerate(case.params)})
            arrays[f"{prefix}.upstream"] = case.upstream
        exercises.append({"cases": [{"key": case.key, "index": case.index, "id": case.id, "inputs": len(case.inputs),
                                     "rng": case.rng} for case in job.cases], "regions": job.regions})
        with os.fdopen(os.open(workdir / "private" / f"{job.index}.files.json", os.O_WRONLY | os.O_CREAT, 0o600), "w", encoding="utf-8") as out:
            json.dump(job.files, out)
    np.savez(workdir / "task" / "inputs.npz", **arrays)
    paths = isolation.paths(workdir)
    (workdir / "task" / "task.json").write_text(json.dumps({
        "package_root": paths["package_root"], "site": paths["site"], "exercises": exercises, "fresh": isolation.fresh,
        "user": list(isolation.user) if isolation.user else None, "preload": isolation.preload(),
        "nproc": None if count is None else count + limits.processes,
        "limits": {"memory_mb": limits.memory_mb, "file_mb": limits.file_mb, "timeout": limits.timeout}}), encoding="utf-8")


def _status(fd, timeout):
    """(the runner's status line for the exercise it was given, one write of a few bytes, as a dict; or None when it
    ended or stayed silent for `timeout` s, and whether it stayed silent)."""
    if not select.select([fd], [], [], timeout)[0]:
        return None, True
    with suppress(ValueError):
        report = json.loads(os.read(fd, 4096))
        return (report if isinstance(report, dict) else None), False
    return None, False


def _handed_back(grade, outcome, paths, cases, limits, regions):
    """(records, arrays) the child handed back, read as untrusted (`regions`: those a record may say it failed in), or
    None, with the grade's status and problem said, when it timed out, crashed or handed back something else."""
    if outcome.timed_out:
        grade.status, grade.problems = "timed out", [f"stopped after the time limit of {limits.timeout:g} s "
                                                     f"(an endless loop?)"]
    elif outcome.returncode != 0:
        last = [line for line in outcome.stderr.splitlines() if line.strip()][-1:] or ["no message"]
        grade.status, grade.problems = "crashed", [f"the grading process ended with exit code {outcome.returncode}: "
                                                   f"{last[0][:300]}"]
    else:
        try:
            shapes = {name: array.shape for case in cases for name, (_, array) in case.expected.items()}
            return read_records(paths[0], {case.key for case in cases}, regions), read_arrays(paths[1], shapes)
        except OutputRefused as error:
            grade.status, grade.problems = "crashed", [f"refused what the student's process handed back: {error}"]
    return None


def _tail(path, start):
    """The text of the file `path` from `start` on, its last 16 kB at most."""
    with open(path, "rb") as handle:
        handle.seek(max(start, os.fstat(handle.fileno()).st_size - 16384))
        return handle.read().decode("utf-8", "replace")


def _session(isolation, workdir, jobs, limits):
    """Grade `jobs` in one contained process, one command each; the jobs it did not reach, to grade in a new one
    (it ended or hung: the job it was on is said to have crashed or timed out)."""
    private, (commands, status) = workdir / "private", (os.pipe(), os.pipe())
    fds = [(os.open(private / f"{job.index}.files.json", os.O_RDONLY), *(
        os.open(private / f"{job.index}.{name}", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        for name in ("result.json", "arrays.npz", "output.txt"))) for job in jobs]     # output: the child's 1 and 2
    try:
        with contained(isolation, workdir, [isolation.paths(workdir)["task"], str(commands[0]), str(status[1])],
                       (commands[0], status[1], *sum(fds, ())), private / "stdout.txt", private / "stderr.txt") as process:
            for fd in (commands[0], status[1], *sum(fds, ())):
                os.close(fd)
            for n, job in enumerate(jobs):
                seen = (private / "stderr.txt").stat().st_size
                with suppress(BrokenPipeError):
                    os.write(commands[1], f"{job.index} {' '.join(map(str, fds[n]))}\n".encode())
                report, silent = _status(status[0], limits.timeout + GRACE)
                code = report.get("returncode", -1) if report else None if silent else process.wait(GRACE)
                tail = _tail(private / f"{job.index}.output.txt", 0) + _tail(private / "stderr.txt", seen)
                outcome = Outcome(code, silent or (report is not None and code is None), tail)
                job.handed_back = _handed_back(job.grade, outcome, [private / f"{job.index}.{name}" for name in (
                    "result.json", "arrays.npz")], job.cases, limits, {name for _, name, _, _ in job.regions})
                if report is None:
                    return jobs[n + 1:]
    finally:
        os.close(commands[1]), os.close(status[0])
    return []


def _grade_jobs(isolation, jobs, reference, assigned, reference_regions, limits, derive=False):
    """Run the jobs contained: one process for all where the level allows it (`isolation.batched`), else one each."""
    workdir = new_workdir(isolation, "grade-")
    try:
        _copy_package(reference, workdir / "pkg" / "minitransformer", assigned, reference_regions, derive)  # no answer
        for script in HARNESS:
            shutil.copy2(script, workdir / "harness" / script.name)
        _write_task(isolation, workdir, jobs, limits)
        if isolation.user:
            open_for_student(workdir)
        batches = [jobs] if isolation.batched else [[job] for job in jobs]
        for batch in batches:
            while batch:
                batch = _session(isolation, workdir, batch, limits)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def grade_exercises(chosen, student_pkg, reference, reference_regions, assignment, limits, isolation):
    """Grade the `chosen` exercises ((Exercise, {region: points})) of the student package; a list of ExerciseGrade.
    The reference is checked before and after (what ran left it as it was); its numbers are computed before. Every
    region of the assignment, graded in this run or not, is the student's answer in what the student's code runs."""
    grades, jobs, assigned = [], [], sorted(assignment.points)
    verify_reference(reference, assignment)
    answers = _student_bodies(student_pkg, assigned, reference_regions)
    found = {name: body for name, body in answers.items() if not isinstance(body, LookupError)}
    broken = _not_compiling(reference, reference_regions, assigned, found)
    for exercise, points in chosen:
        grades.append(ExerciseGrade(exercise.name, list(exercise.layers), sorted(points), max_points=sum(points.values()),
                                    region_points=dict.fromkeys(points, 0), region_max=dict(points)))
        missing = [answers[name] for name in sorted(points) if isinstance(answers[name], LookupError)]
        if missing:
            grades[-1].status, grades[-1].problems = "markers missing", [str(missing[0])]
            continue
        cases = reference_cases(tuple(exercise.layers), int(assignment.seed), float(assignment.tolerance))
        files = _exercise_files(reference, reference_regions, assigned,            # its own answers even if broken
                                {name: body for name, body in found.items() if name in points or name not in broken},
                                assignment.derive)
        jobs.append(_Job(len(jobs), grades[-1], points, cases, files, _region_lines(files, assigned),
                         broken - set(points)))
    if jobs:
        _grade_jobs(isolation, jobs, reference, assigned, reference_regions, limits, assignment.derive)
    verify_reference(reference, assignment)
    for job in (job for job in jobs if job.handed_back is not None):
        records, arrays = job.handed_back
        _score(job.grade, [judge(case, records.get(case.key), arrays, assignment.tolerance, job.calls(), job.left_out)
                           for case in job.cases], job.points)
    _say_what_it_calls(grades, assigned)
    return grades


def copy_notes(directory, assignment):
    """Lines for the grader to print from the copy's exercises.json: another version made the copy (a region whose
    surroundings changed can fail here), or its regions or `derive` are not the assignment's (not used)."""
    manifest, notes = read_manifest(directory), []
    if manifest.get("minitransformer", __version__) != __version__:
        notes.append(f"warning: this copy was made by minitransformer {manifest['minitransformer']} and is graded by "
                     f"{__version__}; regions whose surroundings changed in between may fail here (make the copy "
                     f"with this version)")
    listed = manifest.get("regions")
    if isinstance(listed, list) and sorted(map(str, listed)) != sorted(assignment.points):
        notes.append(f"note: the copy's exercises.json lists {', '.join(sorted(map(str, listed))) or 'nothing'}; "
                     f"graded are the assignment's {', '.join(sorted(assignment.points))} (the copy's list is not used)")
    if bool(manifest.get("derive")) != assignment.derive:
        notes.append(f"note: the copy's exercises.json and the assignment disagree on whether it was made to derive; "
                     f"graded as the assignment says: {'' if assignment.derive else 'not '}made to derive")
    return notes


def select_exercises(assignment, only=None):
    """The (Exercise, {region: points}) of the assignment to grade: all, or those named in `only` (KeyError naming
    the assignment's exercises for another name)."""
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
    """The regions of the reference package, once its hashes match the assignment's (nothing is read from a changed
    reference); refused when it is a student copy or lacks a graded region."""
    verify_reference(reference, assignment)
    regions = package_regions(reference)
    check_is_reference(regions)
    assignment.check_regions(regions, where)
    return regions


def grade_copy(directory, assignment, only=None, limits=None, isolation="auto", reference=None):
    """Grade the student copy in `directory` (or a folder holding it, or its package) by `assignment` (a path or
    an Assignment); a list of ExerciseGrade, one per exercise. `only`: exercise names (default all); `limits`:
    isolation.Limits; `isolation`: "auto", "bubblewrap", "process" or an Isolation; `reference`: the reference
    package (default the installed one). The assignment's seed draws the inputs: a regrade gives the same verdict."""
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
    return grade_exercises(select_exercises(assignment, only), student_pkg, reference, regions, assignment,
                           limits or Limits(), isolation)


def score_table(grades):
    """The score table as text: one row per exercise, a total, then every problem found."""
    rows = [("exercise", "layer", "forward ok", "backward rel. error", "points")]
    def judged(g, part, verdict):                       # an ungraded part reads "not assigned", never as a pass
        return verdict if f"{g.exercise}.{part}" in g.regions else "not assigned"

    rows += [(g.exercise, ", ".join(g.layers), judged(g, "forward", "yes" if g.forward_ok else "no"),
              judged(g, "backward", "-" if g.backward_error is None else f"{g.backward_error:.1e}"),
              f"{g.points:g}/{g.max_points:g}") for g in grades]
    rows += [("", "", "", "", ""), ("total", "", "", "", f"{sum(g.points for g in grades):g}/"
                                                        f"{sum(g.max_points for g in grades):g}")]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(width) if i < 3 else cell.rjust(width)
                       for i, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows]
    for g in grades:
        if g.status != "ok":
            lines += [f"\n{g.exercise}: {g.status}"] + [f"  {problem}" for problem in g.problems]
    return "\n".join(lines)


def grades_json(grades, tolerance, isolation=""):
    """The same results as a JSON-ready dict, for the instructor's records."""
    total, best = sum(g.points for g in grades), sum(g.max_points for g in grades)
    return {"points": total, "max_points": best, "full_marks": total == best, "tolerance": tolerance,
            "isolation": isolation, "exercises": [asdict(g) for g in grades]}
