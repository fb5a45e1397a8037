"""Data-parallel training: each step's batch split across worker processes that share one set of weights.

The idea is the one behind PyTorch's DistributedDataParallel. The loss of a batch
is the mean over its windows, so cutting the B windows into parts of B_k windows,

    L = sum_k (B_k / B) L_k        and so        dL/dW = sum_k (B_k / B) dL_k/dW.

Each of N processes holds an identical model and runs forward and backward on
its part, starting the backward pass from (B_k / B) dL_k/dlogits into a
gradient buffer of its own. The gradient is one process's up to the order in
which float rounding happens (tests/test_parallel.py: loss to 1e-12 and every
gradient to 1e-9 in float64, with parts of unequal size).

What follows the parts (adding them up, the clipping norm, AdamW) works
element by element, so it is shared out too, as ZeRO's first stage does
(Rajbhandari et al. 2020): process r owns the r-th of N slices of every flat
buffer (`part_slice`; the main process is r = 0), adds the parts' gradients
up on its slice only, contributes its slice's sum of squares to the global
norm, and updates its slice of the weights and of AdamW's moments. On two
cores this halves the ~3 ms a step spent after the parts, during which the
other core used to wait.

    main process (rank 0)                          worker r = 1 .. N-1
    cut x, y into N parts of rows: worker r
    gets part r, the main process the last
    send ("part", step, x, y, B_k / B, ...)  ->    forward and backward of its part into
    forward and backward of the last part          its own gradient buffer
                                             <-    send the part's loss
    send "reduce"                            ->
    on slice 0 of every buffer: its own            the same on slice r
    gradient += the others'; sum of squares  <-    send slice r's sum of squares
    norm = sqrt(sum of all); clip factor
    send ("update", lr, step count, factor)  ->    AdamW on slice r of the weights and
    AdamW on slice 0 of the weights and            moments; zero slice r of the main
    moments (optimizer.step(part=(0, N)));   <-    process's gradient; send "ok", then
    zero slice 0 of its own gradient               zero its own gradient buffer

Every gradient buffer is zero at the end of a step: each process zeroes the
slice of the main process's buffer it summed, and a worker zeroes its own
buffer after its last answer, while the main process is already on to the
next batch. So the next step's backward passes can add into them at once.

`loss_and_gradients` runs the parts alone and leaves the whole gradient in the
main process's .grad (what tests compare); `train_step` is the whole step.

Why processes and not threads. NumPy lets go of the GIL inside each large
operation, but one step makes about 1500 NumPy calls, and two threads hand the
GIL to each other around every one of them. Measured on a 2-core machine,
nanoGPT's CPU configuration (benchmarks/bench_train.py), halves of 6 windows:
one half alone 26.5 ms; two halves on two threads 36 ms; two halves in two
processes 28 ms each.

Shared memory. The optimizer keeps each group's weights, gradient and moments
in flat buffers (optim/optimizer.py); `Optimizer.move_buffers` moves them into
memory the workers map too (multiprocessing.RawArray), and each worker's
parameters and optimizer are views into them (`Optimizer.bind_buffers`), with
a gradient buffer of its own. So the update each process makes in place is
what every process reads at the next step, and no weights are ever sent.
Only the batch parts, the losses, the sums of squares and a few numbers travel
through the pipes (a few kB per step).

A failure during the update (a worker killed, Ctrl-C in the main process's
slice) leaves some slices updated and others not. Such a run cannot go on:
`train_step` then raises `TornUpdate`, and the trainer refuses to take another
step or to save (resume from the last checkpoint).

Threads. Each process does its part with one BLAS thread (threadpoolctl), so N
processes keep N cores busy without fighting over them; the main process's
other work (evaluation, sampling) keeps its usual threads.

Randomness. The main process draws its dropout masks from the model's own
generator, which checkpoints save. Worker k reseeds its model's generator at
every step from (seed, WORKER_SEED_STREAM, step, k), so a resumed run draws the
same masks with nothing more saved. A step's numbers depend on N (another
split rounds differently and draws other masks) but never on timing: the same
seed and the same N give the same numbers, bit for bit.

Workers are started with the "spawn" method: a fresh interpreter that imports
the main script's module and builds its own model from the config. It is the
method macOS and Windows use anyway (this project is tested on Linux only), and
it never copies a parent's BLAS threads;
as with all multiprocessing, a script must keep its top-level code under
`if __name__ == "__main__":` (the CLI, pytest and Jupyter already do).
Ctrl-C reaches the main process only (workers ignore SIGINT).
"""

import math
import multiprocessing
import signal
import traceback
import weakref

import numpy as np

from ..layers.loss import CrossEntropyLoss
from .config import build_model, build_optimizer
from .optim.clipping import factor_for_norm
from .optim.optimizer import part_slice
from .step import check_step_arguments

