"""Data-parallel training (parallel.py): the batch split over worker processes gives one process's gradient."""

import multiprocessing
import os
import re
import signal
import time

import numpy as np
import pytest
from test_checkpoint import tiny_trainer

from minitransformer.__main__ import main
from minitransformer.training.data import get_batch
from minitransformer.training.parallel import DataParallel


def _gradients(trainer):
    return {name: param.grad.copy() for name, param in trainer.model.named_parameters()}


@pytest.mark.parametrize("workers, batch_size", [(2, 4), (3, 5)])        # (3, 5): parts of 2, 2 and 1 windows
def test_split_batch_gives_the_one_process_loss_and_gradient(workers, batch_size):
    one = tiny_trainer(dtype="float64", dropout=0.0, batch_size=batch_size)
    split = tiny_trainer(dtype="float64", dropout=0.0, batch_size=batch_size, workers=workers)
    x, y = get_batch(one.train_data, 8, batch_size, np.random.default_rng(0))
    one.optimizer.zero_grad()
    expected_loss = float(one.loss_fn(one.model(x), y))
    one.model.backward(one.loss_fn.backward())
    expected = _gradients(one)
    parallel = DataParallel(split.model, split.optimizer, split.config, one.model.vocab_size, split.loss_fn)
    try:
        for param in split.model.parameters():
            param.grad[...] = 1.0                                        # backward adds to what is there
        loss = parallel.loss_and_gradients(x, y, step=0)
        got = _gradients(split)
    finally:
        parallel.close()
    assert loss == pytest.approx(expected_loss, rel=1e-12)
    for name, gradient in expected.items():
        np.testing.assert_allclose(got[name] - 1.0, gradient, rtol=1e-9, atol=1e-13, err_msg=name)


@pytest.mark.parametrize("workers", [2, 3])                               # 3: parts of 2, 1 and 1 windows
def test_training_on_workers_follows_one_process(workers):
    """The losses and the final weights: the parts, the shared sum, clipping norm and AdamW update."""
    with tiny_trainer(dtype="float64", dropout=0.0) as one, \
            tiny_trainer(dtype="float64", dropout=0.0, workers=workers) as split:
        one.fit()
        split.fit()
        np.testing.assert_allclose(split.history["loss"], one.history["loss"], rtol=1e-10)
        assert split.parallel is not None and one.parallel is None
        for (name, a), (_, b) in zip(split.model.named_parameters(), one.model.named_parameters()):
            np.testing.assert_allclose(a.data, b.data, rtol=1e-9, atol=1e-12, err_msg=name)


def test_a_step_leaves_every_gradient_buffer_zero_and_a_gradient_call_between_steps_changes_nothing():
    """Each process clears its buffers at the end of `train_step`, so the next step needs no clearing (a
    stale gradient would show in the losses of the steps after); `loss_and_gradients` fills them, and the
    step after it must clear them first. (A worker clears its own buffer after answering, so only the
    main process's is checked at once.)"""
    one, two = _same_trainers(2)
    with one, two:
        assert two.train_step() == pytest.approx(one.train_step(), rel=1e-12)
        assert not any(buffer.any() for buffer in two.parallel.gradients[0])
        assert not any(param.grad.any() for param in two.model.parameters())
        x, y = get_batch(two.train_data, 8, 6, np.random.default_rng(0))
        two.parallel.loss_and_gradients(x, y, step=1)
        assert all(buffer.any() for buffers in two.parallel.gradients for buffer in buffers)
        assert two.train_step() == pytest.approx(one.train_step(), rel=1e-12)
        assert two.train_step() == pytest.approx(one.train_step(), rel=1e-12)


def test_a_failure_during_the_update_is_torn_and_the_run_resumes_only_from_its_checkpoint(tmp_path):
    """The worker updates its slice; our slice fails: the weights are half updated, so the trainer refuses
    to go on, and the run continues exactly from its last checkpoint."""
    from minitransformer.training.parallel import TornUpdate

    with tiny_trainer(workers=2, dropout=0.0) as uninterrupted:
        uninterrupted.fit(max_steps=4)
    with tiny_trainer(out_dir=tmp_path, workers=2, dropout=0.0, eval_interval=2) as trainer:
        trainer.fit(max_steps=2)                                          # checkpoint at step 2
        trainer.train_step()
        step = trainer.optimizer.step
        trainer.optimizer.step = lambda **kwargs: (_ for _ in ()).throw(KeyboardInterrupt)   # Ctrl-C in our slice
        with pytest.raises(TornUpdate, match="some of them were updated and others not"):
            trainer.train_step()
        trainer.optimizer.step = step
        assert not trainer.parallel.alive and not _workers_running()
        for refused in (trainer.train_step, lambda: trainer.save(tmp_path), trainer.train_step):
            with pytest.raises(TornUpdate, match=r"part updated(.|\n)*Resume it from its last checkpoint"):
                refused()
            trainer.close()                                               # closing does not lift the refusal
    with type(trainer).resume(tmp_path, trainer.train_data, trainer.val_data, progress=False) as resumed:
        resumed.fit(max_steps=4)
    assert resumed.history["loss"] == uninterrupted.history["loss"]


