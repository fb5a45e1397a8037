"""Shared test settings: hypothesis profiles sized for a 2-core CI machine, and what a student copy needs.

A student copy (`python -m minitransformer exercises make`) runs this same suite on the student's
package. There a test can meet two kinds of NotImplementedError:

* a hint, "Exercise layernorm.forward: write the missing code ...": the student's work is missing.
  The test fails with one line naming the exercise and how to check it, not a traceback; a test
  module that needs the exercise already at import fails as one item instead of stopping the run.
* "Left out of this student copy: ...": a layer or fast form that repeats an assigned answer was
  left out of the copy. The test is skipped, saying so, as is a module importing a left-out file.

Each exercise has a marker (`pytest -m layernorm`), registered from the exercise catalogue; the
marked tests are the self-checks of `tests/test_exercise_markers.py`. The two hooks act only in a
student copy (an `exercises.json` beside `tests/`); in the reference tree they change nothing.

The quick run and the full one (`python -m pytest`, `python -m pytest --full`), and the whole suite
spread over the cores: tests/_tiers.py, called from the hooks below.
"""

import json
import os
import re
from pathlib import Path

import _tiers
import pytest
from hypothesis import settings

settings.register_profile("default", max_examples=40, deadline=None)
settings.load_profile("default")

# The tests read what a Python they start prints as UTF-8; on Windows that Python writes a pipe in the locale's code
# page (cp1252) unless told, so every child is told (python -m minitransformer writes UTF-8 anyway: __main__.py;
# tests/test_other_systems.py runs it without this, in an ASCII locale).
os.environ["PYTHONIOENCODING"] = "utf-8"

LEFT_OUT = "Left out of this student copy"          # minitransformer.exercises.leaks.LEFT_OUT
_HINT = re.compile(r"Exercise (?P<name>[a-z_]+\.[a-z_]+)(?:: write the missing code(?: in (?P<where>\S+))?)?")
_MANIFEST = Path(__file__).resolve().parent.parent / "exercises.json"
IN_A_STUDENT_COPY = _MANIFEST.is_file()


