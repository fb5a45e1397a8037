"""Data-parallel training: each step's batch split across worker processes that share one set of weights.

The idea is the one behind PyTorch's DistributedDataParallel. The loss of a batch
is the mean over its windows, so cutting the B windows into parts of B_k windows,

    L = sum_k (B_k / B) L_k        and so        dL/dW = sum_k (B_k / B) dL_k/dW.

Each of N processes holds an identical model and runs forward and backward on
its part, starting the backward pass from (B_k / B) dL_k/dlogits; the main
process adds the parts' gradients up, and the trainer clips and steps exactly
as it does with one process. The gradient is one process's up to the order in
which float rounding happens (tests/test_parallel.py: loss to 1e-12 and every
gradient to 1e-9 in float64, with parts of unequal size).

    main process                                     worker k = 1 .. N-1
    split x, y into N parts of rows
    send (step, x_k, y_k, B_k / B)           ->      forward on x_k, y_k; backward from
    forward on the last part x_N, y_N;               (B_k / B) dL_k/dlogits into its own
    backward from (B_N / B) dL_N/dlogits             gradient buffer (shared memory)
    wait for every worker's loss             <-      send the loss (or the error's traceback)
    .grad += worker k's gradient, k = 1 .. N-1
    (the trainer clips; AdamW updates the shared weights in place)

Why processes and not threads. NumPy lets go of the GIL inside each large
operation, but one step makes about 1500 NumPy calls, and two threads hand the
GIL to each other around every one of them. Measured on a 2-core machine,
nanoGPT's CPU configuration (benchmarks/bench_train.py), halves of 6 windows:
one half alone 26.5 ms; two halves on two threads 36 ms; two halves in two
processes 28 ms each.

Shared memory. The optimizer keeps each group's weights in one flat buffer
(optim/optimizer.py); `Optimizer.move_buffers` moves those buffers into memory
the workers map too (multiprocessing.RawArray), and each worker's parameters
are views into them. So AdamW's in-place update in the main process is what
every worker reads at its next step, and no weights are ever sent. Each worker
writes its gradient into a shared buffer of its own. Only the batch parts and
the losses travel through the pipes (a few kB per step).

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

import multiprocessing
import signal
import traceback
import weakref

import numpy as np

WORKER_SEED_STREAM = 3          # worker k's dropout masks at a step: default_rng([seed, 3, step, k])
START_TIMEOUT = 300             # seconds a worker may take to import NumPy and build its model


class DataParallel:
    """Forward and backward of a batch on `config.workers` processes; the gradient lands in `model`'s .grad.

    The main process does one of the N parts itself (the last); workers 1 .. N-1 are spawned processes,
    and `self.processes[k - 1]`, `self.connections[k - 1]` and `self.worker_gradients[k - 1]` are worker k's.
    If anything goes wrong during a step (an error in any part, a worker that died, Ctrl-C), the workers
    are stopped before the error is raised, so that no later step can read a stale answer; `alive` is
    then False and the trainer starts fresh workers at its next step.

    Args:
        model: the main process's GPT, already built by `Trainer`.
        optimizer: its flat optimizer; its buffers are moved into shared memory.
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
        self.processes, self.connections, self.worker_gradients = [], [], []
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

        self.optimizer.move_buffers(allocate)                    # the weights now live in shared memory
        shared_weights = [behind[id(group["data"])] for group in self.optimizer.groups]
        layout = _layout(self.model, self.optimizer.groups)
        for rank in range(1, self.config.workers):
            raws, gradients = zip(*(_shared_array(context, group["grad"].size, group["grad"].dtype)
                                    for group in self.optimizer.groups))
            ours, theirs = context.Pipe()
            process = context.Process(target=_worker, name=f"minitransformer-worker-{rank}", daemon=True,
                                      args=(theirs, rank, self.config, vocab_size, layout, shared_weights, raws))
            process.start()
            self.processes.append(process)
            self.connections.append(ours)
            theirs.close()                                       # so that a dead worker reads as EOF here
            self.worker_gradients.append(list(gradients))
        for rank, connection in enumerate(self.connections, start=1):
            if not connection.poll(START_TIMEOUT):
                raise RuntimeError(f"DataParallel: worker {rank} did not start within {START_TIMEOUT} s")
            self._receive(rank, connection)                      # each worker says it is ready

    @property
    def alive(self):
        return self._finalizer.alive

    def loss_and_gradients(self, x, y, step):
        """Forward and backward of the batch (x, y), split by rows over the workers.

        Worker k < N gets the k-th of N row parts (np.array_split: the larger parts first); the main
        process takes the last, smallest part, since it also adds the gradients up afterwards.

        Args:
            x, y: (B, T) int token ids and targets, B >= workers.
            step: the 0-based step (seeds the workers' dropout masks).
        Returns:
            the batch's mean loss (a float); every parameter's .grad holds dL/dW
            (added to what was there, as a backward pass does).
        """
        if not self.alive:
            raise RuntimeError("DataParallel: the workers were stopped; make a new DataParallel")
        workers, batch = self.config.workers, len(x)
        if batch < workers:
            raise ValueError(f"DataParallel: a batch needs at least one window per worker ({workers}), "
                             f"got {batch} windows")
        xs, ys = np.array_split(x, workers), np.array_split(y, workers)
        shares = [len(part) / batch for part in xs]              # B_k / B
        try:
            for rank, connection in enumerate(self.connections, start=1):
                _send(rank, connection, (step, xs[rank - 1], ys[rank - 1], shares[rank - 1], self.model.training))
            with self.blas.limit(limits=1, user_api="blas"):     # one core per process
                loss = _part(self.model, self.loss_fn, xs[-1], ys[-1], shares[-1])
            own = self.optimizer.gradients()
            for rank, (connection, gradients) in enumerate(zip(self.connections, self.worker_gradients), start=1):
                loss += self._receive(rank, connection)
                for mine, theirs in zip(own, gradients):
                    mine += theirs
        except BaseException:
            self.close()                 # the pipes may hold answers nobody read: never reuse them
            raise
        return loss

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


