"""The quick run and the full one (tests/_tiers.py): `python -m pytest` leaves the slow tiers out and its last lines
count them and say how to run them; `python -m pytest --full` runs every test; the quick run of the whole suite is
spread over the cores, the full run and a run given paths stay in one process.

Each run here is a pytest of its own on a small suite in a temporary folder, with this suite's conftest.py and
_tiers.py, so what it asserts is what a student sees at the end of `python -m pytest`.
"""

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import _tiers
import pytest

from minitransformer.exercises.catalogue import EXERCISES

HERE = Path(__file__).resolve().parent
SUITE = {
    "test_plain.py": """
        def test_one():
            pass

        def test_two():
            pass
    """,
    "test_slow.py": """
        import pytest

        @pytest.mark.notebooks
        def test_a_notebook():
            pass

        @pytest.mark.parametrize("mode", ["directions", pytest.param("coordinates", marks=pytest.mark.coordinates)])
        @pytest.mark.parametrize("case", [1, 2])
        def test_a_gradient(case, mode):
            pass
    """,
}


def _suite(tmp_path):
    (tmp_path / "tests").mkdir()
    for name in ("conftest.py", "_tiers.py"):
        (tmp_path / "tests" / name).write_text((HERE / name).read_text(encoding="utf-8"), encoding="utf-8")
    for name, text in SUITE.items():
        (tmp_path / "tests" / name).write_text(textwrap.dedent(text), encoding="utf-8")
    (tmp_path / "setup.cfg").write_text("[tool:pytest]\ntestpaths = tests\n", encoding="utf-8")
    return tmp_path


def _pytest(folder, *args):
    """`python -m pytest -p no:cacheprovider ARGS` in `folder`, as a user starts it (not as a worker's child)."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "PYTHONPATH"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=folder,
                          capture_output=True, text=True, env=environment, timeout=600, encoding="utf-8")
    return done.returncode, done.stdout.splitlines()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: the suite runs in one process")
def test_the_quick_run_spreads_over_the_cores_leaves_the_tiers_out_and_ends_by_saying_so(tmp_path):
    folder = _suite(tmp_path)
    code, lines = _pytest(folder)
    assert code == 0, "\n".join(lines)
    assert any(line.startswith("created: ") and "workers" in line for line in lines), "\n".join(lines)
    assert lines[-5:-1] == [                                 # the last lines, above pytest's own closing line
        next(line for line in lines if "left out of this quick run: 3 tests of the slow tiers" in line),
        f"    2 coordinates: {_tiers.TIERS['coordinates']}",
        f"    1 notebooks: {_tiers.TIERS['notebooks']}",
        "python -m pytest --full runs every test (one tier: python -m pytest --full -m coordinates)"], lines[-6:]
    assert " 4 passed in " in lines[-1], lines[-1]              # 2 plain, 2 gradients along random directions


def test_the_full_run_runs_every_test_in_one_process_and_so_does_a_run_given_paths(tmp_path):
    folder = _suite(tmp_path)
    code, lines = _pytest(folder, "--full")
    assert code == 0, "\n".join(lines)
    assert not any("workers" in line for line in lines) and not any("left out" in line for line in lines), lines
    assert " 7 passed in " in lines[-1], lines[-1]
    code, lines = _pytest(folder, "tests/test_slow.py")
    assert code == 0 and not any("workers" in line for line in lines), "\n".join(lines)
    assert lines[-2] == "python -m pytest --full runs every test (one tier: python -m pytest --full -m coordinates)"
    assert " 2 passed, 3 deselected in " in lines[-1], lines[-1]


def test_every_marker_the_suite_uses_is_registered_and_every_tier_has_tests():
    """A misspelt tier (`@pytest.mark.notebook`) would put a slow test back into the quick run, silently."""
    builtin = {"parametrize", "skipif", "skip", "xfail", "usefixtures", "filterwarnings"}
    known = builtin | set(_tiers.TIERS) | {exercise.name for exercise in EXERCISES}
    used = {}
    for path in sorted(HERE.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
                    and isinstance(node.value.value, ast.Name) and node.value.value.id == "pytest"):
                used.setdefault(node.attr, set()).add(path.name)
    unknown = {name: sorted(files) for name, files in used.items() if name not in known}
    assert not unknown, f"markers neither pytest's, a tier ({', '.join(_tiers.TIERS)}) nor an exercise's: {unknown}"
    assert not set(_tiers.TIERS) - set(used), f"tiers no test uses: {sorted(set(_tiers.TIERS) - set(used))}"
