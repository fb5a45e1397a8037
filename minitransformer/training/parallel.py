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

Deadlines. A worker that stops answering (stopped with SIGSTOP or Ctrl-Z, stuck in
a debugger, swapped out) must not make the run wait forever, and a busy shared
machine must never make a healthy run fail. So each wait for workers has a limit
of its own, and on passing it every worker is killed (SIGKILL: SIGTERM does not
end a stopped process) and reaped, and `WorkerTimeout` names the silent worker
(rank, pid, its state in /proc), the step, what it did not answer and how long
the main process waited. The run then resumes from its last checkpoint.
- A step's answers (its parts' losses, sums of squares, updates): the larger of
  config.worker_timeout (60 s by default) and STEP_TIMEOUT_FACTOR = 20 times the
  slowest step so far, counted from when the main process starts to wait (so
  its own part does not count against the workers).
- Start-up (spawn, import NumPy, build the model, map the shared buffers): the
  larger of START_TIMEOUT = 300 s and config.worker_timeout.
- Evaluation and sampling run in the main process alone: nothing waits on a worker
  then, and their time never counts towards a step's deadline.
- Stopping (`shut_down`): STOP_PATIENCE = 10 s, then SIGKILL.
Sending never blocks either: a worker reads every message before it answers it,
so the pipe is empty whenever a step begins, and a part that the pipe surely
holds (a quarter of its buffer, 53 kB on Linux) is written at once; a larger one
is written by a thread, whose wait counts towards the step's deadline.

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
import socket
import threading
import time
import traceback
import weakref

import numpy as np

from ..layers.loss import CrossEntropyLoss
from .config import build_model, build_optimizer
from .optim.clipping import factor_for_norm
from .optim.optimizer import part_slice
from .step import check_step_arguments

WORKER_SEED_STREAM = 3          # worker k's dropout masks at a step: default_rng([seed, 3, step, k])
START_TIMEOUT = 300             # seconds the workers may take to start (or config.worker_timeout, if longer)
STEP_TIMEOUT_FACTOR = 20        # a step may wait for answers this many times its slowest so far (if > worker_timeout)
STOP_PATIENCE = 10              # seconds the workers may take to stop when told to, before they are killed


class TornUpdate(RuntimeError):
    """A data-parallel update failed half way: some slices of the weights were updated and others not."""


class WorkerTimeout(RuntimeError):
    """A data-parallel worker did not answer within its deadline; every worker has been killed and reaped."""


def check_worker_timeout(value, name="TrainConfig.worker_timeout"):
    """`value` as a float if it is a finite number of seconds > 0; else ValueError naming `name`."""
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not number or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


