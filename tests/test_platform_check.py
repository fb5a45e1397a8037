"""The code as a type checker set to macOS and to Windows reads it: nothing it calls is missing there.

A function Linux has and macOS or Windows lacks (os.sched_getaffinity, os.fork, os.geteuid, signal.SIGKILL,
resource.getrusage ...) ends a command there with an AttributeError. basedpyright (the test extra; it brings its own
Node.js) reads the package, tests, tools, benchmarks, docs scripts and notebook sources as Python on macOS and on
Windows, and this test fails, naming file:line, where it finds an attribute missing from a module (or a name
missing from a `from` import, or a name possibly unbound) outside the grading sandbox's two modules, which may stay
Linux-only. A `sys.platform` check is read by the checker (the code under `if sys.platform == "linux":` is not read
for Windows); `hasattr` and `try/except AttributeError` are not.

Linux-only too: a test module that skips itself off Linux right after its imports (`if sys.platform != "linux":
pytest.skip(..., allow_module_level=True)`, the grading sandbox's tests), which no other system runs further; the
checker does not take the call for the module's end, so it is named here.

Two runs, at once: macOS at the oldest Python the CI workflow tests (setup.cfg's floor, 3.10) and Windows at the
newest, so that each system and each end of the range is read once (an attribute new in 3.11 fails the first, one
removed by the newest Python the second). Of the installed packages the checker reads only pytest (so that it knows
`pytest.skip` ends a test); NumPy and the others are left out: their types say nothing of the systems, and reading
them took half again as long. What the checker cannot see, a name bound only under a platform check and used
outside it, the runs of tests/test_other_systems.py find.
"""

import ast
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
pytestmark = pytest.mark.skipif(not WORKFLOW.is_file(), reason="no .github/workflows/ci.yml here (a student copy): checked in the repository")
CHECKED = ["minitransformer", "tests", "tools", "benchmarks", "docs", "notebooks/_src"]
LINUX_ONLY = {"minitransformer/exercises/runner.py", "minitransformer/exercises/isolation.py"}   # the grading sandbox
MISSING = ("is not a known attribute of module", "is unknown import symbol", "is possibly unbound")


def workflow_pythons():
    """The oldest and the newest Python of the CI workflow's matrix (.github/workflows/ci.yml)."""
    versions = re.search(r"python-version: \[([^\]]*)\]", WORKFLOW.read_text(encoding="utf-8")).group(1)
    versions = sorted((part.strip().strip("\"'") for part in versions.split(",")), key=lambda v: tuple(map(int, v.split("."))))
    return versions[0], versions[-1]


def runs():
    oldest, newest = workflow_pythons()
    return {"Darwin": oldest, "Windows": newest}


def skips_itself_off_linux(path):
    """True when the module at `path` begins, after its imports, with `if sys.platform != "linux": pytest.skip(...,
    allow_module_level=True)`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    first = next((node for node in tree.body if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr))), None)
    return (isinstance(first, ast.If) and ast.unparse(first.test) == "sys.platform != 'linux'"
            and "allow_module_level=True" in ast.unparse(first.body[0]) and "pytest.skip(" in ast.unparse(first.body[0]))


def linux_only():
    """The files whose missing attributes do not count: the grading sandbox's and the tests that skip off Linux."""
    return LINUX_ONLY | {path.relative_to(ROOT).as_posix() for path in (ROOT / "tests").glob("test_*.py")
                         if skips_itself_off_linux(path)}


def _config(directory, platform, version):
    """A basedpyright configuration reading CHECKED as Python `version` on `platform`, with pytest as the only
    installed package (copied into `directory`: where pytest is, NumPy and the others are too)."""
    empty = directory / "no-packages"
    for site in ("lib/python3/site-packages", "Lib/site-packages"):    # the layouts it looks for, POSIX and Windows
        (empty / site).mkdir(parents=True, exist_ok=True)
    packages = directory / "pytest-only"
    if not packages.is_dir():
        for name in ("pytest", "_pytest"):
            shutil.copytree(Path(importlib.util.find_spec(name).origin).parent, packages / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
    config = {"include": [str(ROOT / part) for part in CHECKED],
              "exclude": [str(ROOT / path) for path in sorted(linux_only())], "extraPaths": [str(packages)],
              "pythonPlatform": platform, "pythonVersion": version, "venvPath": str(directory), "venv": empty.name,
              "typeCheckingMode": "off", "reportAttributeAccessIssue": "error", "reportPossiblyUnboundVariable": "error"}
    path = directory / f"{platform}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def diagnostics(directory):
    """{platform: basedpyright's diagnostics of CHECKED on it}, the runs side by side (a core each)."""
    if importlib.util.find_spec("basedpyright") is None:
        pytest.skip("basedpyright is not installed (pip install -e '.[test]')")
    started = {platform: subprocess.Popen([sys.executable, "-m", "basedpyright", "--outputjson", "-p",
                                           str(_config(directory, platform, version))], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, encoding="utf-8")
               for platform, version in runs().items()}
    ended = {platform: (process, *process.communicate(timeout=600)) for platform, process in started.items()}
    found = {}
    for platform, (process, out, err) in ended.items():
        if process.returncode in (3, 4):                         # our configuration or command line: a failure
            pytest.fail(f"basedpyright refused its configuration (exit status {process.returncode}): {err}{out}")
        try:
            found[platform] = json.loads(out)["generalDiagnostics"]
        except (ValueError, KeyError):                           # no report: it did not start (e.g. no Node.js)
            last = (err.strip().splitlines() or out.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"basedpyright could not start here (exit status {process.returncode}): {last}")
    return found


def missing_attributes(diagnostics):
    """'file:line: message' of each attribute, import or binding a system lacks, outside the grading sandbox."""
    lines, excluded = [], linux_only()
    for diagnostic in diagnostics:
        path = Path(diagnostic["file"]).resolve().relative_to(ROOT).as_posix()
        message = diagnostic["message"].splitlines()[0]
        if path not in excluded and any(phrase in message for phrase in MISSING):
            lines.append(f"{path}:{diagnostic['range']['start']['line'] + 1}: {message} ({diagnostic.get('rule')})")
    return lines


def test_nothing_the_code_calls_is_missing_on_macos_or_windows(tmp_path):
    """One test for both runs, so that they start together (and once, however the tests are shared out)."""
    found = diagnostics(tmp_path)
    missing = {platform: missing_attributes(found[platform]) for platform in found}
    assert not any(missing.values()), "\n".join(
        f"{len(lines)} missing on {platform} at Python {runs()[platform]} (guard each with `if sys.platform ...`, "
        "which type checkers read):\n" + "\n".join(lines) for platform, lines in missing.items() if lines)


def test_the_check_reads_the_oldest_and_the_newest_python_that_setup_cfg_allows():
    floor = re.search(r"python_requires = >=(\S+)", (ROOT / "setup.cfg").read_text(encoding="utf-8")).group(1)
    oldest, newest = workflow_pythons()
    assert oldest == floor and tuple(map(int, newest.split("."))) > tuple(map(int, oldest.split(".")))
