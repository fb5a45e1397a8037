"""A student's self-check: `exercises check NAME` and the `pytest -m NAME` markers of a student copy.

Its verdict comes from the student's own code and numbers shipped with the copy (inside a copy the
installed package *is* the student's), on every gradient-check case of the exercise's layers:

* forward: the output on inputs from `CHECK_SEED` must equal the reference's, which `exercises make`
  computes and ships, outputs only, in `minitransformer/exercises/expected_outputs.npz` of the copy;
* backward: the gradient checker compares it with finite differences of the student's *own* forward
  (so a backward can be right for a wrong forward; the forward verdict says so).

A failure names the case, the input or parameter, the worst index and the relative error, or the file
and line that raised. Left out: grading (`exercises grade` works apart from the student's code, on
inputs the copy does not hold: a forward that looked the shipped outputs up passes here only).
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..gradcheck.cases import all_cases
from ..gradcheck.checker import DEFAULT_TOLERANCE, compare, compare_gradients, input_names
from .catalogue import exercise_named
from .regions import HINT_MARK
from .runner import located

CHECK_SEED = 1912                   # the self-check's inputs; the grader draws its own (issue 19)
EXPECTED_FILE = Path(__file__).resolve().with_name("expected_outputs.npz")
PACKAGE = Path(__file__).resolve().parent.parent
_HINT_PREFIX = HINT_MARK.split('("', 1)[1]          # "Exercise": how the message of every hint begins


def exercise_cases(name):
    """The gradient-check cases an exercise is checked on (those of its layers), in catalogue order."""
    layers = set(exercise_named(name).layers)
    return [case for case in all_cases() if case.layer in layers]


def compute_expected(names, seed=CHECK_SEED):
    """Forward outputs of the exercises' cases, from the package this runs in (the reference, for `make`).

    Returns:
        dict "<exercise>.case<i>" -> float64 array, and "<exercise>.ids" -> the case ids (str array),
        ready for `np.savez`.
    """
    expected = {}
    for name in names:
        cases = exercise_cases(name)
        expected[f"{name}.ids"] = np.array([case.id for case in cases])
        for index, case in enumerate(cases):
            module, inputs, forward = case.build(np.random.default_rng(seed))
            expected[f"{name}.case{index}"] = np.asarray((forward or module.forward)(*inputs), dtype=np.float64)
    return expected


def is_student_copy(package=PACKAGE):
    """True when `package` sits in a student copy (`exercises make` wrote exercises.json beside it)."""
    return (Path(package).parent / "exercises.json").is_file()


def expected_here():
    """Expected outputs for this package: shipped ones in a student copy (FileNotFoundError if there are none);
    in the reference, its own outputs (the forward verdict is then the reference against itself)."""
    if not (is_student_copy() or EXPECTED_FILE.is_file()):
        from .catalogue import EXERCISES

        return compute_expected([exercise.name for exercise in EXERCISES])
    if not EXPECTED_FILE.is_file():
        raise FileNotFoundError(f"no {EXPECTED_FILE.name} in {EXPECTED_FILE.parent}: the self-check needs the expected "
                                f"outputs that `exercises make` ships with a student copy (make the copy again with "
                                f"this version)")
    with np.load(EXPECTED_FILE) as data:
        return {key: data[key] for key in data.files}


@dataclass
class CaseCheck:
    case: str
    forward: str = "not run"        # ok, wrong, not implemented, raised, no expected values
    backward: str = "not run"       # ok, wrong, not implemented, raised, not checked
    forward_error: float = None     # relative error against the expected output
    backward_error: float = None    # worst relative error over inputs and parameters
    problems: list = field(default_factory=list)


@dataclass
class ExerciseCheck:
    exercise: str
    layers: tuple
    cases: list

    @property
    def forward_ok(self):
        return bool(self.cases) and all(c.forward == "ok" for c in self.cases)

    @property
    def backward_ok(self):
        return bool(self.cases) and all(c.backward == "ok" for c in self.cases)

    @property
    def passed(self):
        return self.forward_ok and self.backward_ok

    def problems(self, part=None):
        """Lines saying what is wrong and where; `part` "forward" or "backward" keeps that part's lines."""
        return [f"{c.case}: {p}" for c in self.cases for p in c.problems if part is None or p.startswith(part)]


def _raised(error, part):
    """(status, problem line) for an exception raised by the student's code, located in the package."""
    if isinstance(error, NotImplementedError) and str(error).startswith(_HINT_PREFIX):
        return "not implemented", f"{part} not implemented yet ({str(error).split(':', 1)[0].split()[-1]})"
    return "raised", f"{part} {located(error, str(PACKAGE), 'minitransformer/')}"


