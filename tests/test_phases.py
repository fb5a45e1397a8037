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