class DataParallel:
    """Forward and backward of a batch on `config.workers` processes, then a shared clip and AdamW update.

    The main process does one of the N parts itself (the last); workers 1 .. N-1 are spawned processes,
    and `self.processes[r - 1]`, `self.connections[r - 1]` are worker r's; `self.gradients[r]` are
    process r's gradient buffers, one per optimizer group (r = 0: the main process's, the optimizer's own).
    If anything goes wrong during a step (an error in any process, a worker that died, Ctrl-C), the
    workers are stopped before the error is raised, so that no later step can read a stale answer;
    `alive` is then False and the trainer starts fresh workers at its next step, unless the failure
    came during the update (`TornUpdate`). A worker that does not answer within the deadline
    (`step_deadline`; see "Deadlines" in the module docstring) makes the step raise `WorkerTimeout`
    after every worker has been killed.

    Args:
        model: the main process's GPT, already built by `Trainer`.
        optimizer: its flat optimizer (`config.build_optimizer`); its buffers are moved into shared memory.
        config: the TrainConfig (workers = N >= 2; the workers build their model from it;
            worker_timeout > 0 seconds).
        vocab_size: V, for the workers' models.
        loss_fn: the main process's CrossEntropyLoss.
    """

    def __init__(self, model, optimizer, config, vocab_size, loss_fn):
        from threadpoolctl import ThreadpoolController

        if config.workers < 2:
            raise ValueError(f"DataParallel: expected workers >= 2, got {config.workers}")
        check_worker_timeout(config.worker_timeout)
        self.model, self.optimizer, self.config, self.loss_fn = model, optimizer, config, loss_fn
        self.blas = ThreadpoolController()
        self.slowest_step = 0.0          # seconds: the longest train_step or loss_and_gradients so far
        # worker r's process and pipe; busy[r - 1]: a message sent to it is not answered yet; senders: the
        # thread writing a step's large parts, if one is (all filled below, and read by `shut_down`)
        self.processes, self.connections, self.busy, self.senders = [], [], [], []
        self._finalizer = weakref.finalize(self, shut_down, self.processes, self.connections, self.busy, self.senders)
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
            self.busy.append(False)
            theirs.close()                                       # so that a dead worker reads as EOF here
        self._direct_bytes = min(_pipe_holds(connection) for connection in self.connections)
        limit = max(START_TIMEOUT, self.config.worker_timeout)
        self._await_answers(None, "say that it had started (spawned, imported NumPy, built its model)", limit,
                            f"the start-up limit: the larger of START_TIMEOUT, {START_TIMEOUT} s, and "
                            f"TrainConfig.worker_timeout, {self.config.worker_timeout:g} s")  # each says it is ready

    @property
    def alive(self):
        return self._finalizer.alive

    def step_deadline(self):
        """Seconds a step waits for the workers' answers to one message before it gives up on them: the larger
        of config.worker_timeout and STEP_TIMEOUT_FACTOR times the slowest step so far (`slowest_step`)."""
        return max(self.config.worker_timeout, STEP_TIMEOUT_FACTOR * self.slowest_step)

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
        Raises:
            WorkerTimeout if a worker did not answer within `step_deadline()` (the workers are then killed).
        """
        started = time.perf_counter()
        try:
            self._cleared = False
            loss = self._parts(x, y, step, fresh=True) + sum(self._answers(step, "send its part's loss"))
            for gradients in self.gradients[1:]:
                for mine, theirs in zip(self.gradients[0], gradients):
                    mine += theirs
        except BaseException:
            self.close()                 # the pipes may hold answers nobody read: never reuse them
            raise
        self.slowest_step = max(self.slowest_step, time.perf_counter() - started)
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
            TornUpdate if a process failed during the update (the run cannot go on);
            WorkerTimeout if a worker did not answer within `step_deadline()` before the update
            (the workers are then killed; during the update it is the cause of a TornUpdate).
        """
        check_step_arguments("DataParallel.train_step", lr, self.config.grad_clip)
        started = time.perf_counter()
        self.optimizer.lr = lr
        updating = False
        try:
            if not self._cleared:
                self.optimizer.zero_grad()
            loss = self._parts(x, y, step, fresh=not self._cleared)
            self._cleared = False
            loss += sum(self._answers(step, "send its part's loss"))   # every part is done: each slice can be summed
            self._tell_all(("reduce",))
            squares = _reduce_slice(self.gradients, 0) + sum(self._answers(step, "send its slice's sum of squares"))
            factor = factor_for_norm(math.sqrt(squares), self.config.grad_clip) if self.config.grad_clip else 1.0
            updating = True
            self._tell_all(("update", self.optimizer.lr, self.optimizer.step_count + 1, factor))
            self.optimizer.step(grad_scale=factor, part=(0, self.config.workers))
            _clear(self.gradients[0], (0, self.config.workers))  # every process has summed: each zeroes its slice
            self._answers(step, "confirm its slice's update")
            self._cleared = True
        except BaseException as error:
            self.close()
            if updating:
                raise TornUpdate(f"DataParallel: a process failed while the weights were being updated, so some "
                                 f"of them were updated and others not; this run cannot go on. Resume it from its "
                                 f"last checkpoint. The failure: {error!r}") from error
            raise
        self.slowest_step = max(self.slowest_step, time.perf_counter() - started)
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
        self._post([("part", step, xs[rank], ys[rank], shares[rank], self.model.training, fresh)
                    for rank in range(workers - 1)])
        with self.blas.limit(limits=1, user_api="blas"):     # one core per process
            return _part(self.model, self.loss_fn, xs[-1], ys[-1], shares[-1])

    def _post(self, messages):
        """Send messages[r - 1] to worker r, for r = 1 .. N-1, without ever blocking on a worker that does not
        read: its pipe is empty (it read every earlier message before answering it), so a message the pipe
        surely holds is written at once; larger ones are written by a thread (`_Sender`), which `_answers`
        waits for within the step's deadline."""
        parcels = [(rank, connection, _pickled(message))
                   for (rank, connection), message in zip(enumerate(self.connections, start=1), messages)]
        for rank, _, _ in parcels:
            self.busy[rank - 1] = True
        if max(data.nbytes for _, _, data in parcels) <= self._direct_bytes:
            for rank, connection, data in parcels:
                _send(rank, connection, data)
        else:
            sender = _Sender(parcels)
            self.senders.append(sender)
            sender.start()

    def _tell_all(self, message):
        for rank, connection in enumerate(self.connections, start=1):
            self.busy[rank - 1] = True
            _send(rank, connection, _pickled(message))    # a few bytes into an empty pipe: never blocks

    def _answers(self, step, awaited):
        """Every worker's answer to the last message, in rank order, each within the step's deadline.

        Args:
            step: the 0-based step (for the error message).
            awaited: what the answer is, for the error message ("send its part's loss").
        """
        return self._await_answers(step, awaited, self.step_deadline(),
                                   f"the step deadline: the larger of TrainConfig.worker_timeout, "
                                   f"{self.config.worker_timeout:g} s, and {STEP_TIMEOUT_FACTOR} times the "
                                   f"slowest step so far, {self.slowest_step:.2g} s")

    def _await_answers(self, step, awaited, limit, rule):
        """Every worker's answer, in rank order, all within `limit` seconds from now (the thread writing the
        parts, if there is one, first); if they do not come, kill the workers and raise `WorkerTimeout`,
        which says the `rule` that set the limit."""
        started = time.monotonic()
        end = started + limit
        while self.senders:
            sender = self.senders[0]
            sender.join(max(0.0, end - time.monotonic()))
            if sender.is_alive():
                self._time_out([sender.rank], step, "read its part of the batch", started, limit, rule)
            self.senders.remove(sender)
            if sender.failed:
                raise RuntimeError(_stopped(sender.rank))
        answers = []
        for rank, connection in enumerate(self.connections, start=1):
            if not connection.poll(max(0.0, end - time.monotonic())):       # EOF (a dead worker) counts as ready
                silent = [later for later in range(rank, len(self.connections) + 1)
                          if later == rank or not self.connections[later - 1].poll()]
                self._time_out(silent, step, awaited, started, limit, rule)
            answers.append(self._receive(rank, connection))
        return answers

    def _time_out(self, ranks, step, awaited, started, limit, rule):
        """Kill and reap every worker, then raise WorkerTimeout naming the silent ones (`ranks`)."""
        waited = time.monotonic() - started
        silent = " and ".join(self._describe(rank) for rank in ranks)     # their state before the kill
        for process in self.processes:
            process.kill()                                  # SIGKILL: SIGTERM does not end a stopped process
        self.close()                                        # reaps them
        at_step = "" if step is None else f" at step {step + 1}"
        raise WorkerTimeout(f"DataParallel: {silent} did not {awaited}{at_step} within {limit:.3g} s (waited "
                            f"{waited:.1f} s; {rule}). Every worker has been killed. The run can resume from its "
                            f"last checkpoint; if this machine is only very busy, raise TrainConfig.worker_timeout "
                            f"(train --worker-timeout)")

    def _describe(self, rank):
        """'worker 1 (pid 4242, stopped by a signal, e.g. SIGSTOP or Ctrl-Z)'."""
        pid = self.processes[rank - 1].pid
        state = _process_state(pid)
        return f"worker {rank} (pid {pid}{', ' + state if state else ''})"

    def close(self):
        """Stop the workers (also done when this object is collected or Python exits)."""
        self._finalizer()

    def _receive(self, rank, connection):
        try:
            status, value = connection.recv()
        except (EOFError, OSError):
            raise RuntimeError(_stopped(rank)) from None
        self.busy[rank - 1] = False
        if status == "error":
            raise RuntimeError(f"DataParallel: worker {rank} failed:\n{value}")
        return value


