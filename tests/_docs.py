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
