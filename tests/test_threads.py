"""Threads per MPI rank (commands/threads.py): the cores a process may run on, the check of --threads-per-rank, the
environment `train --workers` gives mpiexec, the limit each rank sets and the line that says so.

Each branch runs here in one process, without MPI, on fakes: the machine's cores and system, threadpoolctl (the limit
asked for; the pools threadpool_info finds) and MPI_COMM_WORLD (its ranks, those on this rank's host, what the other
ranks gather). tests/test_distributed.py runs the real thing under mpiexec.
"""

import os
import sys
import types

import pytest
import threadpoolctl

from minitransformer.commands import threads


@pytest.fixture
def cores(monkeypatch):
    """cores(n): this process may run on n cores."""
    return lambda count: monkeypatch.setattr(threads, "cores_available", lambda: count)


def blas(count):
    return {"user_api": "blas", "internal_api": "openblas", "num_threads": count}


def openmp(count):
    return {"user_api": "openmp", "internal_api": "openmp", "num_threads": count}


class Pools:
    """threadpoolctl as `limit` meets it: the limits asked for, and the pools threadpool_info then finds."""

    def __init__(self, pools):
        self.pools, self.limits = pools, []

    def threadpool_limits(self, limits=None, user_api=None):
        self.limits.append((limits, user_api))

    def threadpool_info(self):
        return [dict(pool) for pool in self.pools]


@pytest.fixture
def pools(monkeypatch):
    """pools(*pools): threadpoolctl faked, threadpool_info finding `pools`; returns the fake (its .limits)."""
    def fake(*found):
        pools = Pools(list(found))
        monkeypatch.setattr(threadpoolctl, "threadpool_limits", pools.threadpool_limits)
        monkeypatch.setattr(threadpoolctl, "threadpool_info", pools.threadpool_info)
        return pools
    return fake


# ---------------------------------------------------------------- the cores, the check, mpiexec's environment
@pytest.mark.parametrize("platform", ["linux", "darwin", "win32"])
def test_the_cores_are_the_affinity_mask_on_linux_and_the_machines_cores_elsewhere(monkeypatch, platform):
    """A container or `taskset` gives a Linux process 3 of the machine's 16 cores; macOS's and Windows's os have no
    mask (no os.sched_getaffinity), and os.cpu_count() is None where it cannot tell: then 1."""
    monkeypatch.setattr(threads, "sys", types.SimpleNamespace(platform=platform))
    if platform == "linux":
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    else:
        monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert threads.cores_available() == (3 if platform == "linux" else 16)
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert threads.cores_available() == (3 if platform == "linux" else 1)


def test_threads_per_rank_may_be_at_most_the_cores(cores):
    cores(4)
    assert [threads.check(asked) for asked in (None, 1, 4)] == [None, None, None]
    assert threads.check(5) == ("--threads-per-rank 5 is more than the 4 cores this process may run on; "
                                "expected at most that many")


@pytest.mark.parametrize("cores_here, workers, threads_per_rank, expected", [
    (8, 1, None, 8), (8, 3, None, 2), (8, 4, None, 2), (2, 3, None, 1), (8, 2, 3, 3)],
    ids=["8 cores, 1 worker", "8 cores, 3 workers: 2 each, not 3", "8 cores, 4 workers", "2 cores, 3 workers: 1 each",
         "--threads-per-rank 3"])
def test_workers_start_mpiexec_with_the_cores_divided_among_them(cores, monkeypatch, cores_here, workers,
                                                                   threads_per_rank, expected):
    """Both variables set, whatever this shell had set them to; everything else of the environment kept."""
    cores(cores_here)
    for name, value in (("OPENBLAS_NUM_THREADS", "7"), ("OMP_NUM_THREADS", "7"), ("MINITRANSFORMER_PROBE", "kept")):
        monkeypatch.setenv(name, value)
    environment = threads.launch_environment(workers, threads_per_rank)
    assert environment == {**os.environ, "OPENBLAS_NUM_THREADS": str(expected), "OMP_NUM_THREADS": str(expected)}
    assert environment["MINITRANSFORMER_PROBE"] == "kept"