WORKER_SEED_STREAM = 3          # worker k's dropout masks at a step: default_rng([seed, 3, step, k])
START_TIMEOUT = 300             # seconds a worker may take to import NumPy and build its model


class TornUpdate(RuntimeError):
    """A data-parallel update failed half way: some slices of the weights were updated and others not."""


class DataParallel:
    """Forward and backward of a batch on `config.workers` processes, then a shared clip and AdamW update.

    The main process does one of the N parts itself (the last); workers 1 .. N-1 are spawned processes,
    and `self.processes[r - 1]`, `self.connections[r - 1]` are worker r's; `self.gradients[r]` are
    process r's gradient buffers, one per optimizer group (r = 0: the main process's, the optimizer's own).
    If anything goes wrong during a step (an error in any process, a worker that died, Ctrl-C), the
    workers are stopped before the error is raised, so that no later step can read a stale answer;
    `alive` is then False and the trainer starts fresh workers at its next step, unless the failure
    came during the update (`TornUpdate`).

    Args:
        model: the main process's GPT, already built by `Trainer`.
        optimizer: its flat optimizer (`config.build_optimizer`); its buffers are moved into shared memory.
        config: the TrainConfig (workers = N >= 2; the workers build their model from it).
        vocab_size: V, for the workers' models.
        loss_fn: the main process's CrossEntropyLoss.
    """

    def __init__(self, model, optimizer, config, vocab_size, loss_fn):
        from threadpoolctl import ThreadpoolController

        if config.workers < 2:
            raise ValueError(f"DataParallel: expected workers >= 2, got {config.workers}")
        self.model, self.optimizer, self.config, self.loss_fn = model, optimizer, config, loss_fn
        self.blas = ThreadpoolController()
        self.processes, self.connections = [], []
        self._finalizer = weakref.finalize(self, shut_down, self.processes, self.connections)    # lists filled below
        try:
            self._start(vocab_size)
        except BaseException:
            self.close()
            raise

    def _start(self, vocab_size):
        context = multiprocessing.get_context("spawn")
        behind = {}                                              # id(array) -> the RawArray it views

        def allocate(size, dtype):
            raw, array = _shared_array(context, size, dtype)
            behind[id(array)] = raw
            return array

        self.optimizer.move_buffers(allocate)                    # weights, gradient, moments: now shared memory
        shared = [{name: behind[id(array)] for name, array in group.items()} for group in self.optimizer.buffers()]
        self.gradients = [self.optimizer.gradients()]           # process r's gradient buffers, r = 0 .. N-1
        for _ in range(1, self.config.workers):                  # (a new RawArray is zero)
            self.gradients.append([allocate(grad.size, grad.dtype) for grad in self.gradients[0]])
        gradient_raws = [[behind[id(grad)] for grad in gradients] for gradients in self.gradients]
        self.optimizer.zero_grad()                               # move_buffers copied whatever .grad held
        self._cleared = True                                     # every gradient buffer is zero (see train_step)
        layout = _layout(self.model, self.optimizer)
        for rank in range(1, self.config.workers):
            ours, theirs = context.Pipe()
            process = context.Process(target=_worker, name=f"minitransformer-worker-{rank}", daemon=True,
                                      args=(theirs, rank, self.config, vocab_size, layout, shared, gradient_raws))
            process.start()
            self.processes.append(process)
            self.connections.append(ours)
            theirs.close()                                       # so that a dead worker reads as EOF here
        for rank, connection in enumerate(self.connections, start=1):
            if not connection.poll(START_TIMEOUT):
                raise RuntimeError(f"DataParallel: worker {rank} did not start within {START_TIMEOUT} s")
            self._receive(rank, connection)                      # each worker says it is ready

    @property
    def alive(self):
        return self._finalizer.alive

    def loss_and_gradients(self, x, y, step):
        """Forward and backward of the batch (x, y), split by rows over the processes; no update.

        Worker r < N gets the r-th of N row parts (np.array_split: the larger parts first); the main
        process takes the last, smallest part.

        Args:
            x, y: (B, T) int token ids and targets, B >= workers.
            step: the 0-based step (seeds the workers' dropout masks).
        Returns:
            the batch's mean loss (a float); every parameter's .grad holds dL/dW
            (added to what was there, as a backward pass does).
        """
        try:
            self._cleared = False
            loss = self._parts(x, y, step, fresh=True) + sum(self._answers())
            for gradients in self.gradients[1:]:
                for mine, theirs in zip(self.gradients[0], gradients):
                    mine += theirs
        except BaseException:
            self.close()                 # the pipes may hold answers nobody read: never reuse them
            raise
        return loss

    def train_step(self, x, y, step, lr):
        """One training step: the parts' forward and backward, then the shared sum, clip and update.

        The same step as step.py's `train_step` for a language model, with config.grad_clip (the factor
        folded into the update), its forward and backward passes split over the processes.
        Every gradient buffer is left zero for the next step (see the module docstring): the main
        process's when this returns, a worker's before it reads the next message. After
        `loss_and_gradients`, which leaves them full, the next `train_step` zeroes them first.
        The weights and AdamW's moments are shared, so every process sees the update.

        Args:
            x, y: (B, T) int token ids and targets, B >= workers.
            step: the 0-based step (seeds the workers' dropout masks).
            lr: the learning rate of this step.
        Returns:
            the batch's mean loss (a float).
        Raises:
            TornUpdate if a process failed during the update (the run cannot go on).
        """
        check_step_arguments("DataParallel.train_step", lr, self.config.grad_clip)
        self.optimizer.lr = lr
        updating = False
        try:
            if not self._cleared:
                self.optimizer.zero_grad()
            loss = self._parts(x, y, step, fresh=not self._cleared)
            self._cleared = False
            loss += sum(self._answers())        # every part is done: each slice can be summed
            self._tell_all(("reduce",))
            squares = _reduce_slice(self.gradients, 0) + sum(self._answers())
            factor = factor_for_norm(math.sqrt(squares), self.config.grad_clip) if self.config.grad_clip else 1.0
            updating = True
            self._tell_all(("update", self.optimizer.lr, self.optimizer.step_count + 1, factor))
            self.optimizer.step(grad_scale=factor, part=(0, self.config.workers))
            _clear(self.gradients[0], (0, self.config.workers))  # every process has summed: each zeroes its slice
            self._answers()
            self._cleared = True
        except BaseException as error:
            self.close()
            if updating:
                raise TornUpdate(f"DataParallel: a process failed while the weights were being updated, so some "
                                 f"of them were updated and others not; this run cannot go on. Resume it from its "
                                 f"last checkpoint. The failure: {error!r}") from error
            raise
        return loss

    def _parts(self, x, y, step, fresh):
        """Send the workers their parts and do the last part here; return its loss (the workers' answers,
        their losses, are left to read). fresh: each worker clears its gradient buffer first (else it is
        clear already: `train_step` leaves it so)."""
        if not self.alive:
            raise RuntimeError("DataParallel: the workers were stopped; make a new DataParallel")
        workers, batch = self.config.workers, len(x)
        if batch < workers:
            raise ValueError(f"DataParallel: a batch needs at least one window per worker ({workers}), "
                             f"got {batch} windows")
        xs, ys = np.array_split(x, workers), np.array_split(y, workers)
        shares = [len(part) / batch for part in xs]              # B_r / B
        for rank, connection in enumerate(self.connections, start=1):
            _send(rank, connection, ("part", step, xs[rank - 1], ys[rank - 1], shares[rank - 1], self.model.training,
                                     fresh))
        with self.blas.limit(limits=1, user_api="blas"):     # one core per process
            return _part(self.model, self.loss_fn, xs[-1], ys[-1], shares[-1])

    def _tell_all(self, message):
        for rank, connection in enumerate(self.connections, start=1):
            _send(rank, connection, message)

    def _answers(self):
        """Every worker's answer to the last message, in rank order."""
        return [self._receive(rank, connection) for rank, connection in enumerate(self.connections, start=1)]

    def close(self):
        """Stop the workers (also done when this object is collected or Python exits)."""
        self._finalizer()

    @staticmethod
    def _receive(rank, connection):
        try:
            status, value = connection.recv()
        except (EOFError, OSError):
            raise RuntimeError(_stopped(rank)) from None
        if status == "error":
            raise RuntimeError(f"DataParallel: worker {rank} failed:\n{value}")
        return value


