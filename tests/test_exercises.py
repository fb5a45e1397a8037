"""Exercise mode: solution regions, the student copy, the grader, student notebooks."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from minitransformer.__main__ import main
from minitransformer.exercises.catalogue import EXERCISES, exercise_named
from minitransformer.exercises.grade import grade_copy, score_table
from minitransformer.exercises.isolation import LINUX_ONLY, Limits
from minitransformer.exercises.leaks import student_notebook
from minitransformer.exercises.make import make_student_copy, reference_package, select_regions
from minitransformer.exercises.regions import find_regions, package_regions, replace_regions
from minitransformer.gradcheck.cases import all_cases

grades_in_the_sandbox = pytest.mark.skipif(sys.platform != "linux", reason=LINUX_ONLY)

REFERENCE = reference_package()
REGIONS = package_regions(REFERENCE)
LAYERS = list(dict.fromkeys(case.layer for case in all_cases()))


def reference_body(name):
    return REGIONS[name][1].body


def put_bodies(copy, bodies):
    """Write region bodies (dict name -> lines) into the student copy, as a student would."""
    for relative in {REGIONS[name][0] for name in bodies}:
        path = copy / "minitransformer" / relative
        path.write_text(replace_regions(path.read_text(encoding="utf-8"), bodies), encoding="utf-8")


@pytest.fixture
def copy_of(tmp_path):
    def make(*only):
        make_student_copy(tmp_path / "student", only=list(only))
        return tmp_path / "student"
    return make


# ---------------------------------------------------------------- the regions in the reference

def test_every_region_belongs_to_an_exercise_graded_on_catalogue_layers():
    exercises = {e.name for e in EXERCISES}
    assert {name.split(".")[0] for name in REGIONS} == exercises
    assert all(name.split(".")[1] in ("forward", "backward") for name in REGIONS)     # one point each
    for exercise in EXERCISES:
        assert set(exercise.layers) <= set(LAYERS)
        assert any(name.endswith(".backward") for name in REGIONS if name.startswith(exercise.name + "."))
    assert not any(region.is_blank() for _, region in REGIONS.values())


def test_regions_are_found_named_and_replaced():
    text = ("class Norm:\n    def backward(self, dout):\n        check()\n        ### BEGIN SOLUTION norm.backward\n"
            "        dx = dout * 2\n        return dx\n        ### END SOLUTION\n")
    (region,) = find_regions(text)
    assert (region.name, region.where, region.indent, region.body) == (
        "norm.backward", "Norm.backward", "        ", ["        dx = dout * 2\n", "        return dx\n"])
    replaced = replace_regions(text, {"norm.backward": ["        return dout\n"]})
    assert replaced.splitlines()[3:] == ["        ### BEGIN SOLUTION norm.backward", "        return dout",
                                         "        ### END SOLUTION"]
    with pytest.raises(ValueError, match="never closed"):
        find_regions("### BEGIN SOLUTION a.b\nx = 1\n")
    with pytest.raises(ValueError, match="inside the region"):
        find_regions("### BEGIN SOLUTION a.b\n### BEGIN SOLUTION a.c\n### END SOLUTION\n")


def test_only_accepts_exercises_and_regions_and_names_the_choices_when_wrong():
    assert select_regions(REGIONS, ["layernorm"]) == ["layernorm.backward", "layernorm.forward"]
    assert select_regions(REGIONS, ["softmax.backward"]) == ["softmax.backward"]
    with pytest.raises(KeyError, match="layernorm"):
        select_regions(REGIONS, ["batchnorm"])


def test_an_exercise_is_found_by_its_whole_name_alone():
    for exercise in EXERCISES:                  # decoder_block holds block's name, and is not block
        assert exercise_named(exercise.name) is exercise
    with pytest.raises(KeyError, match=r"no exercise named 'blocks'; the exercises are linear, relu, gelu, .*, value_loss"):
        exercise_named("blocks")


# ---------------------------------------------------------------- the student copy

def test_copy_blanks_exactly_the_chosen_regions_and_keeps_the_docstrings(copy_of):
    copy = copy_of("layernorm", "softmax.backward")
    student = package_regions(copy / "minitransformer")
    assert set(student) == set(REGIONS)
    blank = {name for name, (_, region) in student.items() if region.is_blank()}
    assert blank == {"layernorm.forward", "layernorm.backward", "softmax.backward"}
    for name in set(REGIONS) - blank:
        assert student[name][1].body == reference_body(name)
    layernorm = (copy / "minitransformer/layers/layernorm.py").read_text(encoding="utf-8")
    assert r"dx = \mathrm{rstd} \Big( g - \operatorname{mean}(g) - \hat{x} \odot" in layernorm       # the maths stays
    assert "mean_g_xhat = (g * self.xhat)" not in layernorm                               # the answer goes
    assert 'NotImplementedError("Exercise layernorm.backward: write the missing code in LayerNorm.backward' in layernorm
    assert not list(copy.rglob("__pycache__")) and not (copy / "tests/test_exercises.py").exists()
    assert (copy / "tests/test_gradients.py").is_file() and (copy / "setup.cfg").is_file()
    manifest = json.loads((copy / "exercises.json").read_text(encoding="utf-8"))
    assert manifest["exercises"] == ["softmax", "layernorm"]
    readme = (copy / "README.md").read_text(encoding="utf-8")
    assert "- `layernorm.backward`: `minitransformer/layers/layernorm.py`, in `LayerNorm.backward`" in readme
    assert "dx = dout2d @ self.weight.data.T" not in readme            # the reference README quotes Linear's


def test_copy_imports_and_every_layer_not_using_an_exercise_still_works(copy_of):
    chosen = ["layernorm", "softmax"]
    copy = copy_of(*chosen)
    script = ("import json, numpy as np, minitransformer\n"
              "from minitransformer.gradcheck.checker import check_module\n"
              "from minitransformer.gradcheck.cases import all_cases\n"
              "failed = set()\n"
              "for case in all_cases():\n"
              "    try:\n"
              "        module, inputs, forward = case.build(np.random.default_rng(0))\n"
              "        check_module(module, inputs, forward=forward).assert_ok()\n"
              "    except NotImplementedError:\n"
              "        failed.add(case.layer)\n"
              "print(json.dumps([minitransformer.__file__, sorted(failed)]))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=copy, capture_output=True, text=True, check=True, encoding="utf-8")
    imported_from, failed = json.loads(done.stdout)
    assert Path(imported_from).resolve().is_relative_to(copy.resolve())
    unavailable = json.loads((copy / "exercises.json").read_text(encoding="utf-8"))["unavailable_layers"]
    assert set(failed) == set(unavailable)
    assert {"Softmax", "LayerNorm", "ScaledDotProductAttention", "MultiHeadAttention", "TransformerBlock",
            "GPT"} <= set(failed)
    assert unavailable["TransformerBlock"] == ["softmax", "layernorm"]
    assert {"Linear", "Embedding", "CrossEntropyLoss", "FeedForward", "TiedLMHead"}.isdisjoint(failed)


def test_a_copy_leaves_out_the_fast_forms_that_would_answer_its_exercises_and_no_other(copy_of):
    """relu has no fast form; softmax's answer is in fast/softmax.py and in fast/attention.py, which imports it."""
    copy = copy_of("relu", "softmax")
    fast_files = {path.name for path in (REFERENCE / "fast").glob("*.py")}
    assert fast_files - {path.name for path in (copy / "minitransformer" / "fast").glob("*.py")} == {"softmax.py", "attention.py"}
    left_out = json.loads((copy / "exercises.json").read_text(encoding="utf-8"))["left_out"]
    assert sorted(entry["path"] for entry in left_out if "/fast/" in entry["path"]) == [
        "minitransformer/fast/attention.py", "minitransformer/fast/softmax.py"]