def _check_forward(record, output, expected, tolerance):
    if expected is None:
        record.forward = "no expected values"
        record.problems.append("forward: no expected output for this case in the copy (made by another version?)")
        return
    output = np.asarray(output, dtype=np.float64)
    if output.shape != expected.shape:
        record.forward = "wrong"
        record.problems.append(f"forward output has shape {output.shape}, expected {expected.shape}")
        return
    comparison = compare("forward output", output, expected)
    record.forward_error = comparison.error
    record.forward = "ok" if comparison.error <= tolerance else "wrong"
    if record.forward == "wrong":
        record.problems.append(comparison.describe("yours", "expected"))


def check_exercise(name, expected=None, seed=CHECK_SEED, tolerance=DEFAULT_TOLERANCE):
    """Check exercise `name` in the package this runs in: forward against `expected`, backward against its forward.

    Args:
        name: an exercise of the catalogue ("layernorm").
        expected: dict from `compute_expected`; default `expected_here()`.
        seed: the seed the expected outputs were computed from.
        tolerance: largest relative error that passes (the gradient checker's default).
    Returns:
        ExerciseCheck.
    """
    exercise = exercise_named(name)
    expected = expected_here() if expected is None else expected
    ids = [str(i) for i in expected.get(f"{name}.ids", [])]
    result = ExerciseCheck(name, exercise.layers, [])
    for index, case in enumerate(exercise_cases(name)):
        record = CaseCheck(case.id)
        result.cases.append(record)
        shipped = expected.get(f"{name}.case{index}") if index < len(ids) and ids[index] == case.id else None
        try:
            module, inputs, forward = case.build(np.random.default_rng(seed))
            forward = forward or module.forward
            output = forward(*inputs)
        except Exception as error:                          # the student's code: say what and where, go on
            record.forward, problem = _raised(error, "forward")
            record.problems.append(problem)
            record.backward = "not checked"
            record.problems.append("backward: not checked, it needs a forward that runs")
            continue
        _check_forward(record, output, shipped, tolerance)
        try:
            upstream = np.random.default_rng([seed, 1]).standard_normal(np.shape(output))
            report, _ = compare_gradients(module, inputs, forward, float(upstream) if np.ndim(output) == 0 else upstream,
                                          names=input_names(forward, len(inputs)))
        except Exception as error:
            record.backward, problem = _raised(error, "backward")
            record.problems.append(problem)
            continue
        record.backward_error = max(report.worst_input_error, report.worst_param_error)
        failures = report.failures(tolerance)
        record.backward = "wrong" if failures else "ok"
        record.problems += [f"backward: {comparison.describe()}" for comparison in failures]
    return result


def describe(result, tolerance=DEFAULT_TOLERANCE):
    """The verdict as text: one line per part, then every problem."""
    def verdict(part, ok, errors):
        if ok:
            worst = max((e for e in errors if e is not None), default=0.0)
            return f"  {part:<9} ok     (worst relative error {worst:.1e} <= {tolerance:.0e})"
        statuses = sorted({getattr(c, part) for c in result.cases} - {"ok"})
        return f"  {part:<9} {' / '.join(statuses).upper()}"

    against = "the expected outputs shipped with this copy" if is_student_copy() else "this package's own outputs"
    lines = [f"{result.exercise} ({', '.join(result.layers)}), {len(result.cases)} cases: "
             f"{'PASSED' if result.passed else 'NOT YET'}",
             verdict("forward", result.forward_ok, [c.forward_error for c in result.cases]) + f"  against {against}",
             verdict("backward", result.backward_ok, [c.backward_error for c in result.cases])
             + "  against finite differences of your forward (float64)"]
    lines += [f"    {problem}" for problem in result.problems()]
    return "\n".join(lines)


def exercises_to_check(names):
    """Resolve the `exercises check` argument to exercise names; ValueError naming the choices when wrong.

    Args:
        names: comma-separated exercise names, "all", or None (the copy's assigned exercises; all in the reference).
    """
    from .catalogue import EXERCISES

    known = [exercise.name for exercise in EXERCISES]
    if names is None:
        manifest = PACKAGE.parent / "exercises.json"
        if manifest.is_file():
            import json

            return json.loads(manifest.read_text()).get("exercises") or known
        return known
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    if wanted == ["all"]:
        return known
    unknown = [name for name in wanted if name not in known]
    if unknown or not wanted:
        raise ValueError(f"exercises check: {names!r} names no exercise"
                         + (f" ({', '.join(map(repr, unknown))} unknown)" if unknown else "")
                         + f"; the exercises are: {', '.join(known)}, or all")
    return wanted


def run_check(names):
    """`exercises check`: print each exercise's verdict; 0 when all pass, 1 otherwise (ValueError: a usage error)."""
    chosen = exercises_to_check(names)
    try:
        expected = expected_here()
    except FileNotFoundError as error:
        raise ValueError(f"exercises check: {error}") from None
    print(f"checking the exercises of {PACKAGE}")
    results = [check_exercise(name, expected) for name in chosen]
    for result in results:
        print()
        print(describe(result))
    passed = sum(result.passed for result in results)
    print(f"\n{passed} of {len(results)} exercises pass")
    return 0 if passed == len(results) else 1
