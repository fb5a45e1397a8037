"""The pinning sweep's list (tools/pin_sweep.py) stays true to the code: each fragment it changes occurs exactly
once in its file, each change changes something and leaves Python that compiles, and each test it runs exists. Nothing is mutated here."""

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "pin_sweep.py"
if not SCRIPT.is_file():                                    # a student copy ships no tools/
    pytest.skip("tools/pin_sweep.py is not in this copy", allow_module_level=True)
spec = importlib.util.spec_from_file_location("pin_sweep", SCRIPT)
pin_sweep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pin_sweep)


def test_every_fragment_occurs_exactly_once_in_its_file():
    stale = []
    for mutation in pin_sweep.MUTATIONS:
        try:
            pin_sweep.line_of(mutation)
        except (ValueError, FileNotFoundError) as error:
            stale.append(str(error))
    assert not stale, "tools/pin_sweep.py names fragments the code no longer has (update the list):\n" + "\n".join(stale)


def test_every_change_changes_something_and_is_listed_once():
    same = [m for m in pin_sweep.MUTATIONS if m.original == m.replacement]
    assert not same, f"mutations that change nothing: {same}"
    keys = [(m.file, m.original, m.replacement) for m in pin_sweep.MUTATIONS]
    assert len(keys) == len(set(keys)), "a mutation is listed twice"


def test_every_changed_file_still_compiles():
    """A change that breaks the file's syntax is no plausible bug, and every test fails on it: the sweep would count
    it as caught. Each change must leave Python that compiles."""
    broken, sources = [], {}
    for mutation in pin_sweep.MUTATIONS:
        if not mutation.file.endswith(".py"):
            continue
        if mutation.file not in sources:
            sources[mutation.file] = (ROOT / mutation.file).read_text(encoding="utf-8")
        text = sources[mutation.file].replace(mutation.original, mutation.replacement)
        try:
            compile(text, mutation.file, "exec")
        except SyntaxError as error:
            broken.append(f"{mutation.file}:{error.lineno}: {mutation.original!r} -> {mutation.replacement!r}: {error.msg}")
    assert not broken, "changes that do not compile (no test can be said to catch them):\n" + "\n".join(broken)


def test_every_test_the_sweep_runs_exists():
    missing = set()
    for mutation in pin_sweep.MUTATIONS:
        assert mutation.tests, f"{mutation.file}: {mutation.original!r} names no test"
        for test in mutation.tests:
            path = ROOT / pin_sweep.test_path(test)
            name = test.split("::")[1] if "::" in test else None          # a node id, or one deselected
            if not path.is_file() or (name and f"def {name.split('[')[0]}(" not in path.read_text(encoding="utf-8")):
                missing.add(test)
    assert not missing, f"tools/pin_sweep.py runs tests that do not exist: {sorted(missing)}"


def test_a_fragment_that_drifted_is_named(tmp_path):
    """The check above fails when the code changes under the list: here on a copy whose line was edited."""
    mutation = pin_sweep.MUTATIONS[0]
    copy = tmp_path / mutation.file
    copy.parent.mkdir(parents=True)
    shutil.copy(ROOT / mutation.file, copy)
    assert pin_sweep.line_of(mutation, root=tmp_path) == pin_sweep.line_of(mutation)
    copy.write_text(copy.read_text(encoding="utf-8").replace(mutation.original, "drifted"), encoding="utf-8")
    with pytest.raises(ValueError, match=r"occurs 0 times \(expected once\)"):
        pin_sweep.line_of(mutation, root=tmp_path)
    copy.write_text(mutation.original + "\n" + mutation.original + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="occurs 2 times"):
        pin_sweep.line_of(mutation, root=tmp_path)