def test_no_fast_form_a_copy_keeps_imports_one_it_leaves_out():
    """Read from the files' imports: a kept fast form importing a left-out one (fast attention imports the fast softmax
    and the fast tiled attention) would call the answer, or fail to import in the copy."""
    imports = {path.stem: {node.module for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                           if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module}
               for path in (REFERENCE / "fast").glob("*.py")}
    for exercise in EXERCISES:
        assert set(exercise.fast_files) <= set(imports), exercise.name
        for kept in set(imports) - set(exercise.fast_files):
            assert not imports[kept] & set(exercise.fast_files), f"{exercise.name}: fast/{kept}.py imports a left-out form"


def test_make_refuses_a_non_empty_directory(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine", encoding="utf-8")
    assert main(["exercises", "make", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: exercises make: ") and "not an empty directory" in err and err.count("\n") == 1


# ---------------------------------------------------------------- the grader

def assign(copy, regions=None, seed=19):
    """Write the instructor's assignment beside `copy`, as `exercises make` does; returns the Assignment.

    regions: the graded regions (default: those the copy blanked).
    """
    from minitransformer.exercises.assignment import default_path, new_assignment, write_assignment

    regions = json.loads((copy / "exercises.json").read_text(encoding="utf-8"))["regions"] if regions is None else regions
    assignment = new_assignment(regions, REFERENCE, seed=seed)
    write_assignment(default_path(copy), assignment)
    return assignment


@grades_in_the_sandbox
def test_grading_every_exercise_fails_the_chosen_ones_and_what_calls_them(copy_of, tmp_path, capsys):
    copy = copy_of("layernorm", "softmax")
    assign(copy, sorted(REGIONS))               # the instructor grades every exercise; the copy blanked two
    assert main(["exercises", "grade", str(copy), "--json", str(tmp_path / "grades.json")]) == 1
    table = capsys.readouterr().out
    assert "layernorm: not implemented" in table and "softmax: not implemented" in table
    grades = {g["exercise"]: g for g in json.loads((tmp_path / "grades.json").read_text(encoding="utf-8"))["exercises"]}
    assert set(grades) == {e.name for e in EXERCISES}
    # the layers that call the blanked regions (as the copy's manifest lists them) fail there, said as such; no other
    waiting = json.loads((copy / "exercises.json").read_text(encoding="utf-8"))["unavailable_layers"]
    calling = {e.name for e in EXERCISES if any(layer in waiting for layer in e.layers)} - {"layernorm", "softmax"}
    assert {"attention", "multihead", "block"} <= calling
    for name, grade in grades.items():
        if name in calling:
            assert grade["points"] < grade["max_points"] and grade["status"].startswith("failed in "), name
            assert set(grade["status"][len("failed in "):].split(", which")[0].split(", ")) <= {
                *select_regions(REGIONS, ["layernorm", "softmax"])}, name
        elif name not in ("layernorm", "softmax"):
            assert grade["points"] == grade["max_points"] == len(select_regions(REGIONS, [name])), name


@grades_in_the_sandbox
def test_putting_the_reference_bodies_back_gives_full_marks(tmp_path, capsys):
    copy = tmp_path / "student"                 # made and graded as an instructor does, on the command line
    assert main(["exercises", "make", str(copy), "--only", "layernorm,softmax,attention.backward"]) == 0
    assignment = tmp_path / "student.assignment.json"
    assert f"wrote the instructor's assignment to {assignment}" in capsys.readouterr().out
    seed = str(json.loads(assignment.read_text(encoding="utf-8"))["seed"])
    assert (assignment.stat().st_mode & 0o777) == 0o600
    assert not any(seed in path.read_text(errors="replace", encoding="utf-8") for path in copy.rglob("*") if path.is_file()), \
        "the inputs' seed stays on the instructor's side"
    put_bodies(copy, {name: reference_body(name) for name in REGIONS})
    report = tmp_path / "grades.json"
    assert main(["exercises", "grade", str(copy), "--json", str(report)]) == 0    # the assignment beside it
    result = json.loads(report.read_text(encoding="utf-8"))
    assert (result["points"], result["max_points"], result["full_marks"]) == (5, 5, True)   # one per region
    assert [e["exercise"] for e in result["exercises"]] == ["softmax", "layernorm", "attention"]
    assert all(e["backward_error"] < 1e-7 and e["forward_ok"] for e in result["exercises"])


@grades_in_the_sandbox
def test_layernorm_backward_without_the_mean_term_is_caught_and_located(copy_of):
    copy = copy_of("layernorm")
    indent = REGIONS["layernorm.backward"][1].indent
    wrong = [f"{indent}{line}\n" for line in (                   # the textbook formula, minus mean(g)
        "self.gamma.grad += (dout * self.xhat).reshape(-1, self.d).sum(axis=0)",
        "self.beta.grad += dout.reshape(-1, self.d).sum(axis=0)",
        "g = dout * self.gamma.data",
        "return self.rstd * (g - self.xhat * (g * self.xhat).mean(axis=-1, keepdims=True))")]
    put_bodies(copy, {"layernorm.forward": reference_body("layernorm.forward"), "layernorm.backward": wrong})
    # a student edit outside the regions is never run: a checker that always passes changes nothing
    gradcheck = copy / "minitransformer/gradcheck/checker.py"
    gradcheck.write_text(gradcheck.read_text(encoding="utf-8").replace("def rel_error(analytic, numeric):",
                                                       "def rel_error(analytic, numeric):\n    return 0.0"), encoding="utf-8")
    (grade,) = grade_copy(copy, assign(copy))
    assert (grade.exercise, grade.status, grade.forward_ok, grade.points, grade.max_points) == (
        "layernorm", "wrong", True, 1, 2)
    assert grade.backward_error > 1e-3
    assert any("input 0 (x): rel_error" in p and "worst at index (" in p for p in grade.problems)
    assert not any("parameter" in p for p in grade.problems), "gamma and beta do not need the mean term"
    assert "layernorm: wrong" in score_table([grade])


@grades_in_the_sandbox
def test_attention_is_graded_with_the_students_softmax(copy_of):
    """attention's cases call softmax: its process runs the student's (the reference's answer is never there)."""
    copy = copy_of("softmax", "attention")
    put_bodies(copy, {name: reference_body(name) for name in ("attention.forward", "attention.backward")})
    assignment = assign(copy)
    softmax, attention = grade_copy(copy, assignment)
    assert (softmax.points, attention.points, attention.status) == (0, 0, "failed in softmax.forward, which it calls")
    put_bodies(copy, {name: reference_body(name) for name in ("softmax.forward", "softmax.backward")})
    softmax, attention = grade_copy(copy, assignment)
    assert (softmax.points, attention.points) == (2, 2)


@grades_in_the_sandbox
@pytest.mark.sandbox
def test_hanging_crashing_and_unmarked_answers_are_reported(copy_of):
    copy = copy_of("linear", "relu", "embedding", "crossentropy", "gelu")
    indent = REGIONS["linear.backward"][1].indent
    put_bodies(copy, {"linear.backward": [f"{indent}while True:\n", f"{indent}    pass\n"],
                      "relu.backward": [f"{indent}import os\n", f"{indent}os._exit(3)\n"],
                      "crossentropy.backward": [f"{indent}return (self.probs\n"],
                      "gelu.forward": reference_body("gelu.forward"),
                      "gelu.backward": [f"{indent}return dout * np.nan\n"]})  # NaN never passes as "small"
    embedding = copy / "minitransformer/layers/embedding.py"              # the student deleted the markers
    embedding.write_text("".join(line for line in embedding.read_text(encoding="utf-8").splitlines(keepends=True)
                                 if "SOLUTION" not in line), encoding="utf-8")
    # the hanging answer costs the whole timeout; the others must finish within it even on a loaded 2-core machine
    linear, relu, gelu, embedding, crossentropy = grade_copy(copy, assign(copy), limits=Limits(timeout=20))
    assert (gelu.status, gelu.forward_ok, gelu.points, gelu.backward_error) == ("wrong", True, 1, 1.0)   # forward right
    assert (linear.status, relu.status, embedding.status) == ("timed out", "crashed", "markers missing")
    assert "exit code 3" in relu.problems[0] and "embedding.backward" in embedding.problems[0]
    assert crossentropy.status == "error" and "SyntaxError" in crossentropy.problems[0]
    assert "(at layers/loss.py:" in crossentropy.problems[0]
    assert linear.points == relu.points == embedding.points == crossentropy.points == 0


# ---------------------------------------------------------------- notebooks

def _small_notebook():
    import nbformat

    notebook = nbformat.v4.new_notebook()
    first = nbformat.v4.new_code_cell("import numpy as np\nx = np.arange(3)\nint(x.sum())")
    first.outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "3"}, execution_count=1)]
    first.execution_count = 1
    exercise = nbformat.v4.new_code_cell("### BEGIN SOLUTION\ny = x * 2\n### END SOLUTION\nassert y.sum() == 6")
    tagged = nbformat.v4.new_code_cell("z = y + 1", metadata={"tags": ["solution"]})
    notebook.cells = [nbformat.v4.new_markdown_cell("# Doubling"), first, exercise, tagged,
                      nbformat.v4.new_code_cell("print(z)")]
    return notebook


