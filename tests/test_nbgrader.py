"""Notebook exercises: the problem sets of the notebooks (notebook 04's derivations, and one lecture formula in each
of 01, 02, 07, 12, 14, 15, 17 and 18) as nbgrader exercise cells, blanked in student copies.

1. The metadata follows nbgrader's cell schema, version 3 (nbgrader/nbgraderformat/v3.json and the rules
   of its MetadataValidatorV3: grade, solution, locked booleans; a unique grade_id of letters, digits,
   `_` and `-`; points on every graded cell; a markdown cell is graded and a solution together or
   neither). With nbgrader installed, its own validator runs too.
2. Each check cell passes the reference answer and fails a wrong one (run in this process).
3. In a student copy the answers are blank, the checks (less their hidden tests) and metadata intact, and
   notebook 04 runs without error up to its first exercise cell, where it stops (a Jupyter kernel).
4. With nbgrader installed (`pip install -e ".[nbgrader]"`; skipped without it, it is heavy), for every
   problem set: `nbgrader generate_assignment` and `nbgrader autograde` score a blank notebook 0, the
   reference full marks, the copy `exercises make` writes 0, and one wrong step loses that check's points
   (the hidden tests, which the release and the copy do not show, are graded).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from minitransformer.exercises.catalogue import NOTEBOOK_EXERCISES
from minitransformer.exercises.make import make_student_copy, reference_package
from minitransformer.exercises.regions import find_regions

NOTEBOOKS = reference_package().parent / "notebooks"
BACKPROP = NOTEBOOKS / "04_backprop_by_hand.ipynb"
pytestmark = pytest.mark.skipif(not BACKPROP.is_file(), reason="no notebooks/ in this checkout")

# notebook -> (its points, {grade_id of a solution cell -> (text of the reference answer, a mistake put in its place)})
PROBLEM_SETS = {
    "01_attention_worked_example": (2, {"worked_attention_by_hand": (
        "alpha_1 = np.exp(scores_1) / np.exp(scores_1).sum()", "alpha_1 = np.exp(scores_1) / np.exp(scores_1).max()")}),
    "02_positional_encoding": (2, {"sinusoid_shift_rotation": ("[[c, -s], [s, c]]", "[[c, s], [-s, c]]")}),
    "07_attention_variants": (2, {"distance_bias_by_hand": ("np.arange(T)[None, :])", "np.arange(T)[None, :]) / T")}),
    "12_learning_rate_schedules": (2, {"warmup_rule_by_hand": (     # the visible checks pass it: only hidden tests fail
        "hundredth_step = 10_000 * 4000", "hundredth_step = 100 * 4000")}),
    "14_complexity": (2, {"operation_counts_by_hand": ("return 4 * d  ", "return 16 * d  ")}),
    "15_multihead_as_a_sum": (2, {"heads_as_a_sum_contributions": ("heads[:, h] @", "heads[:, (h + 1) % H] @")}),
    "17_tiled_attention": (2, {"online_softmax_step_by_hand": ("rebase = np.exp(m - new_m)", "rebase = 1.0")}),
    "18_instructgpt": (2, {"penalised_reward_per_token": ("rewards[:, -1] += scores", "rewards += scores[:, None]")}),
}
MISTAKES = {
    "softmax_jacobian": ("dx_softmax = y * (dout - y @ dout)", "dx_softmax = y * dout"),
    "layernorm_forward_steps": ("var = (centered * centered).mean()", "var = (centered * centered).sum() / (C - 1)"),
    "layernorm_backward_steps": ("dx_by_hand = dcentered - dcentered.mean()", "dx_by_hand = dcentered"),
    "attention_backward_steps": ("dscores = dscores * scale", "dscores = dscores"),
    "crossentropy_backward_steps": ("dnll = dout * keep / count", "dnll = dout * keep / N"),
    "layernorm_without_variance_path": ("self.gamma.grad += np.sum(dout * self.xhat, axis=tuple(range(dout.ndim - 1)))",
                                        "pass"),
}
PROBLEM_SETS["04_backprop_by_hand"] = (9, MISTAKES)
_GRADE_ID = re.compile(r"^[a-zA-Z0-9_\-]*$")
_KEYS = {"schema_version", "grade", "locked", "solution", "task", "grade_id", "points", "checksum", "cell_type"}


def nbgrader_cells(notebook):
    return [cell for cell in notebook.cells if "nbgrader" in cell.metadata]


def validate_schema_3(notebook):
    """Raise AssertionError where a cell breaks nbgrader's cell-metadata schema 3."""
    seen = set()
    for cell in nbgrader_cells(notebook):
        meta = cell.metadata["nbgrader"]
        assert set(meta) <= _KEYS, f"unknown nbgrader keys {set(meta) - _KEYS}"
        assert meta["schema_version"] == 3
        assert all(type(meta[key]) is bool for key in ("grade", "solution", "locked"))
        if meta["grade"] or meta["solution"] or meta["locked"]:
            assert meta.get("grade_id") and _GRADE_ID.match(meta["grade_id"]), meta
            assert meta["grade_id"] not in seen, f"grade_id {meta['grade_id']} used twice"
            seen.add(meta["grade_id"])
        if meta["grade"]:
            assert isinstance(meta.get("points"), (int, float)) and meta["points"] >= 0, meta
        if cell.cell_type == "markdown":
            assert meta["grade"] == meta["solution"], f"markdown cell {meta.get('grade_id')}: grade and solution differ"


