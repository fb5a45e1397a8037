"""A student's self-check: `exercises check NAME` and the `pytest -m NAME` markers of a student copy.

The student's own code is judged on every gradient-check case of the exercise's layers: the forward against the
reference's outputs on `CHECK_SEED`'s inputs (`exercises make` ships the outputs only), the backward against finite
differences of the student's forward. A failure names the case and input, where and how far off, or where it raised.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..gradcheck.cases import all_cases
from ..gradcheck.checker import DEFAULT_TOLERANCE, compare, compare_gradients, input_names
from .catalogue import EXERCISES, exercise_named
from .located import located

CHECK_SEED = 1912                   # the self-check's inputs; the grader draws its own
EXPECTED_FILE = Path(__file__).resolve().with_name("expected_outputs.npz")
PACKAGE = Path(__file__).resolve().parent.parent
MANIFEST = PACKAGE.parent / "exercises.json"        # beside the package in a student copy only


def exercise_cases(name):
    """The gradient-check cases of an exercise's layers, in catalogue order."""
    layers = set(exercise_named(name).layers)
    return [case for case in all_cases() if case.layer in layers]


def compute_expected(names):
    """{case id: forward output (float64)} of the exercises' cases on CHECK_SEED's inputs, by this package."""
    expected = {}
    for case in [case for name in names for case in exercise_cases(name)]:
        module, inputs, forward = case.build(np.random.default_rng(CHECK_SEED))
        expected[case.id] = np.asarray((forward or module.forward)(*inputs), dtype=np.float64)
    return expected


def expected_here():
    """The outputs shipped with this student copy (FileNotFoundError if it has none); in the reference, its own."""
    if EXPECTED_FILE.is_file():
        with np.load(EXPECTED_FILE) as data:
            return {key: data[key] for key in data.files}
    if MANIFEST.is_file():
        raise FileNotFoundError(f"no {EXPECTED_FILE.name} in {EXPECTED_FILE.parent}: the self-check needs the expected "
                                f"outputs `exercises make` ships with a copy (make the copy again with this version)")
    return compute_expected([exercise.name for exercise in EXERCISES])


@dataclass
class CaseCheck:
    """One case's verdict; each part ok, wrong, not implemented, raised, not checked or no expected values."""

    case: str
    forward: str = "not checked"
    backward: str = "not checked"
    forward_error: float = None     # relative error against the expected output
    backward_error: float = None    # worst relative error over inputs and parameters
    problems: list = field(default_factory=list)


@dataclass
class ExerciseCheck:
    """The self-check of one exercise: a CaseCheck per gradient-check case of its layers."""

    exercise: str
    cases: list

    def ok(self, part):
        """True when `part` ("forward" or "backward") is right on every case."""
        return bool(self.cases) and all(getattr(case, part) == "ok" for case in self.cases)


def _raised(record, part, error):
    """Record an exception the student's code raised in `part`: a hint not yet replaced, or what and where."""
    message = located(error, PACKAGE, "minitransformer/")
    setattr(record, part, "not implemented" if message.startswith("not implemented") else "raised")
    record.problems.append(f"{part} {message}")


def _check_case(case, expected):
    """CaseCheck of one case: its forward against `expected` (None: the copy holds no output for this case), its
    backward against finite differences of its forward."""
    record = CaseCheck(case.id)
    try:
        module, inputs, forward = case.build(np.random.default_rng(CHECK_SEED))
        forward = forward or module.forward
        output = np.asarray(forward(*inputs), dtype=np.float64)
    except Exception as error:                          # the student's code: say what and where, go on
        _raised(record, "forward", error)
        record.problems.append("backward: not checked, it needs a forward that runs")
        return record
    if expected is None:
        record.forward = "no expected values"
        record.problems.append("forward: no expected output for this case in the copy (made by another version?)")
    elif output.shape != expected.shape:
        record.forward = "wrong"
        record.problems.append(f"forward output has shape {output.shape}, expected {expected.shape}")
    else:
        comparison = compare("forward output", output, expected)
        record.forward_error = comparison.error
        record.forward = "ok" if comparison.error <= DEFAULT_TOLERANCE else "wrong"
        if record.forward == "wrong":
            record.problems.append(comparison.describe("yours", "expected"))
    try:
        upstream = np.random.default_rng([CHECK_SEED, 1]).standard_normal(output.shape)
        report, _ = compare_gradients(module, inputs, forward, float(upstream) if output.ndim == 0 else upstream,
                                      names=input_names(forward, len(inputs)))
    except Exception as error:
        _raised(record, "backward", error)
        return record
    record.backward_error = max(report.worst_input_error, report.worst_param_error)
    failures = report.failures(DEFAULT_TOLERANCE)
    record.backward = "wrong" if failures else "ok"
    record.problems += [f"backward: {comparison.describe()}" for comparison in failures]
    return record


def check_exercise(name, expected):
    """ExerciseCheck of exercise `name` ("layernorm") in the package this runs in; `expected`: `expected_here()`."""
    return ExerciseCheck(name, [_check_case(case, expected.get(case.id)) for case in exercise_cases(name)])


def describe(result):
    """The verdict of an ExerciseCheck as text: one line per part, then every problem."""
    against = {"forward": "the expected outputs shipped with this copy" if MANIFEST.is_file() else
               "this package's own outputs", "backward": "finite differences of your forward (float64)"}
    lines = [f"{result.exercise} ({', '.join(exercise_named(result.exercise).layers)}), {len(result.cases)} case{'s' * (len(result.cases) != 1)}: "
             f"{'PASSED' if result.ok('forward') and result.ok('backward') else 'NOT YET'}"]
    for part in ("forward", "backward"):
        if result.ok(part):
            worst = max(getattr(case, f"{part}_error") for case in result.cases)    # set on every case that is ok
            verdict = f"ok     (worst relative error {worst:.1e} <= {DEFAULT_TOLERANCE:.0e})"
        else:
            verdict = " / ".join(sorted({getattr(c, part) for c in result.cases} - {"ok"})).upper()
        lines.append(f"  {part:<9} {verdict}  against {against[part]}")
    return "\n".join(lines + [f"    {c.case}: {problem}" for c in result.cases for problem in c.problems])


def run_check(names):
    """`exercises check`: print the verdict on each exercise of `names` (a list, ["all"], or None: the copy's);
    0 when all pass, else 1. KeyError for an unknown exercise, FileNotFoundError for a copy without outputs."""
    known = [exercise.name for exercise in EXERCISES]
    if names is None:
        names = (MANIFEST.is_file() and json.loads(MANIFEST.read_text(encoding="utf-8")).get("exercises")) or known
    chosen = known if names == ["all"] else [exercise_named(name).name for name in names]
    expected = expected_here()
    print(f"checking the exercises of {PACKAGE}")
    results = [check_exercise(name, expected) for name in chosen]
    for result in results:
        print(f"\n{describe(result)}")
    passed = sum(result.ok("forward") and result.ok("backward") for result in results)
    print(f"\n{passed} of {len(results)} exercises pass")
    return 0 if passed == len(results) else 1
