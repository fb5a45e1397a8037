"""A student copy made to derive (`exercises make --derive`): for every exercise of the catalogue, nothing of the
derivation of its backward pass stays (its docstrings' mathematics, its module's, those of the exercises that restate
it, the notebook cells that derive it, a hint that says the docstring gives it), and the copy's own tests still run:
they fail only where work is missing and pass once the answers are put back.

The lines looked for are read from the reference here, by the convention (a `Derivation:` line and the lines indented
below it; the notebook cells tagged `derives:`), not by the code that strips them; the formula scan of
tests/test_derivations.py then reads every docstring of the copy's exercise files whole.
"""

import json
import re

import pytest
from test_derivations import FORMULA
from test_student_copy import SELECTION, _junit, put_bodies, reference_bodies

from minitransformer.exercises.catalogue import EXERCISES
from minitransformer.exercises.derivations import NOTE, TAG, docstring_spans
from minitransformer.exercises.make import make_student_copy, reference_package
from minitransformer.exercises.regions import DERIVE_GUIDE, GUIDE, find_regions, package_regions

REFERENCE = reference_package()
REGIONS = package_regions(REFERENCE)
NOTEBOOKS = REFERENCE.parent / "notebooks"
WITH_BACKWARD = [e.name for e in EXERCISES if f"{e.name}.backward" in REGIONS]
SHORTEST = 12                                   # shorter lines (`$$`, `\end{aligned}`) say nothing on their own


def sections_and_rest(text):
    """(the stripped lines of a module's `Derivation:` sections, those of the rest of it)."""
    lines, inside = text.splitlines(), set()
    for index, line in enumerate(lines):
        if line.strip() == "Derivation:":
            indent = len(line) - len(line.lstrip())
            for later in range(index + 1, len(lines)):
                if lines[later].strip() and len(lines[later]) - len(lines[later].lstrip()) <= indent:
                    break
                inside.add(later)
    return {lines[i].strip() for i in inside}, {line.strip() for i, line in enumerate(lines) if i not in inside}


SHOWN = set().union(*(sections_and_rest(path.read_text(encoding="utf-8"))[1] for path in REFERENCE.rglob("*.py")))


def derivation_lines(relative):
    """The stripped lines, SHORTEST long or more, of the `Derivation:` sections of a file of the reference package,
    less those the package shows outside them too (`\\begin{aligned}`)."""
    return {line for line in sections_and_rest((REFERENCE / relative).read_text(encoding="utf-8"))[0]
            if len(line) >= SHORTEST and line not in SHOWN}


def tagged_lines(exercise):
    """(notebook, stripped line) of the reference's notebook cells tagged as deriving `exercise`."""
    found = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if f"{TAG}{exercise}" in cell.get("metadata", {}).get("tags", []):
                found += [(path.name, line.strip()) for line in "".join(cell["source"]).splitlines()
                          if len(line.strip()) >= SHORTEST]
    return found


def texts(root):
    """{where: text} of every text file of a copy, notebooks cell by cell."""
    found = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix not in (".npz", ".pyc")):
        where = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if path.suffix == ".ipynb":
            found.update({f"{where} cell {i}": "".join(c["source"]) for i, c in enumerate(json.loads(text)["cells"])})
        else:
            found[where] = text
    return found


@pytest.fixture(scope="module")
def derive_copy(tmp_path_factory):
    out = tmp_path_factory.mktemp("copies") / "derive"
    make_student_copy(out, notebooks=NOTEBOOKS.is_dir(), derive=True)
    return out


@pytest.fixture(scope="module")
def copy_texts(derive_copy):
    return texts(derive_copy)


@pytest.mark.parametrize("exercise", WITH_BACKWARD)
def test_no_line_of_an_assigned_derivation_stays_anywhere_in_the_copy(exercise, copy_texts):
    files = sorted({relative for name, (relative, _) in REGIONS.items() if name.split(".")[0] == exercise})
    lines = set().union(*(derivation_lines(relative) for relative in files))
    lines |= {line for _, line in tagged_lines(exercise)}
    assert lines or exercise not in ("layernorm", "attention", "crossentropy"), f"{exercise}: no derivation found"
    found = [f"{where}: {line}" for where, text in copy_texts.items() for line in lines if line in text]
    assert not found, f"the copy made to derive still shows the derivation of {exercise}:\n" + "\n".join(found[:20])


@pytest.mark.parametrize("relative", sorted({relative for relative, _ in REGIONS.values()}))
def test_no_docstring_of_an_exercise_file_in_the_copy_states_a_gradient(relative, derive_copy):
    text = (derive_copy / "minitransformer" / relative).read_text(encoding="utf-8")
    lines = text.splitlines()
    stated = [f"{relative}:{i + 1}: {lines[i].strip()}" for first, last in docstring_spans(text)
              for i in range(first, last + 1) if FORMULA.search(lines[i])]       # every docstring line, whole
    assert not stated, "a docstring of the copy made to derive still states a gradient:\n" + "\n".join(stated)
    assert NOTE in text


def test_the_hints_and_the_readme_no_longer_promise_the_mathematics(derive_copy, copy_texts):
    manifest = json.loads((derive_copy / "exercises.json").read_text(encoding="utf-8"))
    assert manifest["derive"]["exercises"] == WITH_BACKWARD
    for name in manifest["regions"]:
        relative, _ = REGIONS[name]
        (region,) = [r for r in find_regions((derive_copy / "minitransformer" / relative).read_text(encoding="utf-8"))
                     if r.name == name]
        assert (DERIVE_GUIDE if name.endswith(".backward") else GUIDE) in "".join(region.body), name
    readme = copy_texts["README.md"]
    assert "mathematics" not in readme and "derive each backward pass" in readme
    cells = {where: text for where, text in copy_texts.items() if where.startswith("notebooks/")}
    if cells:
        assert sum(NOTE in text for text in cells.values()) >= 3


def test_the_copys_tests_fail_only_where_work_is_missing_and_pass_when_it_is_done(derive_copy, tmp_path):
    import shutil

    copy = shutil.copytree(derive_copy, tmp_path / "student")
    doctests = ["minitransformer/layers", "minitransformer/variants"]      # the stripped docstrings still collect
    code, failures, _, _, out = _junit(copy, *SELECTION, *doctests)
    assert code == 1 and failures, out[-2000:]
    exercise = re.compile(r"\b(" + "|".join(e.name for e in EXERCISES) + r")\b")
    unrelated = {test: text[:300] for test, text in failures.items() if not exercise.search(text)}
    assert not unrelated, unrelated
    put_bodies(copy, reference_bodies())
    code, failures, tests, skipped, out = _junit(copy, *SELECTION, *doctests)
    assert (code, failures) == (0, {}), out[-3000:]
    assert tests - skipped > 40