def test_notebook_04_has_exercise_and_check_cells_in_nbgraders_schema():
    notebook = nbformat.read(BACKPROP, as_version=4)
    validate_schema_3(notebook)
    solutions = [c for c in nbgrader_cells(notebook) if c.metadata["nbgrader"]["solution"]]
    checks = [c for c in nbgrader_cells(notebook) if c.metadata["nbgrader"]["grade"]]
    assert [c.metadata["nbgrader"]["grade_id"] for c in solutions] == list(MISTAKES)
    assert len(checks) == len(solutions) and sum(c.metadata["nbgrader"]["points"] for c in checks) == 9
    assert all(c.metadata["nbgrader"]["locked"] and c.cell_type == "code" for c in checks)
    for cell in solutions:                                  # the answer sits between the markers nbgrader clears
        (region,) = find_regions(cell.source)
        assert region.name is None and len(region.body) >= 1
    try:
        from nbgrader.nbgraderformat.v3 import MetadataValidatorV3
    except ImportError:
        return
    MetadataValidatorV3().validate_nb(notebook)


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda path: path.stem)
def test_solution_markers_only_in_solution_cells(path):
    """nbgrader refuses a release whose solution markers sit in a cell not marked as a solution."""
    notebook = nbformat.read(path, as_version=4)
    validate_schema_3(notebook)
    for cell in notebook.cells:
        if "BEGIN SOLUTION" in cell.source or "END SOLUTION" in cell.source:
            assert cell.metadata.get("nbgrader", {}).get("solution"), f"{path.name}: {cell.source[:60]!r}"


def _run_in_process(cells, until):
    """Execute code cells in order, in one namespace, through cell index `until`; re-raise the first error."""
    import matplotlib

    matplotlib.use("Agg")
    namespace = {"__name__": "__notebook__"}
    for index, cell in enumerate(cells[:until + 1]):
        if cell.cell_type == "code":
            exec(compile(cell.source, f"cell {index}", "exec"), namespace)
    return namespace


def test_every_problem_set_has_its_exercises_points_and_hidden_tests():
    for stem, (points, mistakes) in PROBLEM_SETS.items():
        notebook = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
        validate_schema_3(notebook)
        solutions = [c.metadata["nbgrader"]["grade_id"] for c in nbgrader_cells(notebook) if c.metadata["nbgrader"]["solution"]]
        checks = [c for c in nbgrader_cells(notebook) if c.metadata["nbgrader"]["grade"]]
        assert solutions == list(mistakes) and sum(c.metadata["nbgrader"]["points"] for c in checks) == points, stem
        assert all("### BEGIN HIDDEN TESTS" in c.source and "### END HIDDEN TESTS" in c.source for c in checks), stem


@pytest.mark.parametrize("stem, grade_id", [(stem, grade_id) for stem, (_, mistakes) in PROBLEM_SETS.items()
                                            for grade_id in mistakes])