def test_student_notebook_strips_outputs_and_clears_solutions():
    notebook = _small_notebook()
    assert student_notebook(notebook) == 2
    first, exercise, tagged = notebook.cells[1:4]
    assert first.outputs == [] and first.execution_count is None
    assert "y = x * 2" not in exercise.source and "assert y.sum() == 6" in exercise.source
    assert "### BEGIN SOLUTION" in exercise.source and "NotImplementedError" in exercise.source
    assert "z = y + 1" not in tagged.source and "NotImplementedError" in tagged.source
    assert [r.name for r in find_regions(tagged.source)] == [None]


@pytest.mark.notebooks
def test_student_notebooks_execute_up_to_the_first_exercise_cell(tmp_path):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    (tmp_path / "notebooks").mkdir()
    nbformat.write(_small_notebook(), tmp_path / "notebooks/doubling.ipynb")
    assert main(["exercises", "make", str(tmp_path / "student"), "--only", "relu",
                 "--notebooks", str(tmp_path / "notebooks")]) == 0
    notebook = nbformat.read(tmp_path / "student/notebooks/doubling.ipynb", as_version=4)
    with pytest.raises(CellExecutionError, match="NotImplementedError"):
        NotebookClient(notebook, timeout=60, kernel_name="python3").execute()
    assert notebook.cells[1].outputs[0]["data"]["text/plain"] == "3"        # ran before the exercise
    assert notebook.cells[4].execution_count is None                         # never reached