def _send(rank, connection, message):
    try:
        connection.send(message)
    except OSError:
        raise RuntimeError(_stopped(rank)) from None


def _stopped(rank):
    return (f"DataParallel: worker {rank} stopped without answering. Killed, or out of memory? Or, in a script: "
            "its top-level code must be under `if __name__ == \"__main__\":`, because each worker imports it")


def _shared_array(context, size, dtype):
    """(RawArray, ndarray view of it): `size` elements of `dtype` that spawned processes can map too."""
    raw = context.RawArray(np.ctypeslib.as_ctypes_type(dtype), size)
    return raw, np.ctypeslib.as_array(raw)


def _part(model, loss_fn, x, y, share):
    """One part's forward and backward: returns (B_k / B) L_k and adds (B_k / B) dL_k/dW into .grad."""
    loss = share * float(loss_fn(model(x), y))
    model.backward(share * loss_fn.backward())
    return loss


def _reduce_slice(gradients, rank):
    """Process `rank`'s share of the gradient sum: on its slice of each group's buffer, its own gradient
    += every other process's; returns that slice's sum of squares (its part of the squared global norm).

    Args:
        gradients: gradients[r][g] is process r's flat gradient buffer of optimizer group g.
        rank: this process.
    """
    squares = 0.0
    for group, own in enumerate(gradients[rank]):
        span = part_slice(own.size, (rank, len(gradients)))
        mine = own[span]
        for other, buffers in enumerate(gradients):
            if other != rank:
                mine += buffers[group][span]
        squares += float(np.vdot(mine, mine))
    return squares


