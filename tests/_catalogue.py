"""The gradient-check catalogue split by concept: which test file checks which of its rows.

The catalogue (`minitransformer.gradcheck.cases.all_cases()`, the rows `python -m minitransformer
gradcheck` prints) names each row by its layer ("LayerNorm", "GPT + loss", ...). A concept file checks
its own layers' rows:

    @pytest.mark.parametrize("case", catalogue_cases("LayerNorm"), ids=case_id)
    def test_backward_matches_finite_differences(case):
        assert_gradients_match(case)

and tests/test_gradients.py checks every row that no file claims this way (`unclaimed_cases()`). The
claims are read from the test files' source, so every file can tell which rows are its own without
importing the others, and tests/test_gradients.py proves that each row is checked by exactly one file.
These checks run along random directions (the quick check); tests/test_gradients.py checks every row at
every coordinate too, in the full run (`python -m pytest --full`).
"""

import ast
from pathlib import Path

import numpy as np

from minitransformer.gradcheck.cases import all_cases
from minitransformer.gradcheck.checker import DEFAULT_TOLERANCE, check_module

TESTS = Path(__file__).resolve().parent
CLAIM = "catalogue_cases"                  # the call whose literal arguments claim catalogue rows


def catalogue_cases(*layers):
    """The catalogue's rows of the given layers (row names as in `gradcheck`'s table), in catalogue order.

    Raises LookupError for a name that has no row, so a typo cannot claim nothing.
    """
    cases = all_cases()
    unknown = sorted(set(layers) - {case.layer for case in cases})
    if unknown:
        raise LookupError(f"the gradient-check catalogue has no rows named {unknown}")
    return [case for case in cases if case.layer in layers]


def case_id(case):
    """The test id of a catalogue row: its id in `gradcheck`'s table, e.g. 'LayerNorm[x (2, 3, 6)]'."""
    return case.id


def assert_gradients_match(case, mode="directions"):
    """Float64 central differences against the case's backward, relative error <= DEFAULT_TOLERANCE (1e-7): along
    random directions, every coordinate where they disagree (`check_module`'s quick check, the concept files'), or
    at every coordinate (mode "coordinates": tests/test_gradients.py, in the full run).

    The failure message names the row, then every input and parameter whose gradient is wrong and where.
    """
    module, inputs, forward = case.build(np.random.default_rng(0))
    report = check_module(module, inputs, forward=forward, rng=1, mode=mode)
    assert report.inputs or report.params, f"{case.id} checked nothing"
    try:
        report.assert_ok(DEFAULT_TOLERANCE)
    except AssertionError as error:
        raise AssertionError(f"catalogue row {case.id}: {error}") from None


def claims():
    """(claims, unreadable): {layer: [files that call catalogue_cases with it]} over tests/test_*.py,
    and the places that call catalogue_cases with anything but string literals (which cannot be read)."""
    claimed, unreadable = {}, []
    for path in sorted(TESTS.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name != CLAIM:
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    claimed.setdefault(arg.value, []).append(path.name)
                else:
                    unreadable.append(f"{path.name}:{node.lineno}")
            if node.keywords:
                unreadable.append(f"{path.name}:{node.lineno}")
    return claimed, unreadable


def unclaimed_cases():
    """The catalogue's rows whose layer no test file claims, in catalogue order."""
    claimed, _ = claims()
    return [case for case in all_cases() if case.layer not in claimed]
