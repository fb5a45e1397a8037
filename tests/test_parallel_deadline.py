"""Data parallelism never hangs (parallel.py, "Deadlines"): a worker that stops answering fails the run.

A frozen worker is one stopped with SIGSTOP: alive, holding its pipe open, answering nothing. The tests
wait until /proc shows it stopped before going on, so nothing races the signal. A watchdog SIGKILLs it
after WATCHDOG seconds, so that a deadline (or a kill) that never comes fails the test instead of hanging the
suite: the watchdog having fired is a failure. Whatever happens, the frozen worker is SIGKILLed and reaped at
the end. No assertion depends on how fast anything runs: a busy machine only makes a test slower (the step
deadline grows with the slowest step), and WATCHDOG is 40 times the FLOOR the tests configure.
"""

import contextlib
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from test_checkpoint import tiny_trainer

from minitransformer.__main__ import main
from minitransformer.training import parallel as parallel_module
from minitransformer.training.data import get_batch
from minitransformer.training.parallel import STEP_TIMEOUT_FACTOR, TornUpdate, WorkerTimeout
from minitransformer.training.trainer import Trainer

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self") or not hasattr(signal, "SIGSTOP"),
                                reason="SIGSTOP and Linux's /proc")

FLOOR = 3.0             # seconds: the short worker_timeout these tests configure (the default is 60)
WATCHDOG = 120          # seconds after which a frozen worker is killed if the deadline has not come