def test_each_check_cell_passes_the_answer_and_fails_a_mistake(stem, grade_id):
    cells = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4).cells
    index = next(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    check = next(i for i in range(index + 1, len(cells)) if cells[i].metadata.get("nbgrader", {}).get("grade"))
    _run_in_process(cells, check)                                      # the reference answer passes
    old, new = PROBLEM_SETS[stem][1][grade_id]
    assert cells[index].source.count(old) == 1
    cells[index].source = cells[index].source.replace(old, new)
    with pytest.raises(AssertionError):
        _run_in_process(cells, check)


@pytest.fixture(scope="module")
def student_copy(tmp_path_factory):
    out = tmp_path_factory.mktemp("nb") / "student"
    make_student_copy(out, only=["relu", "softmax.backward", "layernorm.backward", "attention.backward",
                                 "crossentropy.backward", *(e.name for e in NOTEBOOK_EXERCISES)], notebooks=True)
    return out


@pytest.mark.parametrize("stem", list(PROBLEM_SETS))
def test_a_student_copy_blanks_the_answers_and_keeps_the_checks(student_copy, stem):
    reference = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    student = nbformat.read(student_copy / "notebooks" / f"{stem}.ipynb", as_version=4)
    assert len(student.cells) == len(reference.cells)
    for mine, theirs in zip(student.cells, reference.cells):
        assert mine.metadata.get("nbgrader") == theirs.metadata.get("nbgrader")
        meta = theirs.metadata.get("nbgrader", {})
        if meta.get("solution"):
            regions = find_regions(mine.source)
            assert regions and all(region.is_blank() for region in regions)
            assert f"Exercise {meta['grade_id']}: write the missing code in this cell" in "".join(regions[0].body)
            assert PROBLEM_SETS[stem][1][meta["grade_id"]][0] not in mine.source
        elif meta.get("grade"):                             # the hidden tests go, the visible ones stay
            visible, hidden = theirs.source.split("### BEGIN HIDDEN TESTS\n")
            assert mine.source == visible + hidden.split("### END HIDDEN TESTS")[1].removeprefix("\n")
            assert "HIDDEN" not in mine.source and "assert" in mine.source
        else:
            assert mine.source == theirs.source
    validate_schema_3(student)


@pytest.mark.notebooks
def test_the_student_notebook_runs_up_to_its_first_exercise_and_stops_there(student_copy, monkeypatch):
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("PYTHONPATH", str(student_copy))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    path = student_copy / "notebooks" / BACKPROP.name
    notebook = nbformat.read(path, as_version=4)
    first = next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("solution"))
    with pytest.raises(CellExecutionError, match="Exercise softmax_jacobian: write the missing code"):
        NotebookClient(notebook, timeout=120, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    code = [(i, c) for i, c in enumerate(notebook.cells) if c.cell_type == "code"]
    assert all(c.execution_count is not None for i, c in code if i <= first)
    assert all(o.output_type != "error" for i, c in code if i < first for o in c.outputs)
    assert notebook.cells[first].outputs[-1].ename == "NotImplementedError"
    assert all(c.execution_count is None for i, c in code if i > first)


def _nbgrader_available():
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.notebooks
@pytest.mark.skipif(not _nbgrader_available(), reason="nbgrader is not installed (pip install -e '.[nbgrader]')")
@pytest.mark.parametrize("stem", list(PROBLEM_SETS))
def test_nbgrader_releases_and_autogrades_each_problem_set(tmp_path, student_copy, stem):
    notebook_path, (points, mistakes) = NOTEBOOKS / f"{stem}.ipynb", PROBLEM_SETS[stem]
    course = tmp_path / "course"
    (course / "source" / "ps").mkdir(parents=True)
    shutil.copy(notebook_path, course / "source" / "ps")
    (course / "nbgrader_config.py").write_text("c = get_config()\nc.CourseDirectory.root = '.'\n", encoding="utf-8")
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(reference_package().parent),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")    # nbgrader runs alembic

    def nbgrader(*args):
        done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True,
                              text=True, timeout=600, encoding="utf-8")
        assert done.returncode == 0, done.stderr[-3000:]

    nbgrader("generate_assignment", "ps", "--create", "--force")
    released = nbformat.read(course / "release" / "ps" / notebook_path.name, as_version=4)
    assert "HIDDEN TESTS" not in "".join(cell.source for cell in released.cells)      # nbgrader takes them out
    wrong_step = "layernorm_backward_steps" if stem == "04_backprop_by_hand" else next(iter(mistakes))
    wrong, (old, new) = nbformat.read(notebook_path, as_version=4), mistakes[wrong_step]
    for cell in wrong.cells:
        cell.source = cell.source.replace(old, new)
    submissions = {"blank": released, "reference": nbformat.read(notebook_path, as_version=4),
                   "copy": nbformat.read(student_copy / "notebooks" / notebook_path.name, as_version=4), "wrong": wrong}
    for student, notebook in submissions.items():
        (course / "submitted" / student / "ps").mkdir(parents=True)
        nbformat.write(notebook, course / "submitted" / student / "ps" / notebook_path.name)
    nbgrader("autograde", "ps", "--create", "--force")

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {student: (gradebook.find_submission("ps", student).score,
                            gradebook.find_submission("ps", student).max_score) for student in submissions}
    lost = 2 if stem == "04_backprop_by_hand" else points         # the wrong step's check cell
    assert scores == {"blank": (0, points), "reference": (points, points), "copy": (0, points),
                      "wrong": (points - lost, points)}
