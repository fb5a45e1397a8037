"""Data parallelism on MPI: every rank holds the model and trains on its share of each batch; collectives add up.

Launched as every MPI program is: `mpiexec -n 2 python -m minitransformer train ...` on one machine (or with a
host file on several; the run directory must then be on a file system every machine sees, since a resumed
run reads its checkpoint on every rank). `train --workers N` runs that command for you. mpi4py (the
`[mpi]` extra: `pip install "minitransformer[mpi]"`) speaks the message-passing standard's collectives
over NumPy buffers; the words below are the standard's, and PyTorch's DDP and ZeRO notes use the same.

The arithmetic. A batch's loss is the mean over its B windows, so with rank k taking B_k of them,

    L = sum_k (B_k / B) L_k        and so        dL/dW = sum_k (B_k / B) dL_k/dW.

Each rank starts its backward pass from (B_k / B) dL_k/dlogits, so the sum of the ranks' gradients is the
batch's gradient exactly, also for shares of unequal size (np.array_split: B = 12 on 5 ranks is 3 3 2 2 2).
Rank 0 takes the last share, the smallest, since it also evaluates, prints and writes checkpoints.

Every rank draws the same batch (the same generator from the same seed) and keeps its own rows. Below, P is
the number of weights (0.81 M in nanoGPT's CPU configuration), 4 bytes each in float32, N the number of
ranks; a "ring" all-reduce sends and receives 2 (N - 1) / N of the buffer per rank, a reduce-scatter or an
all-gather (N - 1) / N of it (MPICH picks the algorithm; these are the bandwidth-optimal ones).

One step, replicated (PyTorch's DistributedDataParallel: the gradient all-reduced, every rank updates all):

    forward and backward of this rank's share: (B_k / B) dL_k/dW into the flat gradient buffer
    Iallreduce([share of the loss, stop flag, rank 0's pause], SUM)            # 24 bytes
    Iallreduce(gradient, SUM)                                                   # 4P: 2 (N-1)/N 4P bytes per rank
    clip with the norm of the whole gradient; AdamW on all of W (the same on every rank, bit for bit)

One step, sharded (ZeRO stage 1, Rajbhandari et al. 2020; PyTorch's ZeroRedundancyOptimizer; FSDP's
SHARD_GRAD_OP reduce-scatters the gradient the same way, and frees the rest of it, which is kept here):

    forward and backward of this rank's share, as above
    Iallreduce([share of the loss, stop flag, rank 0's pause], SUM)            # 24 bytes
    Ireduce_scatter(gradient, SUM): rank k receives the sum of its shard        # (N-1)/N 4P bytes per rank
    Iallreduce([sum of squares of shard k], SUM): the clipping norm             # 8 bytes
    AdamW on shard k of W and of the moments (the fast AdamW's step(span=))
    Iallgatherv(shard k of W -> all of W)                                       # (N-1)/N 4P bytes per rank
    before a checkpoint: Igatherv(shard k of m, then of v -> rank 0)            # (N-1)/N 4P bytes each, to rank 0

Both move 2 (N - 1) / N 4P bytes per rank and step (3.2 MB each way for nanoGPT's model on 2 ranks); the
sharded one updates P / N weights per rank instead of P, and needs moments only for its shard (ZeRO's
memory saving; here every rank keeps room for all of them, a small model's 6.5 MB, only its shard current).
benchmarks/README.md has the measured step times and the alpha-beta model for 4 to 64 machines.

The first message comes before the large ones. It carries the loss, and the stop flag: Ctrl-C under mpiexec
reaches every rank (mpiexec forwards it); on each, the trainer's handler only raises a flag
(`stop_at_step_boundary`), which the next step's all-reduce adds up, so every rank learns at the same step
that one was interrupted, finishes that step's update and stops; rank 0 saves there (objectives/language_model.py). And it
carries rank 0's longest pause to evaluate and save, which the other ranks' deadline allows for.

Deadlines: every message is sent non-blocking and waited for with a limit, the larger of
TrainConfig.worker_timeout (train --worker-timeout, 60 s by default) and STEP_TIMEOUT_FACTOR times the
slowest step so far (START_TIMEOUT for the first step). Rank 0 gives up first; rank k > 0 waits
2 + (k - 1) / N times as long, plus, after an evaluation, rank 0's pause allowance, so one rank speaks.
The rank that gives up pings every other rank (on a communicator of its own; every waiting rank answers
pings), prints one line naming those that do not answer (rank, pid, host) and calls `MPI_Abort`, which
ends every rank of the job, stopped ones too, after our line and before MPI's own. A rank that raises
prints one line naming itself and the step and aborts the same way (objectives/language_model.py). Checkpoints are written
whole or not at all (checkpoint.py), so the last one stays intact. A wait looks at its message without
pause for SPIN seconds, then sleeps POLL between looks, leaving the cores to ranks still computing.

Randomness: rank 0's dropout masks come from the model's generator (checkpoints save it); rank k > 0 seeds
its generator at each step from (seed, DROPOUT_STREAM, step, k), so a resumed run draws the same masks with
nothing more saved. The same seed and the same N give the same numbers bit for bit; another N splits the
batch otherwise, so the sums round otherwise (and with dropout the masks differ).

Left out: overlapping the all-reduce with the backward pass (DDP's buckets), gradient accumulation, sharding
the weights themselves (ZeRO-3, FSDP's FULL_SHARD), a rank joining or leaving a running job.
"""

