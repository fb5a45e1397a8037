"""The training loop's parts every objective shares: stopping at a step boundary on Ctrl-C, the NaN stop's
error, the progress line's rate.

Left out: gradient accumulation, mixed precision, skipping a bad batch and going on.
"""

import contextlib
import os
import signal
import threading
import types

RATE_WINDOW = 20        # the progress bar's tokens/s: the mean over the last this many steps


class TrainingDiverged(FloatingPointError):
    """The loss, the gradient norm or the weights became NaN or infinite; the run stopped, nothing was saved."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped `Trainer.fit` at a step boundary, after saving a checkpoint there (if it saves).

    Attributes: `step`, the last step done; `directory`, where its checkpoint is (None if the trainer saves nowhere).
    """

    def __init__(self, step, directory):
        where = f"checkpoint saved in {os.fspath(directory)}" if directory is not None else "nothing saved"
        super().__init__(f"interrupted at step {step}: {where}")
        self.step, self.directory = step, directory


@contextlib.contextmanager
def stop_at_step_boundary():
    """`with stop_at_step_boundary() as stop:` a first Ctrl-C only sets `stop.requested`; the loop stops there.

    A second Ctrl-C interrupts at once (the handler that was there before is put back by the first). Outside
    the main thread, where Python delivers no signal, nothing changes.
    """
    stop = types.SimpleNamespace(requested=False)
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    before = signal.getsignal(signal.SIGINT)

    def request_stop(signum, frame):
        stop.requested = True
        signal.signal(signal.SIGINT, before)

    signal.signal(signal.SIGINT, request_stop)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, before)


def is_terminal(stream):
    """True if `stream` is a terminal (a closed stream, or one without isatty, is not)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):                # no isatty, or a closed stream
        return False
