"""How long OpenBLAS's idle threads spin: set before NumPy loads OpenBLAS, so the package imports this first.

After every product it ran on several threads, OpenBLAS keeps its helper threads spinning for 2^28 processor
cycles before they sleep, in case another product follows. That spinning takes a core: in
the fast tier's training step at long sequences, the linear layers' products (BLAS on the process's threads)
come right before the tiled attention, whose own threads (`fast/tiled_attention.py`) then share the cores with
a helper thread that does nothing. Measured at T = 2048 (benchmarks/README.md, "What kept the second core
idle"): one layer's tiled attention, forward and backward, took longer right after a 2-thread product than after
an idle pause; with the spin cut to 2^22 cycles (long enough to bridge the gap between two products of one
layer) the difference was gone.

OpenBLAS reads `OPENBLAS_THREAD_TIMEOUT` (the exponent, 4 to 30) once, when NumPy loads it. So this module sets
the variable, imports NumPy, and takes the variable out of the environment again: it acts on this process's
OpenBLAS only, and is not passed on to the programs this process starts (a child that imports minitransformer
sets it for itself). It takes effect when minitransformer is imported before NumPy (`python -m minitransformer
...`, the benchmarks); a program that imports NumPy first sets the variable itself. A value already in the
environment is kept, and left there.
"""

import os

SPIN_EXPONENT = 22          # OpenBLAS's helper threads spin 2^22 cycles before they sleep
VARIABLE = "OPENBLAS_THREAD_TIMEOUT"

ours = VARIABLE not in os.environ                   # a user's value is theirs: kept, and left there
if ours:
    os.environ[VARIABLE] = str(SPIN_EXPONENT)
try:
    import numpy  # noqa: F401  (OpenBLAS loads now and reads the variable)
finally:
    if ours:
        del os.environ[VARIABLE]
