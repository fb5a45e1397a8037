"""`train` as MPI ranks: the `--workers N` shortcut, rank 0 alone speaking, agreeing on errors, a failed rank.

`mpiexec -n 2 python -m minitransformer train ...` starts two processes, each running the whole command
(training/distributed.py explains the step). Here is what the command adds around the trainer:

* `--workers N` without mpiexec is a shortcut: the command replaces itself with `mpiexec -n N` running the
  very same command line, printed first, so a user sees and can reuse it. It stays so that a user who has
  never heard of MPI trains on two cores with one option (the training guide, docs/guide/training-and-sampling.md,
  offers it that way), and because an `exec` keeps Ctrl-C working: the terminal's Ctrl-C reaches mpiexec, which
  forwards it to every rank. (Windows has no exec: there the command runs mpiexec and waits for it.) Where mpi4py
  or mpiexec is missing, one line says what to install: on Windows, where MPICH has no build, Microsoft MPI.
* Each rank limits its BLAS and OpenMP threads to its share of its host's cores, and rank 0's first line says
  so, with the number of ranks and the mode (commands/threads.py).
* Rank 0 alone prints: the others' stdout and stderr go to os.devnull (their one-line failures excepted).
* Agreement before training: a user's mistake is found on every rank alike, or on rank 0 alone (its --out,
  its run directory); every rank reports its outcome and every rank stops if any failed, rank 0 printing the
  error (the failed rank's own, when it is not rank 0), so no rank waits for one that has left.
* A rank that raises during training prints one line naming itself and ends the job
  (training/distributed.py's `abort`).
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from ..training.distributed import INSTALL
from .errors import UsageError
from .threads import VARIABLES


def find_mpiexec():
    """The mpiexec beside this Python (a venv holding the mpich wheel), or the first on PATH, or None."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.is_file() else shutil.which("mpiexec")


def launch(workers, argv, environment):
    """Replace this process by `mpiexec -n workers python -m minitransformer <argv>` run in `environment`, whose
    thread variables (commands/threads.py) are printed before the command (never returns)."""
    mpiexec = find_mpiexec()
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        mpiexec = None
    if mpiexec is None:
        raise UsageError(f"--workers {workers} runs the command under mpiexec, which needs mpi4py and an MPI: "
                         f"{INSTALL}")
    command = [mpiexec, "-n", str(workers), sys.executable, "-m", "minitransformer", *argv]
    variables = [f"{name}={environment[name]}" for name in VARIABLES]
    print(f"running: {shlex.join(variables + command)}", file=sys.stderr, flush=True)
    if sys.platform == "win32":         # no exec on Windows (os.execve would end this process, leaving mpiexec running
        sys.exit(subprocess.run(command, env=environment).returncode)   # behind the shell's prompt): wait for it
    os.execve(mpiexec, command, environment)


def quiet_unless_rank_0(rank):
    """Send the output of every rank but 0 to os.devnull (distributed.py's `abort` writes to the real stderr)."""
    if rank != 0:
        sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")


def agree(comm, failure):
    """Every rank's outcome of the setup: raise on every rank if any rank failed.

    Args:
        comm: MPI_COMM_WORLD.
        failure: this rank's UsageError (or other error with a one-line message), or None.
    Raises:
        UsageError on every rank if any failed, with the first failure's message (its rank named when not 0).
    """
    failures = comm.allgather(None if failure is None else (type(failure).__name__, str(failure)))
    for rank, failed in enumerate(failures):
        if failed is not None:
            raise UsageError(failed[1] if rank == 0 else f"rank {rank}: {failed[1]}")
