"""Where a training step's time goes: one stopwatch of laps, off unless asked.

A step is cut into phases by laps: each `lap(phase)` adds the time since the previous lap (or since `begin`)
to that phase, so the phases of a step add up to the step by construction (nothing between two laps is
lost, nothing counted twice). Wall time (`time.perf_counter`) and this process's CPU time
(`time.process_time`, which under load tells computing from waiting) are kept side by side.

The step itself (step.py) knows nothing of the timer: while it records, the loop's harness hands `train_step`
the objective and the optimizer wrapped (`laps.around`), so that their forward, backward, clip and update
each lap their phase when they return. Where the laps are (the loop's harness, those wrappers, the
data-parallel hook):

    batch          the learning rate and the next batch (since the step before)   training/harness.py
    forward        objective.forward                                   laps.around
    backward       objective.backward                                  laps.around
    control        the step's first message (loss, stop flag): the wait for the slowest rank   distributed.py
    gradient       the gradient's collective (all-reduce, or reduce-scatter and the norm's)    distributed.py
    clip           the global norm and the clipping factor (a step that clips)   laps.around, distributed.py
    optimizer      the update                                          laps.around, distributed.py
    all-gather     sharded only: the updated shards to every rank       distributed.py
    finite check   the loss and the gradient norm checked               training/harness.py
    progress       the history kept, the step's time, the progress bar  training/harness.py
    evaluation     evaluation, its line, the checkpoint (every eval_interval steps)   training/harness.py

Off (the default), the timer costs a step of `fit` five method calls that each test one attribute (three in
the harness's `take_step`, two between steps), and `train_step` nothing. On: `with recording() as laps:` (a
benchmark), or the environment variable MINITRANSFORMER_PHASES=1, which makes every process print its table
to stderr when it exits (so `mpiexec -n 2 python -m minitransformer train` says where each rank's time went).

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

    def next_step(self, phase):
        """A step whose first phase, `phase`, ran since the last lap: the step under way closes at that lap and
        this one starts there (so the time between two steps is the next one's), then `phase` is lapped."""
        if self.enabled:
            if self.mark is None:
                self.mark = self.started = (time.perf_counter(), time.process_time())
            elif self.mark is not self.started:
                last = self.mark
                self._close()
                self.mark = self.started = last
            self.lap(phase)

    def around(self, objective, optimizer):
        """(objective, optimizer) for `train_step`: as they are; while the timer records, wrapped so that the
        objective's forward and backward and the optimizer's clip_gradients and step lap their phases."""
        if not self.enabled:
            return objective, optimizer
        return (Lapping(objective, {"forward": "forward", "backward": "backward"}),
                Lapping(optimizer, {"clip_gradients": "clip", "step": "optimizer"}))

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


class Lapping:
    """`target` as it is, but for its methods named in `phases` ({method: phase}), which lap their phase when they
    return; every other attribute is read from and set on `target` (e.g. the optimizer's lr)."""

    def __init__(self, target, phases):
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "phases", phases)

    def __getattr__(self, name):
        value = getattr(self.target, name)
        if name not in self.phases:
            return value

        def lapped(*args, **kwargs):
            result = value(*args, **kwargs)
            laps.lap(self.phases[name])
            return result
        return lapped

    def __setattr__(self, name, value):
        setattr(self.target, name, value)


laps = Laps()           # the process's one stopwatch: the loop's harness, the wrapped step and the hook lap on it


@contextlib.contextmanager
def recording():
    """Record the phases inside the block (from zero, the first step's from the block's start); yields `laps`,
    switched off again after."""
    laps.reset()
    laps.enabled = True
    laps.begin()
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
