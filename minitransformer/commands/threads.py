"""Threads per MPI rank: how many BLAS and OpenMP threads each process of a data-parallel job may run.

NumPy's BLAS (OpenBLAS in NumPy's wheels) starts one thread per core in every process that loads it. Two ranks
on a 2-core machine then run four threads that spin against each other: `mpiexec -n 2 ... train` took several
times as long a step so as with one thread per rank (benchmarks/README.md, "What the code's docstrings point
to"). So every rank of a job limits its threads, at start, to the cores of its host divided among the ranks on
that host (at least one), or to `train --threads-per-rank N`:

* `train --workers N` exports OPENBLAS_NUM_THREADS and OMP_NUM_THREADS to mpiexec, so each rank's libraries
  start with that many threads (`launch_environment`);
* every rank, however started, limits its pools with threadpoolctl (`limit`), which also reaches a library
  loaded before the variables were read; the run's first line reports the threads each rank then has
  (`threadpoolctl.threadpool_info()`, gathered from every rank).

Cores are those this process may run on (`cores_available`: its affinity mask on Linux, all of the machine's on
macOS and Windows). A one-process run keeps the libraries' own choice unless `--threads-per-rank` is given.

Left out: binding ranks to cores (mpiexec's `-bind-to core`), which a shared machine's scheduler does better.
"""

import os
import sys

VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


def cores_available():
    """The number of cores this process may run on: its affinity mask on Linux (a container or `taskset` may give it
    fewer than the machine has), the machine's cores on macOS and Windows, whose `os` has no such mask. (Python 3.13's
    `os.process_cpu_count()` is this on every system: use it once 3.13 is the oldest Python supported.)"""
    if sys.platform == "linux":
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check(threads_per_rank):
    """A UsageError's message if --threads-per-rank asks for more threads than this machine's cores, else None."""
    if threads_per_rank is not None and threads_per_rank > cores_available():
        return (f"--threads-per-rank {threads_per_rank} is more than the {cores_available()} cores this process "
                "may run on; expected at most that many")
    return None


def launch_environment(workers, threads_per_rank):
    """The environment of `mpiexec -n workers` started by `train --workers`: this one, with the thread
    variables set to --threads-per-rank, or to this machine's cores divided among the workers."""
    threads = threads_per_rank or max(1, cores_available() // workers)
    return {**os.environ, **{variable: str(threads) for variable in VARIABLES}}


def limit(comm, threads_per_rank, mode):
    """Limit this rank's BLAS and OpenMP threads; return the line that describes the job (None for one process
    left to the libraries' choice). Collective: every rank of `comm` (MPI_COMM_WORLD, or None) calls it.

    Args:
        comm: MPI_COMM_WORLD, or None for one process.
        threads_per_rank: --threads-per-rank, or None for the cores of each host divided among its ranks.
        mode: "replicated" or "sharded", for the line.
    """
    from threadpoolctl import threadpool_info, threadpool_limits

    if comm is None:
        if threads_per_rank is None:
            return None
        threadpool_limits(limits=threads_per_rank)
        return f"one process, {_threads(_blas_threads(threadpool_info()))} (--threads-per-rank)"
    from mpi4py import MPI

    host = comm.Split_type(MPI.COMM_TYPE_SHARED)
    ranks_here = host.Get_size()
    host.Free()
    threads = threads_per_rank or max(1, cores_available() // ranks_here)
    threadpool_limits(limits=threads)
    counts = comm.allgather(_blas_threads(threadpool_info()))
    why = ("--threads-per-rank" if threads_per_rank else
           f"{cores_available()} cores on this host / {ranks_here} ranks on it; --threads-per-rank to choose")
    each = f"{_threads(counts[0])} per rank" if len(set(counts)) == 1 else f"BLAS threads {counts} by rank"
    return f"one job of {comm.Get_size()} MPI ranks, {mode}, {each} ({why})"


def _blas_threads(pools):
    """The threads of this process's BLAS (the largest pool, if several libraries are loaded), or None."""
    counts = [pool["num_threads"] for pool in pools if pool.get("user_api") == "blas"]
    return max(counts) if counts else None


def _threads(count):
    return "BLAS threads unknown (no BLAS library found)" if count is None else \
        f"{count} BLAS thread{'s' if count != 1 else ''}"
