"""No tracker numbers in what a user reads: a user has no "issue 30" to look up, so the package, the README, the
guide and the site's sources, the notebooks (and their sources), the benchmarks and the packaging name the
feature instead. The CHANGELOG is history and is not read; the tests are not shipped to readers.
"""

import re
from pathlib import Path

import pytest
from _docs import skip_in_a_student_copy

ROOT = Path(__file__).resolve().parent.parent
skip_in_a_student_copy()
TRACKER = re.compile(r"\b[Ii]ssues?\s+#?\d+|\(#\d+\)|\bgh-\d+\b|\b[Ii]ssue\s+#\d+")
SCANNED = ("minitransformer/**/*", "docs/**/*", "notebooks/**/*", "benchmarks/**/*", "tools/**/*", "README.md",
           "CONTRIBUTING.md", "setup.cfg", "pyproject.toml")
SKIPPED_PARTS = {"node_modules", "_build", "__pycache__", ".ipynb_checkpoints"}
TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".cfg", ".toml", ".yml", ".yaml", ".sh", ".js", ".css", ".json", ".txt"}


def scanned_files(root=ROOT):
    for pattern in SCANNED:
        for path in sorted(root.glob(pattern)):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and not SKIPPED_PARTS & set(path.parts) \
                    and path.name != "package-lock.json":
                yield path


def tracker_numbers(root=ROOT):
    """Each "file:line: text" where a tracker number stands."""
    found = []
    for path in scanned_files(root):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in TRACKER.finditer(line):
                found.append(f"{path.relative_to(root)}:{number}: {match[0]!r} in {line.strip()[:100]}")
    return found


def test_no_tracker_numbers_in_what_users_read():
    found = tracker_numbers()
    assert not found, "name the feature, not the tracker's number:\n" + "\n".join(found)


def test_the_scan_covers_every_place_and_finds_each_form(tmp_path):
    assert {path.relative_to(ROOT).parts[0] for path in scanned_files()} >= {
        "minitransformer", "docs", "notebooks", "benchmarks", "README.md"}
    assert any("_src" in path.parts for path in scanned_files())            # the notebooks' sources too
    for planted in ("as issue 30 asked", "(issue 7)", "Issue 17's run", "issues 23 and 24", "see (#12)",
                    "issue #5", "gh-42"):
        (tmp_path / "notebooks").mkdir(exist_ok=True)
        (tmp_path / "notebooks" / "x.md").write_text(f"# A page\n\nText {planted}.\n", encoding="utf-8")
        assert tracker_numbers(tmp_path) == [f"notebooks/x.md:3: {TRACKER.search(planted)[0]!r} in Text {planted}."]
    for innocent in ("the issue's goal", "3 issues were found", "colour #3f51b5", "E7. The notes' formula"):
        (tmp_path / "notebooks" / "x.md").write_text(f"Text {innocent}.\n", encoding="utf-8")
        assert tracker_numbers(tmp_path) == [], innocent


@pytest.mark.parametrize("path", ["README.md", "minitransformer/__init__.py", "benchmarks/README.md"])
def test_the_places_the_report_named_are_scanned(path):
    assert ROOT / path in set(scanned_files())
