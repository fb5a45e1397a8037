"""`--threads N` for the benchmark scripts: it must act before NumPy loads its BLAS, so each script reads it from
its argv here, ahead of argparse, before it imports NumPy.

It then imports minitransformer before NumPy, as `python -m minitransformer` does, so that the package's setting
of OpenBLAS's idle threads (`minitransformer/fast/blas_idle.py`) holds in the benchmarks as it does for users.
"""

import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def threads_from_argv(argv, default=None):
    """Export `--threads N` (or `default`) as the BLAS and OpenMP thread counts; return it (None: left alone).

    `--threads` must be an integer >= 1: anything else ends the script with one `error:` line (status 2)."""
    threads = argv[argv.index("--threads") + 1] if "--threads" in argv[:-1] else default
    if threads is not None:
        if not str(threads).isdigit() or int(threads) < 1:
            print(f"error: --threads expected an integer >= 1, got {threads!r}", file=sys.stderr)
            sys.exit(2)
        for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[variable] = str(threads)
    sys.path.insert(0, ROOT)
    import minitransformer  # noqa: F401  (before NumPy: its OpenBLAS settings apply)
    return threads
