"""The phase timer (training/phases.py): off unless asked; asked, a step's phases add up to the step.

Structure only, never speed: which phases a step is cut into, that their sums are the steps' sums, and that
nothing is recorded by default. (The data-parallel phases are checked under mpiexec in test_distributed.py.)
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minitransformer.objectives.language_model import Trainer
from minitransformer.training.config import TrainConfig
from minitransformer.training.phases import Laps, laps, recording

ROOT = Path(__file__).parent.parent
ONE_PROCESS = ["batch", "forward", "backward", "clip", "optimizer", "finite check", "progress", "evaluation"]


def small_trainer():
    rng = np.random.default_rng(0)
    data = rng.integers(0, 11, 400)
    config = TrainConfig(block_size=8, batch_size=4, n_layers=1, n_heads=2, d_model=16, d_ff=32, max_steps=6,
                         eval_interval=3, eval_batches=1, warmup_steps=1, lr_decay_steps=6)
    return Trainer(config, data[:300], data[300:], 11, progress=False)


def test_the_timer_is_off_by_default_and_records_nothing():
    assert os.environ.get("MINITRANSFORMER_PHASES") != "1", "run the tests without MINITRANSFORMER_PHASES"
    assert laps.enabled is False and Laps().enabled is False
    laps.reset()
    small_trainer().fit()
    assert (laps.wall, laps.cpu, laps.steps, laps.mark) == ({}, {}, 0, None)


def test_a_steps_phases_are_the_loops_and_add_up_to_the_step():
    trainer = small_trainer()
    with recording() as recorded:
        trainer.fit()
        recorded.table("")                              # counts the step under way
    assert laps.enabled is False                        # off again after the block
    assert list(recorded.wall) == ONE_PROCESS == list(recorded.cpu)
    assert recorded.steps == 6
    assert sum(recorded.wall.values()) == pytest.approx(recorded.step_wall, rel=1e-9, abs=1e-12)
    assert sum(recorded.cpu.values()) == pytest.approx(recorded.step_cpu, rel=1e-9, abs=1e-12)
    assert all(seconds >= 0 for seconds in recorded.wall.values())


def test_step_on_next_batch_alone_is_a_step_without_progress_or_evaluation():
    trainer = small_trainer()
    with recording() as recorded:
        for _ in range(3):
            trainer.step_on_next_batch()
        lines = recorded.table("steps")
    assert list(recorded.wall) == ONE_PROCESS[:6] and recorded.steps == 3
    assert [line.split()[0] for line in lines[1:]] == ["batch", "forward", "backward", "clip", "optimizer",
                                                       "finite", "step"]


def test_asked_by_the_environment_every_process_prints_its_table_at_exit():
    script = ("from minitransformer.training.phases import laps\n"
              "laps.begin(); laps.lap('forward'); laps.lap('backward')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "MINITRANSFORMER_PHASES": "1"}, timeout=120, encoding="utf-8")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("phases of rank 0") and "1 steps" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["forward", "backward", "step"]


def test_a_begin_closes_the_step_under_way_and_a_lap_before_any_begin_records_nothing():
    trainer = small_trainer()
    with recording() as recorded:
        trainer.step_on_next_batch()
        trainer.step_on_next_batch()
        recorded.begin()                                # as fit does after steps taken by hand
        assert recorded.steps == 2
    fresh = Laps()
    fresh.enabled = True
    fresh.lap("forward")                                # no step begun: nothing to measure from
    assert fresh.wall == {} and fresh.steps == 0


def test_the_table_gives_each_phases_mean_per_step_and_share_by_hand(monkeypatch):
    """Two steps on a clock set by hand (CPU time half the wall time): forward 2 s then 4 s, backward 1 s twice,
    so per step forward 3000 ms of wall (1500 of CPU), backward 1000 (500), the step 4000 (2000); shares 6/8 and 2/8.
    A table of no steps divides by nothing."""
    import minitransformer.training.phases as phases

    clock = iter([0, 2, 3, 10, 14, 15])
    now = [0.0]

    def tick():
        now[0] = float(next(clock))
        return now[0]
    monkeypatch.setattr(phases, "time", type("Clock", (), {"perf_counter": staticmethod(tick),
                                                           "process_time": staticmethod(lambda: now[0] / 2)}))
    laps = Laps()
    laps.enabled = True
    for _ in range(2):
        laps.begin()
        laps.lap("forward")
        laps.lap("backward")
    assert laps.table("two steps") == [
        "two steps: 2 steps, mean ms per step (wall / CPU of this process), share of the step",
        "  forward       3000.00 / 1500.00    75.0%",
        "  backward      1000.00 /  500.00    25.0%",
        "  step          4000.00 / 2000.00"]
    assert Laps().table("none") == ["none: 0 steps, mean ms per step (wall / CPU of this process), share of the step",
                                    "  step             0.00 /    0.00"]


def test_the_environment_switches_the_timer_on_with_1_alone_and_the_table_names_the_rank(monkeypatch, capfd):
    import runpy

    import minitransformer.training.phases as phases

    for value in ("0", "yes", ""):
        monkeypatch.setenv("MINITRANSFORMER_PHASES", value)
        assert runpy.run_path(phases.__file__)["laps"].enabled is False, value      # a fresh module's timer
    for variable, rank in (("PMI_RANK", "1"), ("OMPI_COMM_WORLD_RANK", "3"), (None, "0")):   # MPICH, Open MPI, none
        for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK"):
            monkeypatch.delenv(name, raising=False)
        if variable:
            monkeypatch.setenv(variable, rank)
        phases._print_at_exit()
        assert capfd.readouterr().err.startswith(f"phases of rank {rank} (pid {os.getpid()})"), variable
