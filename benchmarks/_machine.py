"""What a benchmark says of the machine it ran on, the same way on every system: the load average and this process's
peak memory. Windows has neither (no `os.getloadavg`, no `resource` module): there both are NaN, printed "nan"."""

import math
import os
import sys


def load_average():
    """The load average over the last minute (NaN on Windows)."""
    if sys.platform == "win32":
        return math.nan
    return os.getloadavg()[0]


def peak_mb():
    """This process's peak resident memory so far, in MiB (NaN on Windows): ru_maxrss counts KiB on Linux, bytes on
    macOS."""
    if sys.platform == "win32":
        return math.nan
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10
