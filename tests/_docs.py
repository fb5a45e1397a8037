"""What the documentation tests share: they check the reference's README, guide and benchmarks, which a student
copy (`exercises make`) does not have, so there they skip, saying why."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def skip_in_a_student_copy():
    """Skip the calling test module where docs/guide/ is absent (a student copy)."""
    if not (ROOT / "docs" / "guide").is_dir():
        pytest.skip("a student copy has no docs/guide/: the documentation is checked in the reference",
                    allow_module_level=True)


def copy_for_the_lists(target):
    """Copy into `target` what docs/gen_lists.py reads (the package, the guide, the notebooks, the tests' names,
    benchmarks/README.md, setup.cfg), for a test to break it there; returns `target`."""
    import shutil

    shutil.copytree(ROOT / "minitransformer", target / "minitransformer", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "docs" / "guide", target / "docs" / "guide")
    for folder, pattern in (("notebooks", "*.ipynb"), ("tests", "test_*.py"), ("benchmarks", "README.md")):
        (target / folder).mkdir(parents=True, exist_ok=True)
        for path in (ROOT / folder).glob(pattern):
            shutil.copy(path, target / folder / path.name)
    shutil.copy(ROOT / "setup.cfg", target / "setup.cfg")
    return target
