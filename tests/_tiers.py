"""The quick run and the full one: `python -m pytest` leaves the slow tiers out, `python -m pytest --full` runs them.

A test of a slow tier carries the tier's marker (`@pytest.mark.notebooks`, or `pytestmark = pytest.mark.sandbox`
for a whole module); TIERS says what each holds. The quick run deselects them and its last lines count them per
tier and say how to run them; nothing else differs, so every check of the suite runs in the full run (and in
`.ci/run`'s second pass). One tier alone: `python -m pytest --full -m notebooks`.

The quick run of the whole suite (no paths, no -k, no -m given) is spread over every core by pytest-xdist (the
test extra brings it; `-n auto`). The full run stays in one process: its slow tiers want the machine to
themselves (the grader's `nobody` processes share one RLIMIT_NPROC, and the sandbox's tests fork up to it; MPI's
ranks busy-wait on the cores; some wait for timeouts). So does a run given paths, -k or -m (`-n auto` spreads
one; `-n 0` keeps the quick run in one process). Why not spread the full run and keep those tiers' tests on one
worker (`--dist loadgroup`)? Because under pytest 9.2, pytest-xdist 3.8 was seen here to send the tests of one
`xdist_group` to both workers (it marks a group by renaming node ids, which pytest 9 builds another way).

conftest.py calls the functions here from its hooks.
"""

import os

import pytest

TIERS = {   # marker: what its tests do; the quick run leaves them out
    "notebooks": "notebook executions (a Jupyter kernel each)",
    "mpi": "runs of several ranks under mpiexec",
    "site": "the course website, built and opened in a browser",
    "sandbox": "the grading sandbox's attacks and limits, and classes graded at once",
    "training": "long training runs",
    "coordinates": "gradient checks of every coordinate (the quick run checks each along random directions)",
}
FULL = "--full"

_LEFT_OUT = pytest.StashKey[dict]()


def add_option(parser):
    parser.addoption(FULL, action="store_true",
                     help=f"run every test, also the slow tiers that the quick run leaves out ({', '.join(TIERS)})")


def register(config):
    for tier, what in TIERS.items():
        config.addinivalue_line("markers", f"{tier}: a slow tier, run by `python -m pytest {FULL}`: {what}")


def spread_over_the_cores(config):
    """Run the quick run of the whole suite on every core (pytest-xdist's `-n auto`) when nothing narrows it and the
    user chose no number of processes; called before xdist reads its options."""
    named = getattr(getattr(pytest.Config, "ArgsSource", None), "ARGS", None)       # pytest >= 7.2 tells
    quick_whole_suite = (named is not None and config.args_source != named and not config.getoption(FULL)
                         and not config.option.keyword and not config.option.markexpr)
    if (config.pluginmanager.hasplugin("xdist") and getattr(config.option, "numprocesses", 0) is None
            and quick_whole_suite and not config.option.collectonly and not config.option.usepdb
            and "PYTEST_XDIST_WORKER" not in os.environ and (os.cpu_count() or 1) > 1):
        config.option.numprocesses = "auto"


def _tiers_of(item):
    return [tier for tier in TIERS if item.get_closest_marker(tier)]


def leave_out_the_slow_tiers(config, items):
    """Unless --full, deselect every test of a tier and count them per tier (a worker of a parallel run hands its
    counts to the main process, which prints them)."""
    if config.getoption(FULL):
        return
    left_out, kept = {}, []
    for item in items:
        tiers = _tiers_of(item)
        if tiers:
            left_out[tiers[0]] = left_out.get(tiers[0], 0) + 1
        else:
            kept.append(item)
    if left_out:
        config.hook.pytest_deselected(items=[item for item in items if _tiers_of(item)])
        items[:] = kept
    config.stash[_LEFT_OUT] = left_out
    if hasattr(config, "workeroutput"):
        config.workeroutput["left_out"] = left_out


def take_a_workers_count(config, workeroutput):
    """Every worker collects the same tests and leaves out the same ones: any one's count is the run's."""
    if "left_out" in workeroutput:
        config.stash[_LEFT_OUT] = workeroutput["left_out"]


def summary(terminalreporter):
    """The quick run's last lines: how many tests of each tier it left out, and how to run them."""
    left_out = terminalreporter.config.stash.get(_LEFT_OUT, {})
    if not left_out:
        return
    total = sum(left_out.values())
    terminalreporter.section(f"left out of this quick run: {total} tests of the slow tiers", sep="-")
    for tier, count in sorted(left_out.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count:5d} {tier}: {TIERS[tier]}")
    terminalreporter.write_line(f"python -m pytest {FULL} runs every test (one tier: python -m pytest {FULL} "
                                f"-m {max(left_out, key=left_out.get)})")
