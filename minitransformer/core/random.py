"""Randomness is passed in, never taken from NumPy's global state.

Every constructor or function that needs random numbers takes `rng`, which may
be an integer seed, `None` (a fresh, unseeded generator) or an existing
`np.random.Generator` (shared, so that consecutive layers draw consecutive
numbers). The same seed always gives the same numbers.
"""

import numpy as np

from .checks import check_float_dtype  # noqa: F401  (its place up to 0.4, kept until 0.6: core/checks.py)


def as_generator(rng):
    """Turn a seed, `None` or a Generator into a `np.random.Generator`.

    Args:
        rng: int seed, None, or np.random.Generator (returned unchanged).
    Returns:
        np.random.Generator.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, (int, np.integer)):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be an int seed, None or np.random.Generator, got {type(rng).__name__}")


def spawn_generator(rng):
    """A generator of its own, seeded by one draw from the Generator `rng`.

    The models draw their dropout masks from one, so that switching dropout on or off never shifts
    the numbers the weights are drawn from, and one seed still fixes both.
    """
    return np.random.default_rng(rng.integers(2**63))


def dropout_generator(rng, dropout_rng):
    """The generator for a layer's dropout masks: `dropout_rng` if given (seed or Generator), else `rng`."""
    return rng if dropout_rng is None else as_generator(dropout_rng)