def _layout(model, groups):
    """[[(name, shape) of each parameter] per optimizer group]: the order of the flat buffers."""
    names = {id(param): name for name, param in model.named_parameters()}
    return [[(names[id(param)], param.shape) for param in group["params"]] for group in groups]


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


def _worker(connection, rank, config, vocab_size, layout, shared_weights, shared_gradients):
    """A worker process: build the model, map the shared weights, then serve steps until told to stop.

    It stops quietly when the main process is gone (its pipe closed or reset)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)                 # Ctrl-C is for the main process to handle
    try:
        model, loss_fn, gradients = _worker_model(rank, config, vocab_size, layout, shared_weights, shared_gradients)
        answer = ("ready", 0.0)
    except Exception:
        model, answer = None, ("error", traceback.format_exc())
    try:
        connection.send(answer)
        while model is not None:
            message = connection.recv()
            if message is None:
                return
            step, x, y, share, training = message
            try:
                model.train(training)
                if config.dropout:
                    seeded = np.random.default_rng([config.seed, WORKER_SEED_STREAM, step, rank])
                    model.dropout_rng.bit_generator.state = seeded.bit_generator.state
                for gradient in gradients:
                    gradient[...] = 0
                answer = ("ok", _part(model, loss_fn, x, y, share))
            except Exception:
                answer = ("error", traceback.format_exc())
            connection.send(answer)
    except (EOFError, OSError):                                  # the main process is gone
        return


def _worker_model(rank, config, vocab_size, layout, shared_weights, shared_gradients):
    """The worker's model, its parameters views of the shared weights and of its own gradient buffers."""
    from threadpoolctl import threadpool_limits

    from .layers.loss import CrossEntropyLoss
    from .optim.optimizer import bind_to_buffers
    from .trainer import build_model, build_parameter_groups     # imported here: trainer imports this module

    threadpool_limits(limits=1, user_api="blas")
    model = build_model(config, vocab_size)
    groups = build_parameter_groups(model, config)
    mine = _layout(model, groups)
    if mine != layout:
        raise ValueError(f"DataParallel worker {rank}: its parameters {mine} are not laid out as the main "
                         f"process's {layout}")
    gradients = [np.ctypeslib.as_array(raw) for raw in shared_gradients]
    for group, weights, gradient in zip(groups, shared_weights, gradients):
        bind_to_buffers(group["params"], np.ctypeslib.as_array(weights), gradient)
    return model, CrossEntropyLoss(), gradients