def test_a_notebook_cell_is_cleared_only_when_its_exercise_is_assigned():
    """An nbgrader cell belongs to the exercise its grade_id starts with: `--only layernorm` leaves softmax's."""
    import nbformat

    def cell(grade_id):
        return nbformat.v4.new_code_cell("### BEGIN SOLUTION\nanswer = 1\n### END SOLUTION\n", metadata={
            "nbgrader": {"grade_id": grade_id, "solution": True, "grade": False, "locked": False}})

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [cell("softmax_jacobian"), cell("layernorm_backward_steps"), cell("attention_backward_steps")]
    assert student_notebook(notebook, selected={"layernorm.backward", "attention.forward"}) == 2
    softmax, layernorm, attention = (c.source for c in notebook.cells)
    assert "answer = 1" in softmax and "NotImplementedError" not in softmax
    assert "answer = 1" not in layernorm and "answer = 1" not in attention
    notebook.cells = [cell("softmax_jacobian")]
    assert student_notebook(notebook) == 1                                  # no selection: every exercise


REAL_NOTEBOOKS = sorted((REFERENCE.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.notebooks
@pytest.mark.skipif(not REAL_NOTEBOOKS, reason="no notebooks/*.ipynb in this checkout")
def test_the_projects_student_notebooks_run_until_they_need_an_exercise(tmp_path, monkeypatch):
    """Each student notebook, run against a student copy, either runs through or stops at its first exercise."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    make_student_copy(tmp_path / "student", only=["layernorm.backward"], notebooks=True)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "student"))          # the kernel imports the student copy
    for path in sorted((tmp_path / "student/notebooks").glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert all(cell.outputs == [] and cell.execution_count is None for cell in code), path.name
        client = NotebookClient(notebook, timeout=120, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        try:
            client.execute()
        except CellExecutionError as error:
            assert "NotImplementedError" in str(error) and "Exercise " in str(error), f"{path.name}: {error}"
            ran = [cell.execution_count is not None for cell in code]
            assert ran == sorted(ran, reverse=True), f"{path.name}: cells ran out of order"


def test_grading_a_copy_made_by_another_version_warns(tmp_path):
    from minitransformer import __version__
    from minitransformer.exercises.assignment import Assignment
    from minitransformer.exercises.grade import copy_notes
    nothing_graded = Assignment({}, seed=1)                                   # the copy's empty list matches it
    assert copy_notes(tmp_path, nothing_graded) == []                         # no manifest: nothing to compare
    (tmp_path / "exercises.json").write_text(json.dumps({"minitransformer": __version__, "regions": []}), encoding="utf-8")
    assert copy_notes(tmp_path, nothing_graded) == []
    (tmp_path / "exercises.json").write_text(json.dumps({"minitransformer": "0.1.0", "regions": []}), encoding="utf-8")
    (warning,) = copy_notes(tmp_path, nothing_graded)
    assert "made by minitransformer 0.1.0 and is graded by " + __version__ in warning