class _Sender(threading.Thread):
    """Writes each (rank, connection, pickled message) of `parcels` in turn, off the main thread (see
    `DataParallel._post`). `rank` is the worker it is writing to (None when done); `failed`: that worker's
    pipe was closed (the worker died)."""

    def __init__(self, parcels):
        super().__init__(name="minitransformer-sender", daemon=True)
        self.parcels, self.rank, self.failed = parcels, None, False

    def run(self):
        try:
            for rank, connection, data in self.parcels:
                self.rank = rank
                connection.send_bytes(data)
            self.rank = None
        except OSError:
            self.failed = True


def _pickled(message):
    """`message` as `Connection.send` would write it (so `recv` reads it back the same)."""
    from multiprocessing.reduction import ForkingPickler

    return ForkingPickler.dumps(message)


def _send(rank, connection, data):
    try:
        connection.send_bytes(data)
    except OSError:
        raise RuntimeError(_stopped(rank)) from None


def _pipe_holds(connection):
    """Bytes that a write into `connection`'s empty pipe surely takes at once, read or not: a quarter of its
    socket's send buffer (Linux: 212,992 / 4), or 0 where that cannot be asked (then a thread writes every part)."""
    try:
        with socket.fromfd(connection.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as duplicate:
            return duplicate.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 4
    except (OSError, ValueError, AttributeError):       # e.g. Windows: a pipe, not a socket; no AF_UNIX
        return 0


_STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible sleep (disk or memory)",
           "T": "stopped by a signal, e.g. SIGSTOP or Ctrl-Z", "t": "stopped by a debugger",
           "Z": "exited, not yet reaped"}


