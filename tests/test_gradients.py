"""Every backward pass against central differences, float64, relative error <= 1e-7.

The cases are the package's own catalogue (`minitransformer.gradcheck.cases.layers`),
the same ones `python -m minitransformer gradcheck` prints.
"""

import numpy as np
import pytest

from minitransformer.gradcheck.cases import all_cases
from minitransformer.gradcheck.checker import DEFAULT_TOLERANCE, check_module

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_backward_matches_finite_differences(case):
    module, inputs, forward = case.build(np.random.default_rng(0))
    report = check_module(module, inputs, forward=forward, rng=1)
    assert report.inputs or report.params, f"{case.id} checked nothing"
    report.assert_ok(DEFAULT_TOLERANCE)