def pytest_addoption(parser):
    _tiers.add_option(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    _tiers.spread_over_the_cores(config)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    _tiers.leave_out_the_slow_tiers(config, items)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _tiers.take_a_workers_count(node.config, getattr(node, "workeroutput", {}))


def pytest_configure(config):
    _tiers.register(config)
    from minitransformer.exercises.catalogue import EXERCISES

    for exercise in EXERCISES:
        config.addinivalue_line("markers", f"{exercise.name}: the self-check of exercise {exercise.name} "
                                           f"(forward against shipped outputs, backward against finite differences)")


def _chain(error):
    """An exception and those it was raised from or while handling (a doctest keeps its error in exc_info)."""
    seen = []
    while error is not None and error not in seen:
        seen.append(error)
        inner = getattr(error, "exc_info", None)
        error = error.__cause__ or error.__context__ or (inner[1] if isinstance(inner, tuple) else None)
    return seen


def _texts(error):
    return [f"{type(e).__name__}: {e}" for e in _chain(error)]


def _left_out_error(error):
    """The LEFT_OUT message of a NotImplementedError in the chain, or None."""
    return next((str(e).splitlines()[0] for e in _chain(error)
                 if isinstance(e, NotImplementedError) and str(e).startswith(LEFT_OUT)), None)


def _needs_exercise(text):
    """The one-line failure for a hint found in `text`, or None."""
    match = _HINT.search(text)
    if not match:
        return None
    name = match.group("name")
    where = f" ({match.group('where')})" if match.group("where") else ""
    exercise = name.split(".")[0]
    return (f"needs exercise {name}{where}, not written yet: see README.md; check it with "
            f"`python -m minitransformer exercises check {exercise}` or `pytest -m {exercise}`")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not IN_A_STUDENT_COPY or call.excinfo is None or not report.failed:
        return
    error = call.excinfo.value
    left_out = _left_out_error(error)
    if left_out:
        report.outcome, report.longrepr = "skipped", (str(item.path), item.location[1] or 0, f"Skipped: {left_out}")
        return
    hint = next((e for e in _chain(error) if isinstance(e, NotImplementedError) and _HINT.search(str(e))), None)
    if hint:                                  # the hint itself: one line says it all
        report.longrepr = f"{item.nodeid}: {_needs_exercise(str(hint))}"
        return
    needs = _needs_exercise("\n".join(_texts(error) + [content for _, content in report.sections]))
    if needs:                     # another failure (a worker's error, an exit code) whose text names an unwritten one
        report.longrepr = f"{item.nodeid}: {needs} (the test's output says so)\n\n{report.longrepr}"


class _NeedsExercise(pytest.Item):
    """Stands for a test module that could not be imported because it runs an unwritten exercise."""

    def __init__(self, *, message, **kwargs):
        super().__init__(**kwargs)
        self.message = message

    def runtest(self):
        raise NotImplementedError(self.message)

    def repr_failure(self, excinfo):
        return f"{self.nodeid}: {self.message} (the module runs it when imported)"

    def reportinfo(self):
        return self.path, None, self.name


def _left_out_modules():
    """Dotted module names of the files `exercises make` left out of this copy (none in the reference)."""
    if not _MANIFEST.is_file():
        return set()
    paths = [entry["path"] for entry in json.loads(_MANIFEST.read_text(encoding="utf-8")).get("left_out", [])]
    return {path[:-3].replace("/", ".") for path in paths if path.endswith(".py") and path.startswith("minitransformer/")}


class _StudentCopyModule(pytest.Module):
    """A test module that fails as one item when its import needs an exercise, and skips when it needs a left-out file."""

    def collect(self):
        try:
            self.obj
        except NotImplementedError as error:
            if _left_out_error(error):
                pytest.skip(_left_out_error(error), allow_module_level=True)
            needs = _needs_exercise(str(error))
            if needs is None:
                raise
            return [_NeedsExercise.from_parent(self, name=needs.split(",")[0], message=needs)]
        except self.CollectError as error:
            missing = getattr(error.__cause__, "name", None)
            if isinstance(error.__cause__, ModuleNotFoundError) and missing in _left_out_modules():
                pytest.skip(f"{LEFT_OUT}: {missing} (it would give an assigned answer away)", allow_module_level=True)
            raise
        return super().collect()


def pytest_pycollect_makemodule(module_path, parent):
    if IN_A_STUDENT_COPY:
        return _StudentCopyModule.from_parent(parent, path=module_path)
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_collect_file(file_path, parent):
    """No doctest collector for the test modules (they hold no doctests; it would import each one twice)."""
    outcome = yield
    if Path(__file__).resolve().parent in Path(file_path).resolve().parents:
        outcome.force_result([node for node in outcome.get_result() if type(node).__name__ != "DoctestModule"])


# ---------------------------------------------------------------- skips: one line per missing extra, not one per test

EXTRA_OF_MODULE = {"torch": "parity", "transformers": "parity", "safetensors": "parity", "nbgrader": "nbgrader",
                   "mpi4py": "mpi", "tiktoken": "gpt2", "playwright": "docs", "mkdocs": "docs"}
_MISSING_MODULE = re.compile(r"could not import '(?P<module>[\w.]+)'|(?P<name>PyTorch|nbgrader|mpi4py) is (?:missing|not installed)")


def skip_group(reason):
    """What a skip's reason has in common with others: "needs the [parity] extra" for a missing optional package,
    else the reason itself."""
    match = _MISSING_MODULE.search(reason)
    if match:
        module = (match.group("module") or match.group("name")).split(".")[0]
        module = {"PyTorch": "torch"}.get(module, module)
        extra = EXTRA_OF_MODULE.get(module)
        if extra:
            return f"need the optional [{extra}] extra ({module} is not installed): pip install -e \".[{extra}]\""
        return f"need {module}, which is not installed"
    return reason


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter):
    """After the run (after pytest's own summaries): the skipped tests, one line per reason; last, what the quick
    run left out."""
    _skips_by_reason(terminalreporter)
    _tiers.summary(terminalreporter)


def _skips_by_reason(terminalreporter):
    """The skipped tests as one line per reason (pytest's -rs lists every test; ask for it by hand)."""
    groups = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        groups.setdefault(skip_group(reason), []).append(report)
    if not groups:
        return
    terminalreporter.section("skipped (one line per reason; pytest -rs lists each test)", sep="-")
    for reason, reports in sorted(groups.items(), key=lambda item: -len(item[1])):
        terminalreporter.write_line(f"{len(reports)} skipped: {reason}")


@pytest.fixture()
def text_file(tmp_path):
    """A small training text on disk (the `train` command's tests): test_checkpoint.TEXT."""
    from test_checkpoint import TEXT

    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path
