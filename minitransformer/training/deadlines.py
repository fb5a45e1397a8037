"""Deadlines of the data-parallel step: how long a rank waits for the others, and how a job ends when one is gone.

Every message of the step (training/distributed.py) is sent non-blocking and waited for here with a limit, the
larger of the worker timeout (TrainConfig.worker_timeout, train --worker-timeout, 60 s by default) and
STEP_TIMEOUT_FACTOR times the slowest step so far (START_TIMEOUT for the first step). Rank 0 gives up first;
rank k > 0 waits 2 + (k - 1) / N times as long, plus, after an evaluation, rank 0's pause allowance, so one rank
speaks. The rank that gives up pings every other rank (on a communicator of its own; every waiting rank answers
pings), prints one line naming those that do not answer (rank, pid, host) and calls `MPI_Abort`, which ends
every rank of the job, stopped ones too, after our line and before MPI's own. A rank that raises prints one
line naming itself and the step and aborts the same way (training/harness.py). Checkpoints are written whole or
not at all (checkpoint.py), so the last one stays intact. A wait looks at its message without pause for SPIN
seconds, then sleeps POLL between looks, leaving the cores to ranks still computing.

Left out: a rank joining or leaving a running job, retrying a message.
"""

import os
import socket
import sys
import time

START_TIMEOUT = 300         # seconds: the first step's wait (start-up, the untrained evaluation and sample)
STEP_TIMEOUT_FACTOR = 20    # a wait may last this many times the slowest step so far (if > worker_timeout)
SPIN = 0.002                # seconds a wait looks at its message without pause (the others are about to answer)
POLL = 2e-4                 # seconds between two looks after that, leaving the core to the ranks still computing
PING, ANSWER = 1, 2         # tags of the ping communicator's messages
ABORT_GRACE = 1.0           # seconds between our error line and MPI_Abort: under load, MPICH's process manager lost
                            # a line printed just before the abort (seen once in CI's 3-rank failure test)


class Deadlines:
    """The waits of one rank (module docstring).

    Args:
        comm: the step's communicator (MPI_COMM_WORLD).
        worker_timeout: seconds, the least a wait may last.
        eval_interval: steps between rank 0's evaluations (whose pause the others allow for), or None.
    """

    def __init__(self, comm, worker_timeout, eval_interval=None):
        self.comm, self.worker_timeout, self.eval_interval = comm, worker_timeout, eval_interval
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.who = comm.allgather(f"pid {os.getpid()} on {socket.gethostname()}")   # for the error lines
        self.pings = comm.Dup()         # "are you there?" when a deadline passes, apart from the step's messages
        self.slowest_step, self.steps = 0.0, 0
        self.root_pause = 0.0           # seconds: rank 0's longest evaluation and save (it says so in each step)

    def step_took(self, seconds):
        """Count a finished step and remember the slowest."""
        self.steps += 1
        self.slowest_step = max(self.slowest_step, seconds)

    def deadline(self, step, after_evaluation=False):
        """Seconds this rank's next wait may last."""
        limit = max(self.worker_timeout, STEP_TIMEOUT_FACTOR * self.slowest_step)
        if self.steps == 0:
            limit = max(limit, START_TIMEOUT)
        if self.rank > 0:                      # rank 0 gives up first, then rank 1, ...: one line is printed
            limit *= 2 + (self.rank - 1) / self.size
            evaluated = self.eval_interval is None or step % self.eval_interval == 0
            if after_evaluation and evaluated:  # rank 0 evaluated before it
                limit += max(self.worker_timeout, STEP_TIMEOUT_FACTOR * self.root_pause)
        return limit

    def wait(self, request, step, what, after_evaluation=False):
        """Wait for `request`, answering other ranks' pings and sleeping POLL between looks (after the first
        SPIN seconds); past the deadline, print one line naming the ranks that do not answer and abort."""
        started = time.monotonic()
        limit = self.deadline(step, after_evaluation)
        while not request.Test():
            self._answer_pings()
            waited = time.monotonic() - started
            if waited > limit:
                silent = self._silent_ranks(grace=min(limit / 4, 10.0))
                names = " and ".join(f"rank {k} ({self.who[k]})" for k in silent) or "a rank (which, none said)"
                abort(f"{names} did not answer {what} at step {step + 1} within {limit:.3g} s (the larger of "
                      f"--worker-timeout, {self.worker_timeout:g} s, and {STEP_TIMEOUT_FACTOR} times the "
                      "slowest step so far); the last checkpoint is intact: continue with --resume", self.comm)
            if waited > SPIN:
                time.sleep(POLL)

    def _answer_pings(self):
        """Answer every ping waiting on the ping communicator (another rank asking who is alive)."""
        while self.pings.iprobe(tag=PING):
            asker = self.pings.recv(tag=PING)
            self.pings.send(self.rank, dest=asker, tag=ANSWER)                   # a few bytes: sent at once

    def _silent_ranks(self, grace):
        """Ping every other rank; return, sorted, those that do not answer within `grace` seconds."""
        for k in range(self.size):
            if k != self.rank:
                self.pings.send(self.rank, dest=k, tag=PING)
        replies = {k: self.pings.irecv(source=k, tag=ANSWER) for k in range(self.size) if k != self.rank}
        end = time.monotonic() + grace
        while replies and time.monotonic() < end:
            self._answer_pings()
            replies = {k: reply for k, reply in replies.items() if not reply.test()[0]}
            time.sleep(POLL)
        return sorted(replies)


def abort(message, comm=None):
    """One `error:` line on the process's real stderr (other ranks' sys.stderr is silenced), flushed before
    MPI's own lines, then MPI_Abort: mpiexec ends every rank of the job (stopped ones too)."""
    print(f"error: {message}", file=sys.__stderr__, flush=True)
    time.sleep(ABORT_GRACE)             # mpiexec forwards the line before the abort tears its relay down
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    comm.Abort(1)
