"""The checks that options are held to: a finite real number (a temperature, a learning rate, a limit) and the
float dtype of a layer's parameters.

NumPy and Python would otherwise let a NaN or an infinity through every comparison that guards an option
(`nan < 0` is False), a bool pass for the number 0 or 1, and a layer be built in float16 or in integers.
"""

import math
import numbers

import numpy as np


def is_finite_number(value):
    """True for a real number (int, float, NumPy scalar; not a bool) that is neither NaN nor infinite."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_float_dtype(dtype, where):
    """Return `np.dtype(dtype)` if it is float32 or float64, else raise naming `where`."""
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{where}: dtype must be float32 or float64, got {dtype}")
    return dtype
