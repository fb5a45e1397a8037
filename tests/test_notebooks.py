"""The notebooks: built from their sources, stored without outputs, and run top to bottom without error.

Each notebook asserts the lecture numbers it reproduces, so running it is the
test: a change to the package that breaks a lecture value fails here. Every
notebook runs in a fresh kernel of the current interpreter, from inside
`notebooks/`, with the non-interactive matplotlib backend.

In a student copy (`exercises make --notebooks`) the notebooks are student
versions and their sources are not there (they hold the notebook exercises'
answers): the build tests skip, and a notebook that stops at an exercise not
yet done fails with one line naming it.
"""

import ast
import importlib.util
import os
import pathlib
import re

import nbformat
import pytest

import minitransformer

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
has_sources = pytest.mark.skipif(not (NOTEBOOKS / "_build.py").is_file(),
                                 reason="no notebooks/_build.py: a student copy has no notebook sources")


def _load_builder():
    spec = importlib.util.spec_from_file_location("notebooks_build", NOTEBOOKS / "_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@has_sources
def test_every_source_has_its_notebook_and_the_reverse():
    builder = _load_builder()
    built = sorted(path.name for _, path in builder.targets())
    assert built == [path.name for path in PATHS]
    assert len(PATHS) >= 15                      # issue 24: the lectures' topics, 01-15


@has_sources
@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.stem)
def test_committed_notebook_is_built_from_its_source(path):
    builder = _load_builder()
    expected = builder.render(builder.build(builder.SOURCES / f"{path.stem}.py"))
    assert path.read_text(encoding="utf-8") == expected, f"{path.name} is stale: run python notebooks/_build.py"


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.stem)
def test_committed_notebook_has_no_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has stored outputs"


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.stem)
def test_notebook_does_not_redefine_package_code(path):
    """A notebook may define small helpers, never a function or class the package already exports."""
    exported = {name for name in dir(minitransformer) if not name.startswith("_")}
    notebook = nbformat.read(path, as_version=4)
    source = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    defined = {node.name for node in ast.walk(ast.parse(source))
               if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert not defined & exported, f"{path.name} redefines {sorted(defined & exported)}"


@pytest.mark.notebooks
@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.stem)
def test_notebook_runs_top_to_bottom(path, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # the kernel imports the package beside notebooks/ (a student copy's, even where the reference is installed)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(NOTEBOOKS.parent), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    # One BLAS thread per kernel: on the shared 2-core machine a multi-threaded OpenBLAS competing with
    # other processes made the small matrix products of notebook 5 about 20 times slower.
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(variable, "1")
    notebook = nbformat.read(path, as_version=4)
    # kernel "python3" is ipykernel's own spec; jupyter_client starts it with sys.executable
    client = nbclient.NotebookClient(notebook, kernel_name="python3", timeout=300,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    try:
        client.execute()
        stopped = None
    except nbclient.exceptions.CellExecutionError as error:
        stopped = error
    if stopped is not None:
        _stopped_at_an_exercise(path, notebook, stopped)
        raise stopped
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error", f"{path.name}: {output.get('ename')}"


def _stopped_at_an_exercise(path, notebook, error):
    """In a student copy: skip a notebook stopped by a left-out cell, fail in one line at an exercise not done."""
    text = str(error)
    if "Left out of this student copy" in text:
        pytest.skip(f"{path.name}: a cell is left out of this student copy")
    match = re.search(r"Exercise (\S+): write the missing code", text)
    if match:
        ran = sum(1 for cell in notebook.cells if cell.cell_type == "code" and cell.execution_count is not None)
        pytest.fail(f"{path.name} stops at code cell {ran}: exercise {match.group(1)} is not done yet "
                    f"(a notebook exercise, or a package one the notebook uses)", pytrace=False)


# The notebooks that build the fast tier on purpose, each saying why in its markdown ("on purpose"): 16 trains
# its two decoders as the benchmark does, 17 measures the fast tier's attention beside the plain and tiled ones.
FAST_ON_PURPOSE = {"16_modern_decoder", "17_tiled_attention"}


def _fast_choices(code):
    """(line, what) of every place where notebook code chooses the fast tier: the string "fast" (as `kernels=`
    or `use_kernels(..., "fast")` take it), a `Fast...` class, or a `TrainConfig(...)` left at a fast default."""
    from minitransformer import TrainConfig
    found = []
    for node in ast.walk(ast.parse(code)):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else \
            node.name if isinstance(node, ast.alias) else None
        if isinstance(node, ast.Constant) and node.value == "fast":
            found.append((node.lineno, '"fast"'))
        elif name and name.split(".")[-1].startswith("Fast"):
            found.append((getattr(node, "lineno", 0), name))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "TrainConfig" \
                and "kernels" not in {keyword.arg for keyword in node.keywords} and TrainConfig().kernels != "plain":
            found.append((node.lineno, f"TrainConfig(...) without kernels=, whose default is {TrainConfig().kernels!r}"))
    return found


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.stem)
def test_a_notebook_chooses_the_fast_tier_only_on_purpose_and_says_so(path):
    """The guide says the notebooks run the plain layers, the code a student reads and steps into."""
    notebook = nbformat.read(path, as_version=4)
    code = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    choices = _fast_choices(code)
    if path.stem in FAST_ON_PURPOSE:
        prose = " ".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
        assert choices, f"{path.name} no longer uses the fast tier: take it out of FAST_ON_PURPOSE"
        assert re.search(r"fast tier[^.]*on\s+purpose", prose), f"{path.name} uses the fast tier without saying why"
    else:
        assert not choices, f"{path.name} chooses the fast tier (code line: what): {choices}; the notebooks run " \
                            "the plain layers (or add it to FAST_ON_PURPOSE and say why in its markdown)"
