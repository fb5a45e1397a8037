"""The self-check of every exercise, one marker per exercise: `pytest -m layernorm`.

In a student copy these tests judge the student's own code (`minitransformer.exercises.check`):
the forward against the outputs `exercises make` shipped with the copy, the backward against finite
differences of the student's own forward. They fail until the exercise is right, saying where
(case, input or parameter, index, relative error), and pass when it is.

In the reference tree they run on the reference: the backward verdict is real there, the forward
is compared with the reference's own outputs. `tests/test_student_copy.py` runs them in copies.
"""

import functools

import pytest

from minitransformer.exercises.catalogue import EXERCISES
from minitransformer.exercises.check import check_exercise, describe, expected_here

PARAMS = [pytest.param(exercise.name, marks=getattr(pytest.mark, exercise.name), id=exercise.name)
          for exercise in EXERCISES]


@functools.cache
def _expected():
    return expected_here()


@functools.cache
def _checked(name):
    return check_exercise(name, expected=_expected())


@pytest.mark.parametrize("name", PARAMS)
def test_forward_gives_the_expected_outputs(name):
    result = _checked(name)
    if not result.ok("forward"):
        pytest.fail(f"the forward of {name} is not right yet\n{describe(result)}", pytrace=False)


@pytest.mark.parametrize("name", PARAMS)
def test_backward_matches_finite_differences_of_the_forward(name):
    result = _checked(name)
    if not result.ok("backward"):
        pytest.fail(f"the backward of {name} is not right yet\n{describe(result)}", pytrace=False)