def test_a_worker_failing_during_the_update_is_torn_too():
    """The worker dies as it is told to update: our slice is updated, its slice not. (Killed before the
    message, not during its update, so that it cannot have answered first: the test must not race it.)"""
    from minitransformer.training.parallel import TornUpdate

    with tiny_trainer(workers=2, dropout=0.0) as trainer:
        trainer.train_step()
        tell_all, worker = trainer.parallel._tell_all, trainer.parallel.processes[0]

        def kill_the_worker_at_the_update(message):
            if message[0] == "update":
                worker.kill()
                worker.join()
            tell_all(message)
        trainer.parallel._tell_all = kill_the_worker_at_the_update
        with pytest.raises(TornUpdate, match="worker 1 stopped without answering"):
            trainer.train_step()
        assert trainer.torn is not None


def test_resumed_two_worker_run_with_dropout_is_bit_exact(tmp_path):
    with tiny_trainer(workers=2) as uninterrupted:                        # dropout 0.1: the workers' masks
        uninterrupted.fit()
    with tiny_trainer(out_dir=tmp_path, workers=2) as first_half:
        first_half.fit(max_steps=3)
    with type(first_half).resume(tmp_path, first_half.train_data, first_half.val_data, progress=False) as resumed:
        resumed.fit()
    assert resumed.history["loss"] == uninterrupted.history["loss"]      # exact float equality
    final = dict(uninterrupted.model.named_parameters())
    assert all(np.array_equal(p.data, final[n].data) for n, p in resumed.model.named_parameters())


@pytest.mark.parametrize("dropout, training", [(0.0, True), (0.5, True), (0.5, False)])
def test_each_worker_draws_its_own_dropout_masks(dropout, training):
    """The same window in all three parts: the parts' gradients are equal exactly when no masks are drawn
    (dropout 0, or the model in eval mode, which the workers follow)."""
    with tiny_trainer(workers=3, dropout=dropout, batch_size=3, dtype="float64") as trainer:
        trainer.train_step()                                              # starts the workers
        x, y = get_batch(trainer.train_data, 8, 1, np.random.default_rng(0))
        trainer.model.train(training)
        trainer.optimizer.zero_grad()
        trainer.parallel.loss_and_gradients(np.concatenate([x] * 3), np.concatenate([y] * 3), step=1)
        total = np.concatenate(trainer.optimizer.gradients())
        first, second = (np.concatenate(gradients) for gradients in trainer.parallel.gradients[1:])
        main_part = total - first - second
    same = np.allclose(first, second, rtol=1e-12, atol=1e-15) and np.allclose(main_part, first, rtol=1e-9, atol=1e-12)
    assert same == (dropout == 0.0 or not training)
    if dropout and training:                                             # every pair differs, not just one
        assert not np.allclose(first, second) and not np.allclose(main_part, first)


@pytest.mark.parametrize("workers", [0, 5, 1.5, True, np.int64(2)])
def test_workers_outside_one_to_batch_size_are_refused(workers):
    with pytest.raises(ValueError, match=r"workers must be an int from 1 to batch_size \(4\), got " + re.escape(repr(workers))):
        tiny_trainer(workers=workers)


def test_blas_threads_are_limited_only_during_our_part_and_restored():
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    with threadpool_limits(limits=2, user_api="blas"):                  # so that 1 thread is a change
        before, during = blas_threads(), []
        _limited_only_during_our_part(before, during, blas_threads)


def _limited_only_during_our_part(before, during, blas_threads):
    with tiny_trainer(workers=2) as a, tiny_trainer(workers=2) as b:
        forward = a.model.forward
        a.model.forward = lambda *args, **kwargs: during.append(blas_threads()) or forward(*args, **kwargs)
        a.train_step(), b.train_step()
        assert during == [[1] * len(before)] and blas_threads() == before
    assert blas_threads() == before


def _same_trainers(workers, **changes):
    """A one-process trainer and one on `workers` processes, same seed, float64, batches of 6."""
    fields = dict(dtype="float64", dropout=0.0, batch_size=6, **changes)
    return tiny_trainer(**fields), tiny_trainer(workers=workers, **fields)


def _bad_rows(trainer, row):
    x, y = get_batch(trainer.train_data, 8, 6, np.random.default_rng(0))
    x = x.copy()
    x[row, 0] = 999                                                      # not a token id
    return x, y


@pytest.mark.parametrize("row, raised, message", [(0, RuntimeError, r"worker 1 failed:(.|\n)*999"),   # worker 1's part
                                                  (5, IndexError, "999")])                          # the main part
def test_after_an_error_in_any_part_the_next_step_is_exact(row, raised, message):
    """Parts of 2, 2, 2 windows: rows 0-1 are worker 1's, 2-3 worker 2's, 4-5 the main process's."""
    one, three = _same_trainers(3)
    with one, three:
        assert three.train_step() == pytest.approx(one.train_step(), rel=1e-12)
        first = three.parallel
        with pytest.raises(raised, match=message):
            first.loss_and_gradients(*_bad_rows(three, row), step=1)
        assert not first.alive and not any(process.is_alive() for process in first.processes)
        for _ in range(2):     # fresh workers, no stale answer; the second loss shows the first update's gradient
            assert three.train_step() == pytest.approx(one.train_step(), rel=1e-12)
        assert three.parallel is not first and three.parallel.alive


