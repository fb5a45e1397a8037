"""The one test of "a finite real number" that options are held to (a temperature, a learning rate, a limit).

NumPy and Python would otherwise let a NaN or an infinity through every comparison that guards an option
(`nan < 0` is False), and a bool pass for the number 0 or 1.
"""

import math
import numbers


def is_finite_number(value):
    """True for a real number (int, float, NumPy scalar; not a bool) that is neither NaN nor infinite."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
