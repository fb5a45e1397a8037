"""`--threads N` for the benchmark scripts: it must act before NumPy loads its BLAS, so each script reads it from
its argv here, ahead of argparse, before it imports NumPy."""

import os


def threads_from_argv(argv, default=None):
    """Export `--threads N` (or `default`) as the BLAS and OpenMP thread counts; return it (None: left alone)."""
    threads = argv[argv.index("--threads") + 1] if "--threads" in argv else default
    if threads is not None:
        for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[variable] = str(threads)
    return threads
