"""Student versions of notebooks: outputs stripped, solution cells cleared.

A cell is an exercise when
* its source contains solution regions (the same markers as the package;
  a region may be unnamed here), which are replaced by the hint, or
* it carries the cell tag `solution` (or nbgrader's `metadata.nbgrader.solution`),
  in which case the whole source is replaced by the hint, between markers.

Every code cell loses its outputs and execution count, so no result computed
by the reference code reaches the students. A named region in a notebook is
cleared only when its name is among the assigned regions (as in the package);
an unnamed region or a tagged cell is always cleared.

Left out: grading notebooks (nbgrader's autograded test cells); the grader
grades the package, which the notebooks import.
"""

from pathlib import Path

from .regions import Region, find_regions, hint

SOLUTION_TAG = "solution"
_MARKDOWN_HINT = "*Your answer here.*\n"


def is_solution_cell(cell):
    """True for a cell tagged `solution` or marked as a solution by nbgrader."""
    metadata = cell.get("metadata", {})
    return SOLUTION_TAG in metadata.get("tags", []) or bool(metadata.get("nbgrader", {}).get("solution"))


def _hint(cell, region):
    """What replaces a solution in this cell: a sentence in markdown, the `raise` hint in code."""
    if cell["cell_type"] == "markdown":
        return [_MARKDOWN_HINT]
    region.where = "this cell"
    return [hint(region)]


def student_cell(cell, selected=None):
    """Clear one cell in place; return True if it was an exercise cell.

    Args:
        cell: an nbformat cell (dict-like).
        selected: assigned region names; None clears every named region too.
    """
    if cell["cell_type"] == "code":
        cell["outputs"], cell["execution_count"] = [], None
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    regions = find_regions(source, "notebook cell")
    chosen = [r for r in regions if r.name is None or selected is None or r.name in selected]
    if chosen:
        lines = source.splitlines(keepends=True)
        for region in reversed(chosen):                     # from the bottom, so indices stay valid
            lines[region.begin + 1:region.end] = _hint(cell, region)
        cell["source"] = "".join(lines)
        return True
    if not regions and is_solution_cell(cell):              # the whole cell is the answer: it gets markers
        cell["source"] = "".join(["### BEGIN SOLUTION\n", *_hint(cell, Region(None, 0, 0, "", [])), "### END SOLUTION\n"])
        return True
    return False


def student_notebook(notebook, selected=None):
    """Return the number of exercise cells after clearing `notebook` (an nbformat node) in place."""
    notebook.get("metadata", {}).pop("widgets", None)
    return sum(student_cell(cell, selected) for cell in notebook["cells"])


def write_student_notebooks(source_dir, out_dir, selected=None):
    """Write a student version of every `*.ipynb` in `source_dir` to `out_dir`.

    Returns:
        list of {"notebook": file name, "exercise_cells": count}.
    """
    import nbformat

    written = []
    for path in sorted(Path(source_dir).glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        count = student_notebook(notebook, selected)
        out_dir.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, out_dir / path.name)
        written.append({"notebook": path.name, "exercise_cells": count})
    return written
