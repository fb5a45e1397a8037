"""Notebook exercises in a student copy: `exercises make --notebooks` clears exactly the assigned exercises' cells
(a notebook-only exercise is a catalogue entry, so `--only` names it), and no copy keeps a grade cell whose answer
cell went: an exercise whose cells show another assigned answer is left out as a whole, its check with it.

Every exercise of the catalogue, one at a time, through the code `make` runs on the notebooks (`student_notebook`
with the package's secrets for that exercise); no kernel, no copy of the package: fast.
"""

import copy
import json
import re

import pytest

from minitransformer.exercises.catalogue import EXERCISES, NOTEBOOK_EXERCISES
from minitransformer.exercises.leaks import LEFT_OUT, package_secrets, student_notebook
from minitransformer.exercises.make import make_student_copy, reference_package, select_regions
from minitransformer.exercises.regions import find_regions, package_regions

REFERENCE = reference_package()
REGIONS = package_regions(REFERENCE)
NOTEBOOKS = {path.name: json.loads(path.read_text(encoding="utf-8"))
             for path in sorted((REFERENCE.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
EVERY = [exercise.name for exercise in [*EXERCISES, *NOTEBOOK_EXERCISES]]
pytestmark = pytest.mark.skipif(not NOTEBOOKS, reason="no notebooks/ in this checkout")


def nbgrader(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


def owners(grade_id):
    """The catalogue exercises a cell's grade_id belongs to (`make` clears it when one is assigned)."""
    return [name for name in EVERY if f"{grade_id}_".startswith(f"{name}_")]


def exercise_cells(cells):
    """dict solution cell index -> [the indices of the grade cells after it, up to the next solution cell]."""
    groups, owner = {}, None
    for index, cell in enumerate(cells):
        owner = index if nbgrader(cell).get("solution") else owner
        if nbgrader(cell).get("grade") and not nbgrader(cell).get("solution"):
            groups[owner].append(index)
        elif nbgrader(cell).get("solution"):
            groups[index] = []
    return groups


def test_every_solution_cell_belongs_to_one_exercise_and_every_notebook_exercise_has_graded_cells():
    graded = set()
    for name, notebook in NOTEBOOKS.items():
        for index, checks in exercise_cells(notebook["cells"]).items():
            assert index is not None, f"{name}: a grade cell before any solution cell"
            grade_id = nbgrader(notebook["cells"][index])["grade_id"]
            assert len(owners(grade_id)) == 1, f"{name} cell {index}: {grade_id} belongs to {owners(grade_id)}"
            assert checks, f"{name} cell {index}: solution {grade_id} has no grade cell after it"
            assert all(nbgrader(notebook["cells"][i])["points"] > 0 for i in checks)
            graded |= set(owners(grade_id))
    assert {e.name for e in NOTEBOOK_EXERCISES} <= graded, "a notebook exercise with no cells"


@pytest.mark.parametrize("exercise", EVERY)
def test_assigning_one_exercise_clears_exactly_its_cells_and_leaves_no_grade_cell_orphaned(exercise):
    selected = select_regions(REGIONS, [exercise]) if exercise in {e.name for e in EXERCISES} else []
    secrets = package_secrets(REFERENCE, REGIONS, selected)
    for name, reference in NOTEBOOKS.items():
        student = copy.deepcopy(reference)
        student_notebook(student, {*selected, exercise}, secrets)
        mine, theirs = student["cells"], reference["cells"]
        for index, checks in exercise_cells(theirs).items():
            left_out = any(LEFT_OUT in "".join(mine[i]["source"]) for i in [index, *checks])
            where = f"{name} cell {index} ({nbgrader(theirs[index])['grade_id']})"
            if left_out:                                       # the whole exercise goes: no orphaned check
                assert not any(nbgrader(mine[i]) for i in [index, *checks]), f"{where}: left out, its checks graded"
                continue
            assigned = owners(nbgrader(theirs[index])["grade_id"]) == [exercise]
            cleared = mine[index]["source"] != theirs[index]["source"]
            assert cleared == assigned, f"{where}: {'cleared' if cleared else 'kept'} with {exercise} assigned"
            assert all(nbgrader(mine[i]) == nbgrader(theirs[i]) for i in [index, *checks]), where
            if cleared:
                assert all(region.is_blank() for region in find_regions("".join(mine[index]["source"])))
            assert all(LEFT_OUT not in "".join(mine[i]["source"]) for i in checks), f"{where}: a check left alone"
        graded = {i for index, checks in exercise_cells(theirs).items() for i in [index, *checks]}
        for index, cell in enumerate(mine):                    # nothing else changes but outputs
            if index not in graded:
                assert cell["source"] == theirs[index]["source"] or LEFT_OUT in cell["source"], f"{name} cell {index}"


def test_a_notebook_exercise_is_chosen_by_name_and_needs_the_notebooks(tmp_path):
    with pytest.raises(KeyError, match="notebook exercises \\(with --notebooks\\): .*warmup_rule"):
        make_student_copy(tmp_path / "no", only=["warmup_rule"])
    with pytest.raises(KeyError, match="warmup_rule"):                 # the list of choices names it
        make_student_copy(tmp_path / "no", only=["warmup"], notebooks=True)


def test_the_notebook_builder_refuses_a_check_not_named_after_its_answer(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("notebooks_build", REFERENCE.parent / "notebooks" / "_build.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    source = tmp_path / "99_x.py"
    source.write_text("# %% [solution] warmup_rule_x\nx = 1\n\n# %% [check 1] check_warmup_rule_x\nassert x\n", encoding="utf-8")
    assert [cell.metadata["nbgrader"]["grade_id"] for cell in builder.build(source).cells] == [
        "warmup_rule_x", "check_warmup_rule_x"]
    source.write_text("# %% [solution] warmup_rule_x\nx = 1\n\n# %% [check 1] check_x\nassert x\n", encoding="utf-8")
    with pytest.raises(ValueError, match="99_x.py:4: a check cell is named check_ \\+ the grade_id of the solution"):
        builder.build(source)


def test_the_instructors_guide_names_every_notebook_exercise():
    """The README (or the guide page its instructors' section moves to) names the notebook exercises: all of them."""
    root = REFERENCE.parent
    pages = [path for path in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
             if "node_modules" not in path.parts and "`warmup_rule`" in path.read_text(encoding="utf-8")]
    assert pages, "no page of the README or docs/ names the notebook exercises"
    for page in pages:
        named = set(re.findall(r"`(\w+)`", page.read_text(encoding="utf-8")))
        missing = {e.name for e in NOTEBOOK_EXERCISES} - named
        assert not missing, f"{page.relative_to(root)} names notebook exercises but not {sorted(missing)}"