def test_an_interrupt_or_a_killed_worker_stops_the_workers_and_training_goes_on():
    one, two = _same_trainers(2)
    with one, two:
        assert two.train_step() == pytest.approx(one.train_step(), rel=1e-12)
        forward = two.model.forward
        two.model.forward = lambda *args, **kwargs: (_ for _ in ()).throw(KeyboardInterrupt)   # Ctrl-C in our part
        with pytest.raises(KeyboardInterrupt):
            two.train_step()
        two.model.forward = forward
        assert not two.parallel.alive
        get_batch(one.train_data, 8, 6, one.data_rng)                     # both skip the interrupted step's batch
        assert two.train_step() == pytest.approx(one.train_step(), rel=1e-12)
        two.parallel.processes[0].kill()
        two.parallel.processes[0].join()
        with pytest.raises(RuntimeError, match=r"worker 1 stopped without answering"):
            two.train_step()
        assert two.train_step() > 0                                       # fresh workers again


def test_close_stops_the_workers():
    trainer = tiny_trainer(workers=3)
    trainer.train_step()
    processes = trainer.parallel.processes
    assert len(processes) == 2 and all(process.is_alive() for process in processes)
    trainer.close()
    assert trainer.parallel is None and [process.exitcode for process in processes] == [0, 0]   # stopped when asked


def test_train_command_with_two_workers(tmp_path, capsys):
    assert main(["train", "--max-steps", "4", "--eval-interval", "4", "--eval-batches", "1", "--block-size", "8",
                 "--batch-size", "4", "--n-layers", "1", "--d-model", "16", "--n-heads", "2", "--d-ff", "32",
                 "--workers", "2", "--sample-tokens", "0", "--no-progress", "--out", str(tmp_path)]) == 0
    assert "trained to step 4" in capsys.readouterr().out


def test_worker_masks_are_fixed_by_the_step_and_change_with_it():
    with tiny_trainer(workers=2, dropout=0.5, dtype="float64") as trainer:
        trainer.train_step()
        x, y = get_batch(trainer.train_data, 8, 4, np.random.default_rng(0))

        def worker_gradient(step):
            trainer.optimizer.zero_grad()
            trainer.parallel.loss_and_gradients(x, y, step)
            return np.concatenate(trainer.parallel.gradients[1])

        first = worker_gradient(5)
        assert np.array_equal(worker_gradient(5), first)                  # a resumed step redraws the same masks
        assert not np.allclose(worker_gradient(6), first)                 # the next step draws new ones


def test_ctrl_c_is_for_the_main_process_alone():
    one, two = _same_trainers(2)
    with one, two:
        assert two.train_step() == pytest.approx(one.train_step(), rel=1e-12)
        workers = two.parallel
        os.kill(workers.processes[0].pid, signal.SIGINT)
        time.sleep(0.2)
        assert two.train_step() == pytest.approx(one.train_step(), rel=1e-12)
        assert two.parallel is workers and workers.processes[0].is_alive()


def test_a_worker_whose_model_is_laid_out_otherwise_is_refused_and_nothing_is_left_running():
    trainer = tiny_trainer(workers=2)
    with pytest.raises(RuntimeError, match="worker 1 failed:(.|\n)*not laid out as the main process's"):
        DataParallel(trainer.model, trainer.optimizer, trainer.config, trainer.model.vocab_size + 1, trainer.loss_fn)
    assert not _workers_running()


def test_an_optimizer_the_workers_would_not_build_is_refused():
    """Workers build their optimizer from the config: the main process's must have the same constants."""
    trainer = tiny_trainer(workers=2)
    trainer.optimizer.beta1 = 0.5                                        # the config says 0.9
    with pytest.raises(RuntimeError, match=r"worker 1 failed:(.|\n)*not laid out(.|\n)*'beta1', 0.5"):
        DataParallel(trainer.model, trainer.optimizer, trainer.config, trainer.model.vocab_size, trainer.loss_fn)
    assert not _workers_running()


def test_a_failed_start_leaves_nothing_running_and_the_next_step_starts_again(monkeypatch):
    started = []
    start = multiprocessing.context.SpawnProcess.start

    def start_once(process):
        if started:
            raise OSError("no more processes")
        started.append(process)
        start(process)

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", start_once)
    with tiny_trainer(workers=3) as trainer:
        with pytest.raises(OSError, match="no more processes") as caught:   # its traceback keeps the half-built
            trainer.train_step()                                           # DataParallel alive, as a notebook does
        assert not _workers_running() and started[0].exitcode == 0 and caught.traceback
        monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", start)
        assert np.isfinite(trainer.train_step()) and len(trainer.parallel.processes) == 2


def _workers_running():
    return [child for child in multiprocessing.active_children() if child.name.startswith("minitransformer-worker")]
