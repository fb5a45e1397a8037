"""Data parallelism on MPI: every rank holds the model and trains on its share of each batch; collectives add up.

The hook. `train_step(objective, optimizer, batch, lr, grad_clip, parallel)` (step.py) hands a `DataParallel`
the phase around the update: this rank's rows of the batch and their share (`rows_and_share`), then, after its
forward and backward passes, the reduction, the clipping and the update (`reduce_clip_update`), replicated or
sharded. Every objective trains so (step.py lists them).

Launched as every MPI program is: `mpiexec -n 2 python -m minitransformer train ...` on one machine (or with a
host file on several; the run directory must then be on a file system every machine sees, since a resumed
run reads its checkpoint on every rank). `train --workers N` runs that command for you. mpi4py (the
`[mpi]` extra: `pip install "minitransformer[mpi]"`) speaks the message-passing standard's collectives
over NumPy buffers; the words below are the standard's, and PyTorch's DDP and ZeRO notes use the same.

The arithmetic. A batch's loss is the mean over its N counted targets (B windows of T tokens for the
language model; the unpadded targets of the encoder-decoder; BERT's masked positions), so with rank k taking
rows holding N_k of them,

    L = sum_k (N_k / N) L_k        and so        dL/dW = sum_k (N_k / N) dL_k/dW.

Each rank starts its backward pass from (N_k / N) dL_k/dlogits, so the sum of the ranks' gradients is the
batch's gradient exactly, also for shares of unequal size (np.array_split: B = 12 on 5 ranks is 3 3 2 2 2).
Every rank holds the whole batch, so N_k / N needs no message: the objective's `row_weights(batch)` counts
each row's targets (rows count alike when it has none).

Rank 0 takes the last share, the smallest, since it also evaluates, prints and writes checkpoints.

Every rank draws the same batch (the same generator from the same seed) and keeps its own rows. Below, P is
the number of weights (0.81 M in nanoGPT's CPU configuration), 4 bytes each in float32, N the number of
ranks; a "ring" all-reduce sends and receives 2 (N - 1) / N of the buffer per rank, a reduce-scatter or an
all-gather (N - 1) / N of it (MPICH picks the algorithm; these are the bandwidth-optimal ones).

One step, replicated (PyTorch's DistributedDataParallel: the gradient all-reduced, every rank updates all):

    forward and backward of this rank's share: (N_k / N) dL_k/dW into the flat gradient buffer
    Iallreduce([share of the loss, stop flag, rank 0's pause], SUM)            # 24 bytes
    Iallreduce(gradient, SUM)                                                   # 4P: 2 (N-1)/N 4P bytes per rank
    clip with the norm of the whole gradient; AdamW on all of W (the same on every rank, bit for bit)

One step, sharded (ZeRO stage 1, Rajbhandari et al. 2020; PyTorch's ZeroRedundancyOptimizer; FSDP's
SHARD_GRAD_OP reduce-scatters the gradient the same way, and frees the rest of it, which is kept here):

    forward and backward of this rank's share, as above
    Iallreduce([share of the loss, stop flag, rank 0's pause], SUM)            # 24 bytes
    Ireduce_scatter(gradient, SUM): rank k receives the sum of its shard        # (N-1)/N 4P bytes per rank
    Iallreduce([sum of squares of shard k], SUM): the clipping norm             # 8 bytes
    AdamW on shard k of W and of the moments (the fast Adam(W)'s step(span=))
    Iallgatherv(shard k of W -> all of W)                                       # (N-1)/N 4P bytes per rank
    before a checkpoint: Igatherv(shard k of m, then of v -> rank 0)            # (N-1)/N 4P bytes each, to rank 0

Both move 2 (N - 1) / N 4P bytes per rank and step (3.2 MB each way for nanoGPT's model on 2 ranks); the
sharded one updates P / N weights per rank instead of P, and keeps the moments of its shard alone (ZeRO's
memory saving: 2 * 4P / N bytes of Adam's state per rank instead of 2 * 4P, 3.2 MB instead of 6.5 MB for
nanoGPT's model on 2 ranks; `optimizer.keep_moments`, optim/fast.py). Rank 0 holds the whole moments only
while it writes a checkpoint (gathered to it just before); a resumed run reads the checkpoint on every rank,
and each keeps its shard's part of the moments (the scatter of the load costs no message, since every rank
has read the whole file).
benchmarks/README.md has the measured step times and the alpha-beta model for 4 to 64 machines.

The first message comes before the large ones. It carries the loss, and the stop flag: Ctrl-C under mpiexec
reaches every rank (mpiexec forwards it); on each, the loop's handler only raises a flag
(`stop_at_step_boundary`), which the next step's all-reduce adds up, so every rank learns at the same step
that one was interrupted, finishes that step's update and stops; rank 0 saves there (training/harness.py). And
it carries rank 0's longest pause to evaluate and save, which the other ranks' deadline allows for.

Evaluation is shared too, when the run's `evaluate` knows how (Trainer's: each rank the losses of its
`shares` of the evaluation windows, `add_up` to all): rank 0 then evaluates 1/N of them, and the others
work instead of waiting; the losses, and their mean, are one process's, bit for bit.

Deadlines: every message is sent non-blocking and waited for with a limit (training/deadlines.py), so a
rank that stops or dies ends the job with one line naming it.

Randomness: rank 0's dropout masks come from the model's generator (checkpoints save it); rank k > 0 seeds
its generator at each step from (seed, DROPOUT_STREAM, step, k), so a resumed run draws the same masks with
nothing more saved. The same seed and the same N give the same numbers bit for bit; another N splits the
batch otherwise, so the sums round otherwise (and with dropout the masks differ).

Left out: overlapping the all-reduce with the backward pass (DDP's buckets), gradient accumulation, sharding
the weights themselves (ZeRO-3, FSDP's FULL_SHARD), a rank joining or leaving a running job.
"""