import math
import os
import socket
import sys
import time

import numpy as np

from .optim.clipping import factor_for_norm

DROPOUT_STREAM = 3          # rank k's dropout masks at a step: default_rng([seed, 3, step, k])
START_TIMEOUT = 300         # seconds: the first step's wait (start-up, the untrained evaluation and sample)
STEP_TIMEOUT_FACTOR = 20    # a wait may last this many times the slowest step so far (if > worker_timeout)
SPIN = 0.002                # seconds a wait looks at its message without pause (the others are about to answer)
POLL = 2e-4                 # seconds between two looks after that, leaving the core to the ranks still computing
PING, ANSWER = 1, 2         # tags of the ping communicator's messages
MODES = ("replicated", "sharded")
INSTALL = 'pip install "minitransformer[mpi]" (mpi4py and an MPI, e.g. pip install mpi4py mpich)'


def mpi_world():
    """(rank, size) of this process in MPI_COMM_WORLD, or (0, 1) when mpi4py is missing or there is one rank.

    Imports mpi4py only when the process was started by an MPI launcher (it sets PMI_RANK or
    OMPI_COMM_WORLD_RANK), so that a one-process run never needs it."""
    if not any(name in os.environ for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK")):
        return 0, 1
    comm = world()
    return comm.Get_rank(), comm.Get_size()


def world():
    """mpi4py's MPI_COMM_WORLD; a RuntimeError saying what to install if mpi4py is missing."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise RuntimeError(f"this process was started by mpiexec, but mpi4py is missing: {INSTALL}") from None
    return MPI.COMM_WORLD


def shares(batch_size, size):
    """Rank k's rows of a batch, as a slice: the parts of np.array_split, rank 0 taking the last (smallest)."""
    bounds = np.cumsum([0] + [len(part) for part in np.array_split(np.arange(batch_size), size)])
    return [slice(bounds[(k - 1) % size], bounds[(k - 1) % size + 1]) for k in range(size)]


class DataParallel:
    """The data-parallel step of `Trainer` under MPI (see the module docstring).

    Args:
        model: this rank's GPT (built from the same seed on every rank, so the same weights).
        optimizer: its FastAdamW (one flat buffer: the collectives' buffers).
        loss_fn: its CrossEntropyLoss.
        config: the TrainConfig (batch_size, grad_clip, dropout, seed, worker_timeout).
        mode: "replicated" (DDP) or "sharded" (ZeRO-1).
    """

    def __init__(self, model, optimizer, loss_fn, config, mode="replicated"):
        from mpi4py import MPI

        if mode not in MODES:
            raise ValueError(f"DataParallel expected mode 'replicated' or 'sharded', got {mode!r}")
        self.MPI, self.comm = MPI, MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        if not 1 <= self.size <= config.batch_size:
            raise ValueError(f"DataParallel: {self.size} ranks for a batch of {config.batch_size} windows; each rank "
                             "needs at least one (mpiexec -n at most the batch size)")
        self.model, self.optimizer, self.loss_fn, self.config, self.mode = model, optimizer, loss_fn, config, mode
        self.rows = shares(config.batch_size, self.size)[self.rank]
        size = optimizer.data.size
        self.counts = [size * (k + 1) // self.size - size * k // self.size for k in range(self.size)]
        self.displacements = [size * k // self.size for k in range(self.size)]
        self.shard = (self.displacements[self.rank], self.displacements[self.rank] + self.counts[self.rank])
        self.who = self.comm.allgather(f"pid {os.getpid()} on {socket.gethostname()}")   # for the error lines
        self.pings = self.comm.Dup()    # "are you there?" when a deadline passes, apart from the step's messages
        self.slowest_step, self.steps = 0.0, 0
        self.interrupted = False        # this rank's Ctrl-C, set by Trainer.fit; sent in the step's first message
        self.root_pause = 0.0           # seconds: rank 0's longest evaluation and save (it says so in each answer)

    def step_across_ranks(self, x, y, step, lr):
        """One step on (x, y), the whole batch (B, T), split over the ranks; returns (loss, gradient norm, stop),
        the same on every rank.

        stop: some rank was interrupted (Ctrl-C); every rank has finished this step's update and stops now.
        """
        started = time.perf_counter()
        share = (self.rows.stop - self.rows.start) / len(x)
        self.model.train()
        if self.rank > 0 and self.config.dropout:
            seeded = np.random.default_rng([self.config.seed, DROPOUT_STREAM, step, self.rank])
            self.model.dropout_rng.bit_generator.state = seeded.bit_generator.state
        self.optimizer.lr = lr
        self.optimizer.zero_grad()
        loss = share * float(self.loss_fn(self.model(x[self.rows]), y[self.rows]))   # (B_k / B) L_k
        self.model.backward(share * self.loss_fn.backward())                         # (B_k / B) dL_k/dW
        control = np.array([loss, float(self.interrupted), self.root_pause if self.rank == 0 else 0.0])
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, control, op=self.MPI.SUM),         # 24 bytes
                   step, "the step's first message (the loss and the stop flag)", after_evaluation=True)
        self.root_pause = control[2]
        norm = self._sharded_update(step) if self.mode == "sharded" else self._replicated_update(step)
        self.steps += 1
        self.slowest_step = max(self.slowest_step, time.perf_counter() - started)
        return float(control[0]), norm, bool(control[1])

    def _replicated_update(self, step):
        """Allreduce the gradient; every rank clips and updates all of W."""
        grad = self.optimizer.grad
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, grad, op=self.MPI.SUM),            # 4P bytes, summed
                   step, "the gradient's all-reduce")
        norm = math.sqrt(float(np.vdot(grad, grad)))
        self.optimizer.grad_scale = factor_for_norm(norm, self.config.grad_clip) if self.config.grad_clip else 1.0
        self.optimizer.step()
        return norm

    def _sharded_update(self, step):
        """Reduce_scatter the gradient, Allreduce the norm's parts, AdamW on this shard, Allgatherv W."""
        (start, stop), optimizer, dtype = self.shard, self.optimizer, self._dtype()
        mine = np.empty(stop - start, optimizer.grad.dtype)
        self._wait(self.comm.Ireduce_scatter(optimizer.grad, mine, self.counts, op=self.MPI.SUM),   # (N-1)/N 4P
                   step, "the gradient's reduce-scatter")
        optimizer.grad[start:stop] = mine
        squares = np.array([np.vdot(mine, mine)], np.float64)
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, squares, op=self.MPI.SUM),         # 8 bytes
                   step, "the all-reduce of the norm")
        norm = math.sqrt(squares[0])
        optimizer.grad_scale = factor_for_norm(norm, self.config.grad_clip) if self.config.grad_clip else 1.0
        optimizer.step(span=self.shard)
        whole = [optimizer.data, self.counts, self.displacements, dtype]
        self._wait(self.comm.Iallgatherv(self.MPI.IN_PLACE, whole), step, "the weights' all-gather")  # (N-1)/N 4P
        return norm

    def gather_state(self):
        """Before rank 0 saves: the moments of every shard to rank 0 (sharded; replicated holds them all)."""
        if self.mode != "sharded":
            return
        start, stop = self.shard
        for moment in self.optimizer.moments.values():
            whole = [moment, self.counts, self.displacements, self._dtype()]
            own = self.MPI.IN_PLACE if self.rank == 0 else moment[start:stop]
            self._wait(self.comm.Igatherv(own, whole if self.rank == 0 else None, root=0),      # (N-1)/N 4P bytes
                       self.steps, "the gather of the moments")

    def _dtype(self):
        return self.MPI.FLOAT if self.optimizer.data.dtype == np.float32 else self.MPI.DOUBLE

    # ---------------------------------------------------------------- deadlines
    def deadline(self, step, after_evaluation=False):
        """Seconds this rank's next wait may last (see "Deadlines" in the module docstring)."""
        limit = max(self.config.worker_timeout, STEP_TIMEOUT_FACTOR * self.slowest_step)
        if self.steps == 0:
            limit = max(limit, START_TIMEOUT)
        if self.rank > 0:                      # rank 0 gives up first, then rank 1, ...: one line is printed
            limit *= 2 + (self.rank - 1) / self.size
            if after_evaluation and step % self.config.eval_interval == 0:     # rank 0 evaluated before it
                limit += max(self.config.worker_timeout, STEP_TIMEOUT_FACTOR * self.root_pause)
        return limit

    def _wait(self, request, step, what, after_evaluation=False):
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
                self.abort(f"{names} did not answer {what} at step {step + 1} within {limit:.3g} s (the larger of "
                           f"--worker-timeout, {self.config.worker_timeout:g} s, and {STEP_TIMEOUT_FACTOR} times the "
                           "slowest step so far); the last checkpoint is intact: continue with --resume")
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

    def abort(self, message):
        """Print `error: <message>` (one line, flushed before MPI's own) and end every rank of the job."""
        abort(message, self.comm)


ABORT_GRACE = 1.0       # seconds between our error line and MPI_Abort: under load, MPICH's process manager lost
                        # a line printed just before the abort (seen once in CI's 3-rank failure test)


def abort(message, comm=None):
    """One `error:` line on the process's real stderr (other ranks' sys.stderr is silenced), flushed before
    MPI's own lines, then MPI_Abort: mpiexec ends every rank of the job (stopped ones too)."""
    print(f"error: {message}", file=sys.__stderr__, flush=True)
    time.sleep(ABORT_GRACE)             # mpiexec forwards the line before the abort tears its relay down
    (comm or world()).Abort(1)
