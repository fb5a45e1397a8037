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

    forward and backward of this rank's share, (B_k / B) dL_k/dW into the flat gradient buffer
    Isend [share of the loss, stop flag] to rank 0; rank 0 Irecv from each      # 16 bytes from each rank
    Ibcast [loss, stop flag] from rank 0                                        # 16 bytes to each rank
    Allreduce(gradient, SUM)                                                    # 4P: 2 (N-1)/N 4P bytes per rank
    clip with the norm of the whole gradient; AdamW on all of W (the same on every rank, bit for bit)

One step, sharded (ZeRO stage 1, Rajbhandari et al. 2020; PyTorch's ZeroRedundancyOptimizer; FSDP calls
the gradient's reduce-scatter SHARD_GRAD_OP, which frees the rest of the gradient too: here it is kept):

    forward and backward of this rank's share, as above
    the control message: [loss, stop flag] to rank 0 and back, as above         # 16 + 16 bytes
    Reduce_scatter(gradient, SUM): rank k receives the sum of its shard         # (N-1)/N 4P bytes per rank
    Allreduce([sum of squares of shard k], SUM): the clipping norm              # 8 bytes
    AdamW on shard k of W and of the moments (the fast AdamW's step(span=))
    Allgatherv(shard k of W -> all of W)                                        # (N-1)/N 4P bytes per rank
    (before a checkpoint: Gatherv(shard k of m, of v -> rank 0)                 # (N-1)/N 8P bytes, to rank 0)

Both move 2 (N - 1) / N 4P bytes per rank and step (6.5 MB for nanoGPT's model on 2 ranks); the sharded one
updates P / N weights per rank instead of P, and needs moments only for its shard (ZeRO's memory saving;
here every rank keeps room for all of them, a small model's 6.5 MB, and only its shard is current).

The control message comes first, before the large collectives, for two reasons. Stopping: Ctrl-C under
mpiexec reaches every rank (mpiexec forwards it); each rank's SIGINT handler only raises a flag, the flags
travel to rank 0, and rank 0's answer tells every rank to stop after this step's update, so they all stop
at the same step, and rank 0 saves there. Deadlines: a large collective cannot say who is late, but rank 0
hearing from each rank in turn can. Rank 0 waits at most the step deadline (the larger of
TrainConfig.worker_timeout and STEP_TIMEOUT_FACTOR times the slowest step so far; START_TIMEOUT for the
first step) and then prints one line naming the silent ranks (rank, pid, host) and aborts the job; the
other ranks wait for rank 0 longer (they also wait while it evaluates and saves: EVAL_TIMEOUT at those
steps), and name rank 0 if it is silent. A rank that raises prints one line naming itself and the step and
aborts. `MPI_Abort` ends every rank (mpiexec kills them, stopped ones too), after our line and before MPI's
own; checkpoints are written whole or not at all (checkpoint.py), so the last one stays intact. The waits
poll with short sleeps, so a waiting rank leaves the cores to the ranks still computing.

Randomness: rank 0's dropout masks come from the model's generator (checkpoints save it); rank k > 0 seeds
its generator at each step from (seed, DROPOUT_STREAM, step, k), so a resumed run draws the same masks with
nothing more saved. The same seed and the same N give the same numbers bit for bit; another N splits the
batch otherwise, so the sums round otherwise (and with dropout the masks differ).

Left out: overlapping the all-reduce with the backward pass (DDP's buckets), gradient accumulation, sharding
the weights themselves (ZeRO-3, FSDP's FULL_SHARD), a rank joining or leaving a running job.
"""

import math
import os
import signal
import socket
import sys
import time

import numpy as np

from .optim.clipping import factor_for_norm

DROPOUT_STREAM = 3          # rank k's dropout masks at a step: default_rng([seed, 3, step, k])
START_TIMEOUT = 300         # seconds: the first step's wait (start-up, the untrained evaluation and sample)
EVAL_TIMEOUT = 300          # seconds: a wait for rank 0 across its evaluation and checkpoint
STEP_TIMEOUT_FACTOR = 20    # a wait may last this many times the slowest step so far (if > worker_timeout)
POLL = 2e-4                 # seconds between two looks at an unfinished message
MODES = ("replicated", "sharded")
INSTALL = 'pip install "minitransformer[mpi]" (mpi4py and an MPI, e.g. pip install mpi4py mpich)'


def mpi_world():
    """(rank, size) of this process in MPI_COMM_WORLD, or (0, 1) when mpi4py is missing or there is one rank.

    Imports mpi4py only when the process was started by an MPI launcher (it sets PMI_RANK or
    OMPI_COMM_WORLD_RANK), so that a one-process run never needs it."""
    if not any(name in os.environ for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK")):
        return 0, 1
    comm = _comm()
    return comm.Get_rank(), comm.Get_size()


def _comm():
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
        self.slowest_step, self.interrupted, self.steps = 0.0, False, 0
        signal.signal(signal.SIGINT, self._interrupt)

    def _interrupt(self, signum, frame):
        self.interrupted = True                         # acted on at this step's control message

    def train_step(self, x, y, step, lr):
        """One step on (x, y), the whole batch (B, T); returns (loss, gradient norm, stop), the same on every rank.

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
        loss, stop = self._control(step, loss)
        norm = self._sharded_update() if self.mode == "sharded" else self._replicated_update()
        self.steps += 1
        self.slowest_step = max(self.slowest_step, time.perf_counter() - started)
        return loss, norm, stop

    def _replicated_update(self):
        """Allreduce the gradient; every rank clips and updates all of W."""
        grad = self.optimizer.grad
        self.comm.Allreduce(self.MPI.IN_PLACE, grad, op=self.MPI.SUM)                  # 4P bytes, summed
        norm = math.sqrt(float(np.vdot(grad, grad)))
        self.optimizer.grad_scale = factor_for_norm(norm, self.config.grad_clip) if self.config.grad_clip else 1.0
        self.optimizer.step()
        return norm

    def _sharded_update(self):
        """Reduce_scatter the gradient, Allreduce the norm's parts, AdamW on this shard, Allgatherv W."""
        start, stop = self.shard
        optimizer, dtype = self.optimizer, self._dtype()
        mine = np.empty(stop - start, optimizer.grad.dtype)
        self.comm.Reduce_scatter(optimizer.grad, mine, recvcounts=self.counts, op=self.MPI.SUM)   # (N-1)/N 4P bytes
        optimizer.grad[start:stop] = mine
        squares = np.array([np.vdot(mine, mine)], np.float64)
        self.comm.Allreduce(self.MPI.IN_PLACE, squares, op=self.MPI.SUM)                 # 8 bytes
        norm = math.sqrt(squares[0])
        optimizer.grad_scale = factor_for_norm(norm, self.config.grad_clip) if self.config.grad_clip else 1.0
        optimizer.step(span=self.shard)
        self.comm.Allgatherv(self.MPI.IN_PLACE, [optimizer.data, self.counts, self.displacements, dtype])
        return norm

    def gather_state(self):
        """Before rank 0 saves: the moments of every shard to rank 0 (sharded; replicated holds them all)."""
        if self.mode != "sharded":
            return
        start, stop = self.shard
        for moment in self.optimizer.moments.values():
            whole = [moment, self.counts, self.displacements, self._dtype()]
            if self.rank == 0:
                self.comm.Gatherv(self.MPI.IN_PLACE, whole, root=0)                       # (N-1)/N 4P bytes each
            else:
                self.comm.Gatherv(moment[start:stop], None, root=0)

    def _dtype(self):
        return self.MPI.FLOAT if self.optimizer.data.dtype == np.float32 else self.MPI.DOUBLE

    # ---------------------------------------------------------------- the control message, with deadlines
    def _control(self, step, loss):
        """Every rank's [loss share, stop flag] to rank 0, their sums back to every rank; each wait has a deadline."""
        mine, total, tag = np.array([loss, float(self.interrupted)]), np.zeros(2), step % 32768
        if self.rank == 0:
            parts = np.zeros((self.size, 2))
            parts[0] = mine
            heard = {k: self.comm.Irecv(parts[k], source=k, tag=tag) for k in range(1, self.size)}   # 16 bytes each
            self._wait(heard, step, self.deadline(step, waiting_for_root=False))
            total[...] = parts[:, 0].sum(), parts[:, 1].max()
            self._wait({0: self.comm.Ibcast(total, root=0)}, step, self.deadline(step, waiting_for_root=False))
        else:
            sent = self.comm.Isend(mine, dest=0, tag=tag)                                        # 16 bytes
            answer = self.comm.Ibcast(total, root=0)                                             # 16 bytes
            self._wait({0: sent, -1: answer}, step, self.deadline(step, waiting_for_root=True))
        return float(total[0]), bool(total[1])

    def deadline(self, step, waiting_for_root):
        """Seconds a wait of this step may last (see the module docstring)."""
        limit = max(self.config.worker_timeout, STEP_TIMEOUT_FACTOR * self.slowest_step)
        if self.steps == 0:
            limit = max(limit, START_TIMEOUT)
        if waiting_for_root:                   # rank 0 waits for the others first, and may evaluate and save
            evaluated = step % self.config.eval_interval == 0
            limit = 2 * limit + (max(EVAL_TIMEOUT, self.config.worker_timeout) if evaluated else 0.0)
        return limit

    def _wait(self, requests, step, limit):
        """Wait for every request of {rank it waits on: request}, sleeping POLL between looks; past `limit`
        seconds, print one line naming the ranks still silent and abort the job."""
        end = time.monotonic() + limit
        pending = dict(requests)
        while pending:
            pending = {rank: request for rank, request in pending.items() if not request.Test()}
            if pending and time.monotonic() > end:
                silent = " and ".join(f"rank {k} ({self.who[k]})" for k in sorted({max(k, 0) for k in pending}))
                self.abort(f"{silent} did not answer at step {step + 1} within {limit:.3g} s (the larger of "
                           f"--worker-timeout, {self.config.worker_timeout:g} s, and {STEP_TIMEOUT_FACTOR} times the "
                           "slowest step so far); the last checkpoint is intact: continue with --resume")
            if pending:
                time.sleep(POLL)

    def abort(self, message):
        """Print `error: <message>` (one line, flushed before MPI's own) and end every rank of the job."""
        abort(message, self.comm)


def abort(message, comm=None):
    """One `error:` line on stderr, then MPI_Abort: mpiexec ends every rank of the job (stopped ones too)."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    (comm or _comm()).Abort(1)
