"""The test run's closing lines: skips are summarised one line per missing extra (conftest.py), not one per test."""

import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import skip_group


def test_a_missing_optional_package_is_named_with_the_extra_that_installs_it():
    for reason in ("could not import 'torch': No module named 'torch'",
                   'PyTorch is missing: pip install -e ".[parity]"',
                   "could not import 'transformers.models': No module named 'transformers'"):
        assert skip_group(reason) == ('need the optional [parity] extra (torch is not installed): pip install -e ".[parity]"'
                                      if "ransformers" not in reason else
                                      'need the optional [parity] extra (transformers is not installed): '
                                      'pip install -e ".[parity]"'), reason
    assert "[nbgrader]" in skip_group("nbgrader is not installed (pip install -e '.[nbgrader]')")
    assert skip_group("could not import 'nosuchthing': No module named 'nosuchthing'") == \
        "need nosuchthing, which is not installed"
    assert skip_group("root reads any file") == "root reads any file"


def test_many_skips_for_one_missing_package_make_one_line(tmp_path):
    for name in ("conftest.py", "_tiers.py"):                  # the conftest and the module it calls
        (tmp_path / name).write_text((Path(__file__).parent / name).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "test_many.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.parametrize("i", range(5))
        def test_needs_it(i):
            pytest.importorskip("nosuchthing_xyz")

        def test_other():
            pytest.skip("a reason of its own")
    """), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, encoding="utf-8")
    lines = done.stdout.splitlines()
    assert "5 skipped: need nosuchthing_xyz, which is not installed" in lines, done.stdout
    assert "1 skipped: a reason of its own" in lines, done.stdout
    assert not any(line.startswith("SKIPPED") for line in lines), done.stdout
