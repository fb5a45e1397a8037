"""Where a training step's time goes: one stopwatch of laps, off unless asked.

A step is cut into phases by laps: each `lap(phase)` adds the time since the previous lap (or since `begin`)
to that phase, so the phases of a step add up to the step by construction (nothing between two laps is
lost, nothing counted twice). Wall time (`time.perf_counter`) and this process's CPU time
(`time.process_time`, which under load tells computing from waiting) are kept side by side.

Where the laps are (the one loop, the one step, the data-parallel hook):

    batch          the learning rate and the next batch               training/loop.py
    forward        objective.forward                                   training/step.py
    backward       objective.backward                                  training/step.py
    control        the step's first message (loss, stop flag): the wait for the slowest rank   distributed.py
    gradient       the gradient's collective (all-reduce, or reduce-scatter and the norm's)    distributed.py
    clip           the global norm and the clipping factor             step.py, distributed.py
    optimizer      the update                                          step.py, distributed.py
    all-gather     sharded only: the updated shards to every rank       distributed.py
    finite check   the loss and norm checked, the history appended     training/loop.py
    progress       the step's time kept, the progress bar              training/loop.py
    evaluation     evaluation, its line, the checkpoint (every eval_interval steps)   training/loop.py

Off (the default), a lap is a method call that tests one attribute (about 0.1 µs; a step has about 12). On: `with recording() as laps:` (a benchmark), or the
environment variable MINITRANSFORMER_PHASES=1, which makes every process print its table to stderr when it
exits (so `mpiexec -n 2 python -m minitransformer train` says where each rank's time went).

Left out: nested phases, per-layer times (a profiler's job: python -m cProfile).
"""

import atexit
import contextlib
import os
import sys
import time


class Laps:
    """The phases' totals of one process (module docstring).

    Attributes:
        enabled: whether `lap` records (False by default).
        wall, cpu: {phase: seconds}, summed over the steps recorded.
        steps: steps recorded; step_wall, step_cpu: their whole time, each from `begin` to its last lap.
    """

    def __init__(self):
        self.enabled = False
        self.reset()

    def reset(self):
        self.wall, self.cpu, self.steps, self.step_wall, self.step_cpu = {}, {}, 0, 0.0, 0.0
        self.mark = self.started = None

    def begin(self):
        """A step starts (the one before ends at its last lap): the first lap counts from here."""
        if self.enabled:
            self._close()
            self.mark = self.started = (time.perf_counter(), time.process_time())

    def lap(self, phase):
        """Add the time since the last lap (or `begin`) to `phase`."""
        if self.enabled and self.mark is not None:
            now = (time.perf_counter(), time.process_time())
            self.wall[phase] = self.wall.get(phase, 0.0) + now[0] - self.mark[0]
            self.cpu[phase] = self.cpu.get(phase, 0.0) + now[1] - self.mark[1]
            self.mark = now

    def _close(self):
        """Count the step under way, from `begin` to its last lap (what follows it is no step's)."""
        if self.started is not None and self.mark is not self.started:
            self.steps += 1
            self.step_wall += self.mark[0] - self.started[0]
            self.step_cpu += self.mark[1] - self.started[1]
        self.mark = self.started = None

    def table(self, title):
        """Lines: each phase's mean wall and CPU ms per step and its share of the step, then the step's."""
        self._close()
        steps = max(self.steps, 1)
        lines = [f"{title}: {self.steps} steps, mean ms per step (wall / CPU of this process), share of the step"]
        for phase, seconds in self.wall.items():
            lines.append(f"  {phase:<13} {1e3 * seconds / steps:7.2f} / {1e3 * self.cpu[phase] / steps:7.2f}"
                         f"   {seconds / max(self.step_wall, 1e-12):6.1%}")
        lines.append(f"  {'step':<13} {1e3 * self.step_wall / steps:7.2f} / {1e3 * self.step_cpu / steps:7.2f}")
        return lines


laps = Laps()           # the process's one stopwatch: the loop, the step and the hook lap on it


@contextlib.contextmanager
def recording():
    """Record the phases inside the block (from zero); yields `laps`, switched off again after."""
    laps.reset()
    laps.enabled = True
    try:
        yield laps
    finally:
        laps.enabled = False


def _print_at_exit():
    rank = next((os.environ[name] for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK") if name in os.environ), "0")
    print("\n".join(laps.table(f"phases of rank {rank} (pid {os.getpid()})")), file=sys.__stderr__, flush=True)


if os.environ.get("MINITRANSFORMER_PHASES") == "1":
    laps.enabled = True
    atexit.register(_print_at_exit)