import math
import os
import sys
import time

import numpy as np

from .deadlines import Deadlines, abort
from .optim.clipping import factor_for_norm
from .phases import laps

DROPOUT_STREAM = 3          # rank k's dropout masks at a step: default_rng([seed, 3, step, k])
MODES = ("replicated", "sharded")
if sys.platform == "win32":         # MPICH has no Windows build: Microsoft's MPI, installed apart, with mpi4py
    INSTALL = ('install Microsoft MPI (its runtime, msmpisetup.exe, from Microsoft; it puts mpiexec on PATH) and '
               'pip install "minitransformer[mpi]" (mpi4py)')
else:
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
    """The data-parallel hook of `train_step` on MPI ranks (see the module docstring).

    Args:
        mode: "replicated" (DDP: all-reduce, every rank updates all) or "sharded" (ZeRO-1: reduce-scatter,
            each rank updates its shard, all-gather).
        seed: the run's seed (rank k > 0 draws its dropout masks from (seed, DROPOUT_STREAM, step, k)).
        worker_timeout, eval_interval: the deadlines' (training/deadlines.py; eval_interval None: every step).
    No defaults: the run's options hold them (TrainConfig's, or a command's `--parallel`, `--seed`, ...).
    The optimizer is attached by the training loop (`attach`): one with flat buffers (optim/fast.py), whose
    `grad` and `data` are the collectives' buffers.
    """

    def __init__(self, mode, seed, worker_timeout, eval_interval):
        from mpi4py import MPI

        if mode not in MODES:
            raise ValueError(f"DataParallel expected mode 'replicated' or 'sharded', got {mode!r}")
        self.MPI, self.comm, self.mode, self.seed = MPI, MPI.COMM_WORLD, mode, seed
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.deadlines = Deadlines(self.comm, worker_timeout, eval_interval)
        self.step, self.started = 0, None
        self.interrupted = False        # this rank's Ctrl-C, set by the loop; sent in the step's first message
        self.stop_requested = False     # some rank was interrupted: every rank stops after this step
        self.norm = math.nan            # the last step's gradient norm, from every rank's part

    def attach(self, optimizer):
        """Split `optimizer`'s flat buffer into the ranks' shards (sharded: each keeps the moments of its own
        and updates it alone)."""
        if not hasattr(optimizer, "data"):
            raise TypeError(f"DataParallel needs an optimizer over one flat buffer (optim/fast.py's FastAdam or "
                            f"FastAdamW), got {type(optimizer).__name__}")
        size = optimizer.data.size
        self.counts = [size * (k + 1) // self.size - size * k // self.size for k in range(self.size)]
        self.displacements = [size * k // self.size for k in range(self.size)]
        self.shard = (self.displacements[self.rank], self.displacements[self.rank] + self.counts[self.rank])
        self.optimizer = optimizer
        if self.mode == "sharded":                     # ZeRO-1: this rank keeps its shard's moments alone
            optimizer.keep_moments(*self.shard)

    # ---------------------------------------------------------------- the hook's two halves
    def prepare(self, model, step):
        """Before step `step` (0-based): rank k > 0 draws its dropout masks from (seed, DROPOUT_STREAM, step, k)."""
        self.step, self.started = step, time.perf_counter()
        generator = getattr(model, "dropout_rng", None)
        if self.rank > 0 and generator is not None:
            seeded = np.random.default_rng([self.seed, DROPOUT_STREAM, step, self.rank])
            generator.bit_generator.state = seeded.bit_generator.state

    def rows_and_share(self, objective, batch):
        """(this rank's rows of every array of `batch`, their share N_k / N of the batch's counted targets)."""
        first = next(item for item in batch if isinstance(item, np.ndarray))
        if not 1 <= self.size <= len(first):
            raise ValueError(f"DataParallel: {self.size} ranks for a batch of {len(first)} rows; each rank needs at "
                             "least one (mpiexec -n at most the batch size)")
        rows = shares(len(first), self.size)[self.rank]
        weights = getattr(objective, "row_weights", lambda *batch: None)(*batch)         # (B,) or None
        share = ((rows.stop - rows.start) / len(first) if weights is None
                 else float(np.sum(weights[rows])) / float(np.sum(weights)))
        mine = tuple(item[rows] if isinstance(item, np.ndarray) and len(item) == len(first) else item
                     for item in batch)
        return mine, share

    def reduce_clip_update(self, loss, grad_clip):
        """After this rank's backward pass of its share: add the ranks' losses and gradients up, clip with the
        norm of the whole gradient, update; returns the batch's loss (the same on every rank)."""
        control = np.array([loss, float(self.interrupted), self.deadlines.root_pause if self.rank == 0 else 0.0])
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, control, op=self.MPI.SUM),         # 24 bytes
                   "the step's first message (the loss and the stop flag)", after_evaluation=True)
        self.deadlines.root_pause, self.stop_requested = control[2], bool(control[1])
        laps.lap("control")
        self.norm = self._sharded_update(grad_clip) if self.mode == "sharded" else self._replicated_update(grad_clip)
        self.deadlines.step_took(time.perf_counter() - self.started)
        return float(control[0])

    def _replicated_update(self, grad_clip):
        """Allreduce the gradient; every rank clips and updates all of W."""
        grad = self.optimizer.grad
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, grad, op=self.MPI.SUM),            # 4P bytes, summed
                   "the gradient's all-reduce")
        laps.lap("gradient")
        norm = math.sqrt(float(np.vdot(grad, grad)))
        self.optimizer.grad_scale = factor_for_norm(norm, grad_clip) if grad_clip else 1.0
        laps.lap("clip")
        self.optimizer.step()
        laps.lap("optimizer")
        return norm

    def _sharded_update(self, grad_clip):
        """Reduce_scatter the gradient, Allreduce the norm's parts, update this shard, Allgatherv W.

        The optimizer keeps this shard's moments only (`attach`), so its `step(span=)` updates the shard."""
        (start, stop), optimizer = self.shard, self.optimizer
        mine = np.empty(stop - start, optimizer.grad.dtype)
        self._wait(self.comm.Ireduce_scatter(optimizer.grad, mine, self.counts, op=self.MPI.SUM),   # (N-1)/N 4P
                   "the gradient's reduce-scatter")
        optimizer.grad[start:stop] = mine
        squares = np.array([np.vdot(mine, mine)], np.float64)
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, squares, op=self.MPI.SUM),         # 8 bytes
                   "the all-reduce of the norm")
        laps.lap("gradient")
        norm = math.sqrt(squares[0])
        optimizer.grad_scale = factor_for_norm(norm, grad_clip) if grad_clip else 1.0
        laps.lap("clip")
        optimizer.step(span=self.shard)
        laps.lap("optimizer")
        whole = [optimizer.data, self.counts, self.displacements, self._dtype()]
        self._wait(self.comm.Iallgatherv(self.MPI.IN_PLACE, whole), "the weights' all-gather")   # (N-1)/N 4P
        laps.lap("all-gather")
        return norm

    def add_up(self, losses, what="the evaluation's losses"):
        """Every rank's part of a list of losses, to every rank: each rank holds its own at its places and zeros
        elsewhere (`shares` of the list); the all-reduce adds them, x + 0 = x exactly, so every rank ends with
        the very list one process computes (float64 (n,))."""
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, losses, op=self.MPI.SUM), what)     # 8 n bytes
        return losses

    # ---------------------------------------------------------------- checkpoints, failures
    def gather_state(self):
        """Before rank 0 saves: the moments of every shard to rank 0 (sharded; replicated holds them all).

        Rank 0 receives them into whole arrays, `optimizer.gathered`, which its next `state_dict()` saves
        and releases: it holds all of the moments only while a checkpoint is written."""
        if self.mode != "sharded":
            return
        optimizer = self.optimizer
        gathered = {name: np.empty_like(optimizer.data) for name in optimizer.moments} if self.rank == 0 else {}
        for name, moment in optimizer.moments.items():
            whole = [gathered[name], self.counts, self.displacements, self._dtype()] if self.rank == 0 else None
            self._wait(self.comm.Igatherv(moment, whole, root=0),                              # (N-1)/N 4P bytes
                       "the gather of the moments")
        optimizer.gathered = gathered if self.rank == 0 else None

    @property
    def root_pause(self):
        return self.deadlines.root_pause

    @root_pause.setter
    def root_pause(self, seconds):
        self.deadlines.root_pause = seconds

    def abort(self, message):
        """Print `error: <message>` (one line, flushed before MPI's own) and end every rank of the job."""
        abort(message, self.comm)

    def _wait(self, request, what, after_evaluation=False):
        self.deadlines.wait(request, self.step, what, after_evaluation)

    def _dtype(self):
        return self.MPI.FLOAT if self.optimizer.data.dtype == np.float32 else self.MPI.DOUBLE