def _process_state(pid):
    """What Linux's /proc says process `pid` is doing ("sleeping", "stopped by a signal ..."), or None."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            code = file.read().rpartition(")")[2].split()[0]   # after "pid (name)": the name may hold spaces
    except (OSError, IndexError):
        return None
    return _STATES.get(code, f"state {code}")


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


def shut_down(processes, connections, busy=None, senders=()):
    """Stop the worker processes and reap them, within about STOP_PATIENCE seconds whatever they do.

    Each idle worker (`busy[r - 1]` false: it answered every message, so its pipe is empty and the send
    cannot block) is told to stop: None down its pipe. A busy one stops when it finds its pipe closed. A
    thread still writing a part (`senders`) after STOP_PATIENCE s means a worker that does not read: every
    worker is then killed, which ends the write. Once no thread writes, the pipes are closed; a worker
    still alive STOP_PATIENCE s after the start is killed (SIGKILL: SIGTERM does not end a stopped process).

    Args:
        processes, connections: worker r's process and the main process's end of its pipe, r = 1 .. N-1.
        busy: busy[r - 1] is True if worker r has a message not answered yet (None: none has).
        senders: `_Sender` threads that may still be writing to the pipes.
    """
    end = time.monotonic() + STOP_PATIENCE
    for index, connection in enumerate(connections):
        if busy is None or not busy[index]:
            try:
                connection.send(None)
            except OSError:
                pass
    for sender in senders:
        sender.join(max(0.0, end - time.monotonic()))
        if sender.is_alive():
            for process in processes:
                process.kill()
            sender.join(STOP_PATIENCE)          # the write fails at once once its reader is gone
    for connection in connections:
        connection.close()
    for process in processes:
        process.join(max(0.0, end - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(STOP_PATIENCE)         # a process in uninterruptible sleep may take a moment


def _worker(connection, rank, config, vocab_size, layout, shared, gradient_raws):
    """A worker process: build the model, map the shared buffers, then serve messages until told to stop.

    Messages: ("part", step, x, y, share, training, fresh) -> its part's loss; ("reduce",) -> its slice's sum
    of squares; ("update", lr, step_count, factor) -> its slice updated; None -> stop. It also stops quietly
    when the main process is gone or has closed its end of the pipe (`shut_down`)."""
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