def _state(pid):
    """(state letter, parent pid) of process `pid` from /proc, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rpartition(")")[2].split()
    except FileNotFoundError:
        return None
    return fields[0], int(fields[1])


def _our_children(pids):
    """Those of `pids` that are still processes of ours: running, stopped, or exited and not reaped."""
    return [pid for pid in pids if (_state(pid) or (None, None))[1] == os.getpid()]


def _wait_until_stopped(pid):
    for _ in range(6000):                                 # up to a minute, on a very busy machine
        if (_state(pid) or ("",))[0] == "T":
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not stop after SIGSTOP")


@contextlib.contextmanager
def _watchdog(processes):
    """Kills `processes` if the block still runs WATCHDOG s on (a deadline or a kill that never came: the test
    then fails), and kills and reaps them at the end in any case."""
    fired = []

    def kill():
        fired.append(True)
        for process in processes:
            process.kill()

    watchdog = threading.Timer(WATCHDOG, kill)
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()
        for process in processes:
            process.kill()                                # SIGKILL; nothing if DataParallel reaped it already
            process.join()
        assert not fired, f"the watchdog had to kill {processes} after {WATCHDOG} s"


@contextlib.contextmanager
def _frozen(process):
    """`process` stopped (SIGSTOP) for the duration, under the watchdog."""
    with _watchdog([process]):
        os.kill(process.pid, signal.SIGSTOP)
        _wait_until_stopped(process.pid)
        yield


def _workers_running():
    return [child for child in multiprocessing.active_children() if child.name.startswith("minitransformer-worker")]


def test_a_frozen_worker_fails_the_step_by_name_leaves_no_process_and_the_run_resumes(tmp_path):
    with tiny_trainer(workers=2, dropout=0.0) as uninterrupted:
        uninterrupted.fit(max_steps=4)
    with tiny_trainer(out_dir=tmp_path, workers=2, dropout=0.0, eval_interval=2, worker_timeout=FLOOR) as trainer:
        trainer.fit(max_steps=2)                                          # checkpoint at step 2
        workers = trainer.parallel
        frozen, pids = workers.processes[0], [process.pid for process in workers.processes]
        with _frozen(frozen):
            with pytest.raises(WorkerTimeout) as caught:
                trainer.train_step()                                      # step 3
            assert not workers.alive and not _our_children(pids) and not _workers_running()
        message = str(caught.value)
        assert f"worker 1 (pid {frozen.pid}, stopped by a signal, e.g. SIGSTOP" in message
        assert "did not send its part's loss at step 3" in message
        assert float(re.search(r"waited (\d+\.\d) s", message).group(1)) >= FLOOR   # how long it waited
        assert f"TrainConfig.worker_timeout, {FLOOR:g} s" in message and "killed" in message
        assert trainer.step == 2 and trainer.torn is None
    with Trainer.resume(tmp_path, trainer.train_data, trainer.val_data, progress=False) as resumed:
        assert resumed.step == 2 and resumed.config.worker_timeout == FLOOR
        resumed.fit(max_steps=4)
    assert resumed.history["loss"] == uninterrupted.history["loss"]      # exact float equality


def test_a_worker_frozen_before_its_update_tears_the_step():
    """It answered the sums of squares, then is stopped: our slice is updated, its slice never will be."""
    with tiny_trainer(workers=2, dropout=0.0, worker_timeout=FLOOR) as trainer:
        trainer.train_step()
        workers, tell_all = trainer.parallel, trainer.parallel._tell_all
        frozen = workers.processes[0]
        freezing = contextlib.ExitStack()

        def freeze_at_the_update(message):
            if message[0] == "update":
                freezing.enter_context(_frozen(frozen))
            tell_all(message)
        workers._tell_all = freeze_at_the_update
        with freezing:
            with pytest.raises(TornUpdate, match=rf"worker 1 \(pid {frozen.pid}, stopped by a signal(.|\n)*did not "
                                                 r"confirm its slice's update at step 2"):
                trainer.train_step()
            assert frozen.pid not in _our_children([frozen.pid]) and not _workers_running()
        assert isinstance(trainer.torn.__cause__, WorkerTimeout)


def test_a_worker_that_does_not_read_a_part_too_large_for_its_pipe_cannot_block_the_main_process():
    """A part of ~1 MB fills the pipe (Linux holds ~200 kB): written at once, it would block us for good."""
    with tiny_trainer(workers=2, dropout=0.0, worker_timeout=FLOOR) as trainer:
        trainer.train_step()
        x, y = get_batch(trainer.train_data, 8, 16000, np.random.default_rng(0))
        frozen = trainer.parallel.processes[0]
        with _frozen(frozen):
            with pytest.raises(WorkerTimeout, match=rf"worker 1 \(pid {frozen.pid}, stopped by a signal(.|\n)*"
                                                    r"did not read its part of the batch at step 2"):
                trainer.parallel.loss_and_gradients(x, y, step=1)
            assert not _our_children([frozen.pid]) and not _workers_running()


def test_a_part_too_large_for_the_pipe_goes_by_thread_and_gives_the_one_process_gradient(monkeypatch):
    written = []
    run = parallel_module._Sender.run
    monkeypatch.setattr(parallel_module._Sender, "run", lambda sender: written.append(len(sender.parcels)) or run(sender))
    with tiny_trainer(dtype="float64", dropout=0.0) as one, \
            tiny_trainer(dtype="float64", dropout=0.0, workers=3) as split:
        one.train_step()
        split.train_step()                                               # small parts: written at once
        assert written == []
        x, y = get_batch(one.train_data, 8, 3000, np.random.default_rng(0))   # parts of 128 kB
        one.optimizer.zero_grad()
        expected = float(one.loss_fn(one.model(x), y))
        one.model.backward(one.loss_fn.backward())
        split.optimizer.zero_grad()
        assert split.parallel.loss_and_gradients(x, y, step=1) == pytest.approx(expected, rel=1e-12)
        assert written == [2] and not split.parallel.senders              # one thread wrote both parts
        for (name, a), (_, b) in zip(split.model.named_parameters(), one.model.named_parameters()):
            np.testing.assert_allclose(a.grad, b.grad, rtol=1e-9, atol=1e-13, err_msg=name)


def test_a_worker_frozen_at_its_start_fails_the_start_by_name_and_leaves_no_process(monkeypatch):
    started = []
    start = multiprocessing.context.SpawnProcess.start

    def start_and_freeze_the_first(process):
        start(process)
        started.append(process)
        if len(started) == 1:
            os.kill(process.pid, signal.SIGSTOP)

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", start_and_freeze_the_first)
    monkeypatch.setattr(parallel_module, "START_TIMEOUT", 1)             # so that worker_timeout sets the limit
    with tiny_trainer(workers=3, worker_timeout=FLOOR) as trainer, _watchdog(started):
        with pytest.raises(WorkerTimeout, match=rf"worker 1 \(pid \d+, stopped by a signal(.|\n)*did not say that "
                                                rf"it had started(.|\n)* within {FLOOR:g} s"):
            trainer.train_step()
        assert len(started) == 2 and not _our_children([process.pid for process in started])
        assert not _workers_running() and trainer.step == 0


def test_closing_while_a_worker_is_frozen_kills_it_after_the_stop_patience(monkeypatch):
    """E.g. Ctrl-C while waiting on a frozen worker: told to stop, it cannot; SIGTERM would not end it either."""
    monkeypatch.setattr(parallel_module, "STOP_PATIENCE", 1)
    with tiny_trainer(workers=2) as trainer:
        trainer.train_step()
        frozen = trainer.parallel.processes[0]
        with _frozen(frozen):
            trainer.close()
            assert not _our_children([frozen.pid]) and frozen.exitcode == -signal.SIGKILL


def test_the_step_deadline_is_the_floor_or_many_times_the_slowest_step():
    with tiny_trainer(workers=2, worker_timeout=FLOOR) as trainer:
        trainer.train_step()
        workers = trainer.parallel
        assert workers.slowest_step > 0                                   # measured
        assert workers.step_deadline() == max(FLOOR, STEP_TIMEOUT_FACTOR * workers.slowest_step)
        workers.slowest_step = 1.5                                        # a slow machine: 30 s
        assert workers.step_deadline() == STEP_TIMEOUT_FACTOR * 1.5 > FLOOR


def test_a_healthy_run_beside_busy_loops_keeps_the_default_deadline_and_its_numbers():
    """Two processes burn both cores for the whole run: it is slower, never stopped, and the same."""
    with tiny_trainer(workers=2) as quiet:
        quiet.fit(max_steps=4)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        with tiny_trainer(workers=2) as loaded:                          # worker_timeout: the default
            loaded.fit(max_steps=4)
            assert loaded.parallel.alive
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert loaded.history["loss"] == quiet.history["loss"]


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "60", True, None])
def test_a_worker_timeout_that_is_not_a_positive_number_of_seconds_is_refused(bad):
    with tiny_trainer(workers=2, worker_timeout=bad) as trainer:
        with pytest.raises(ValueError, match=r"TrainConfig.worker_timeout must be a finite number of seconds > 0, "
                                             r"got " + re.escape(repr(bad))):
            trainer.train_step()
        assert not _workers_running()


def test_train_command_takes_a_worker_timeout(tmp_path, capsys):
    arguments = ["train", "--max-steps", "2", "--eval-interval", "2", "--eval-batches", "1", "--block-size", "8",
                 "--batch-size", "4", "--n-layers", "1", "--d-model", "16", "--n-heads", "2", "--d-ff", "32",
                 "--workers", "2", "--sample-tokens", "0", "--no-progress", "--out", str(tmp_path / "run")]
    assert main(arguments + ["--worker-timeout", "30"]) == 0
    with open(tmp_path / "run" / "checkpoint.json") as file:
        assert json.load(file)["train_config"]["worker_timeout"] == 30
    capsys.readouterr()
    for bad in ("0", "-5", "nan", "inf", "soon"):
        with pytest.raises(SystemExit) as exited:
            main(arguments + ["--worker-timeout", bad, "--out", str(tmp_path / bad)])
        error = capsys.readouterr().err
        assert exited.value.code == 2 and error.startswith("error: ") and error.count("\n") == 1
        assert "--worker-timeout" in error and repr(bad) in error and not os.path.exists(tmp_path / bad)