def _clear(buffers, part=None):
    """Zero each of `buffers` (one process's gradient buffers, one per group), or only its slice `part` = (k, n)."""
    for buffer in buffers:
        buffer[part_slice(buffer.size, part)] = 0


def _layout(model, optimizer):
    """What a worker's model and optimizer must share with the main process's: the optimizer's type and
    constants (betas, eps, momentum: its float attributes but the learning rate, which each step sends),
    and per group its weight decay and the (name, shape) of each parameter, in the flat buffers' order."""
    names = {id(param): name for name, param in model.named_parameters()}
    constants = sorted((key, value) for key, value in vars(optimizer).items()
                       if isinstance(value, float) and key != "lr")
    return (type(optimizer).__name__, constants,
            [(group["weight_decay"], [(names[id(param)], param.shape) for param in group["params"]])
             for group in optimizer.groups])


def shut_down(processes, connections):
    """Ask each process to stop (None down its pipe), wait for it (terminate it after 10 s), close the pipes."""
    for connection in connections:
        try:
            connection.send(None)
        except OSError:
            pass
    for process in processes:
        process.join(timeout=10)
        if process.is_alive():
            process.terminate()
            process.join()
    for connection in connections:
        connection.close()


def _worker(connection, rank, config, vocab_size, layout, shared, gradient_raws):
    """A worker process: build the model, map the shared buffers, then serve messages until told to stop.

    Messages: ("part", step, x, y, share, training, fresh) -> its part's loss; ("reduce",) -> its slice's sum
    of squares; ("update", lr, step_count, factor) -> its slice updated. It stops quietly when the main
    process is gone (its pipe closed or reset)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)                 # Ctrl-C is for the main process to handle
    try:
        model, loss_fn, optimizer, gradients = _worker_model(rank, config, vocab_size, layout, shared, gradient_raws)
        answer = ("ready", 0.0)
    except Exception:
        model, answer = None, ("error", traceback.format_exc())
    try:
        connection.send(answer)
        while model is not None:
            message = connection.recv()
            if message is None:
                return
            try:
                answer = ("ok", _serve(message, rank, config, model, loss_fn, optimizer, gradients))
            except Exception:
                answer = ("error", traceback.format_exc())
            connection.send(answer)
            if message[0] == "update":               # every process has summed our gradient: zero it now,
                _clear(gradients[rank])               # while the main process goes on to the next step
    except (EOFError, OSError):                                  # the main process is gone
        return


def _serve(message, rank, config, model, loss_fn, optimizer, gradients):
    """Carry out one message from the main process (see `_worker`); return the answer's value."""
    kind = message[0]
    if kind == "part":
        _, step, x, y, share, training, fresh = message
        model.train(training)
        if config.dropout:
            seeded = np.random.default_rng([config.seed, WORKER_SEED_STREAM, step, rank])
            model.dropout_rng.bit_generator.state = seeded.bit_generator.state
        if fresh:
            _clear(gradients[rank])
        return _part(model, loss_fn, x, y, share)
    if kind == "reduce":
        return _reduce_slice(gradients, rank)
    if kind == "update":
        _, optimizer.lr, step_count, factor = message
        optimizer.step_count = step_count - 1                    # step() counts it
        optimizer.step(grad_scale=factor, part=(rank, len(gradients)))
        _clear(gradients[0], (rank, len(gradients)))             # our slice of the main process's gradient
        return None
    raise ValueError(f"DataParallel worker {rank}: unknown message {kind!r}")


def _worker_model(rank, config, vocab_size, layout, shared, gradient_raws):
    """The worker's model and optimizer, bound to the shared weights and moments and to its own gradient."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
    model = build_model(config, vocab_size)
    optimizer = build_optimizer(model, config)
    mine = _layout(model, optimizer)
    if mine != layout:
        raise ValueError(f"DataParallel worker {rank}: its model and optimizer {mine} are not laid out as the "
                         f"main process's {layout}")
    gradients = [[np.ctypeslib.as_array(raw) for raw in raws] for raws in gradient_raws]
    optimizer.bind_buffers([{**{name: np.ctypeslib.as_array(raw) for name, raw in group.items()}, "grad": own}
                            for group, own in zip(shared, gradients[rank])])
    return model, CrossEntropyLoss(), optimizer, gradients