# ---------------------------------------------------------------- one process
def test_one_process_keeps_the_libraries_choice_unless_threads_per_rank_is_given(pools):
    fake = pools(blas(8))
    assert threads.limit(None, None, "replicated") is None and fake.limits == []


@pytest.mark.parametrize("found, line", [
    ((openmp(8), blas(2), blas(4)), "4 BLAS threads"),               # the largest BLAS pool; OpenMP's is not BLAS
    ((blas(1),), "1 BLAS thread"),
    ((openmp(4),), "BLAS threads unknown (no BLAS library found)")], ids=["two BLAS pools", "one thread", "no BLAS"])
def test_one_process_limits_every_pool_to_threads_per_rank_and_says_what_it_finds(pools, found, line):
    fake = pools(*found)
    assert threads.limit(None, 4, "replicated") == f"one process, {line} (--threads-per-rank)"
    assert fake.limits == [(4, None)]                                   # every library: BLAS and OpenMP alike


# ---------------------------------------------------------------- ranks
class World:
    """MPI_COMM_WORLD seen from one rank: `size` ranks, `here` of them on this rank's host; allgather brings back this
    rank's value and then `others` (the other ranks' BLAS threads)."""

    def __init__(self, size, here, others):
        self.size, self.here, self.others, self.split, self.freed = size, here, others, [], []

    def Split_type(self, split_type):                                   # mpi4py's names
        self.split.append(split_type)
        return Host(self)

    def allgather(self, value):
        return [value, *self.others]

    def Get_size(self):
        return self.size


class Host:
    """The communicator of the ranks on this rank's host (what Split_type returns)."""

    def __init__(self, world):
        self.world = world

    def Get_size(self):
        return self.world.here

    def Free(self):
        self.world.freed.append(self)


@pytest.fixture
def mpi(monkeypatch):
    """mpi4py faked: its MPI module knows the shared-memory split alone."""
    module = types.ModuleType("mpi4py")
    module.MPI = types.SimpleNamespace(COMM_TYPE_SHARED=object())
    monkeypatch.setitem(sys.modules, "mpi4py", module)
    return module.MPI


@pytest.mark.parametrize("world, cores_here, threads_per_rank, mode, found, limit, line", [
    ((4, 2, [3, 3, 3]), 6, None, "replicated", blas(3), 3,
     "one job of 4 MPI ranks, replicated, 3 BLAS threads per rank "
     "(6 cores on this host / 2 ranks on it; --threads-per-rank to choose)"),
    ((3, 3, [1, 1]), 2, None, "replicated", blas(1), 1,
     "one job of 3 MPI ranks, replicated, 1 BLAS thread per rank "
     "(2 cores on this host / 3 ranks on it; --threads-per-rank to choose)"),
    ((2, 2, [4]), 8, 2, "sharded", blas(2), 2,
     "one job of 2 MPI ranks, sharded, BLAS threads [2, 4] by rank (--threads-per-rank)")],
    ids=["4 ranks, 2 per host", "more ranks than cores: 1 each", "as chosen, another rank found other threads"])
def test_each_rank_limits_its_threads_to_its_hosts_cores_divided_among_the_ranks_there(
        mpi, pools, cores, world, cores_here, threads_per_rank, mode, found, limit, line):
    """The ranks on this rank's host are those sharing its memory (MPI_COMM_TYPE_SHARED), and the communicator that
    counts them is freed; the line is rank 0's, gathering every rank's BLAS threads."""
    comm, fake = World(*world), pools(found)
    cores(cores_here)
    assert threads.limit(comm, threads_per_rank, mode) == line
    assert fake.limits == [(limit, None)]
    assert comm.split == [mpi.COMM_TYPE_SHARED] and len(comm.freed) == 1
