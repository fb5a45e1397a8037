"""Student versions of notebooks: outputs stripped, solution cells cleared.

A cell is an exercise when
* its source contains solution regions (the same markers as the package;
  a region may be unnamed here), which are replaced by the hint, or
* it carries the cell tag `solution` (or nbgrader's `metadata.nbgrader.solution`),
  in which case the whole source is replaced by the hint, between markers.

Every code cell loses its outputs and execution count, so no result computed
by the reference code reaches the students. A named region in a notebook is
cleared only when its name is among the assigned regions (as in the package);
an unnamed region or a tagged cell belongs to the exercise that starts its
nbgrader `grade_id` (`layernorm_backward_steps`: layernorm) and is cleared only
when that exercise is assigned (always, without a grade_id or a selection). The
hint names the exercise by the cell's `grade_id` when it has one.

A cell that still shows an assigned answer of the package (a line of an
assigned region, `leaks.py`) is replaced by a LEFT_OUT note. The notebooks'
markdown files (errata) are copied with such lines replaced.

nbgrader: the cells keep their `nbgrader` metadata (solution cells,
autograded check cells with points, locked cells), so a notebook released
this way can be collected and autograded by an nbgrader course whose source
is the reference notebook (see notebooks/_build.py for how the reference
notebooks declare them). Our hint replaces nbgrader's stub
(`raise NotImplementedError()`), and the markers stay, as in the package.
"""

from pathlib import Path

from .leaks import LEFT_OUT, replace_lines
from .regions import HINT_MARK, Region, find_leaks, find_regions, hint

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
    if region.name is not None:                      # a package region shown in a notebook: the package's hint
        region.where = "this cell"
        return [hint(region)]
    name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return [f'{region.indent}{HINT_MARK}{" " + name if name else ""}: write the missing code in this cell between '
            f'the SOLUTION markers (keep them); the text above the cell says what to compute")\n']


def _exercise_names(leaks):
    return ", ".join(sorted({name.split(".")[0] for _, name, _ in leaks}))


def student_cell(cell, selected=None, secrets=None):
    """Clear one cell in place.

    Args:
        cell: an nbformat cell (dict-like).
        selected: assigned region names; None clears every named region too.
        secrets: the assigned regions' secrets (`leaks.package_secrets`); a cell still showing one
            afterwards is replaced by a LEFT_OUT note.
    Returns:
        (True if it was an exercise cell, True if it was replaced by a note).
    """
    exercise = _clear_solutions(cell, selected)
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    leaks = find_leaks(source, secrets) if secrets else []
    if leaks:
        note = f"{LEFT_OUT}: this cell shows the answer to exercise {_exercise_names(leaks)}."
        cell["source"] = (f"*{note}*\n" if cell["cell_type"] != "code"
                          else f'# {note}\nraise NotImplementedError("{note}")\n')
    return exercise, bool(leaks)


def _cell_assigned(cell, selected):
    """True if the cell's exercise (the first word of its nbgrader grade_id) is assigned, or nothing says."""
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    if selected is None or not grade_id:
        return True
    return grade_id.split("_")[0] in {name.split(".")[0] for name in selected}


def _clear_solutions(cell, selected):
    """Clear the solution regions (or the whole solution cell) in place; True if there were any."""
    if cell["cell_type"] == "code":
        cell["outputs"], cell["execution_count"] = [], None
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    regions = find_regions(source, "notebook cell")
    assigned = _cell_assigned(cell, selected)
    chosen = [r for r in regions if (assigned if r.name is None else selected is None or r.name in selected)]
    if chosen:
        lines = source.splitlines(keepends=True)
        for region in reversed(chosen):                     # from the bottom, so indices stay valid
            lines[region.begin + 1:region.end] = _hint(cell, region)
        cell["source"] = "".join(lines)
        return True
    if not regions and assigned and is_solution_cell(cell):              # the whole cell is the answer: it gets markers
        cell["source"] = "".join(["### BEGIN SOLUTION\n", *_hint(cell, Region(None, 0, 0, "", [])), "### END SOLUTION\n"])
        return True
    return False


def student_notebook(notebook, selected=None, secrets=None, left_out=None):
    """Return the number of exercise cells after clearing `notebook` (an nbformat node) in place.

    `left_out`, a list, receives the indices of the cells replaced by a LEFT_OUT note.
    """
    notebook.get("metadata", {}).pop("widgets", None)
    results = [student_cell(cell, selected, secrets) for cell in notebook["cells"]]
    if left_out is not None:
        left_out += [index for index, (_, replaced) in enumerate(results) if replaced]
    return sum(exercise for exercise, _ in results)


def write_student_notebooks(source_dir, out_dir, selected=None, secrets=None):
    """Write a student version of every `*.ipynb` in `source_dir` to `out_dir`, and its `*.md` files.

    Returns:
        (list of {"notebook": file name, "exercise_cells": count, "left_out_cells": [cell indices]},
         list of left-out records {"path", "what", "exercises"} for the manifest).
    """
    import nbformat

    written, left_out = [], []
    out_dir = Path(out_dir)
    for path in sorted(Path(source_dir).glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        cells = []
        count = student_notebook(notebook, selected, secrets, cells)
        out_dir.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, out_dir / path.name)
        written.append({"notebook": path.name, "exercise_cells": count, "left_out_cells": cells})
        left_out += [{"path": f"notebooks/{path.name}", "what": f"cell {index}", "exercises": "see the note there"}
                     for index in cells]
    for path in sorted(Path(source_dir).glob("*.md")):
        text, count = replace_lines(path.read_text(encoding="utf-8"), secrets or {})
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / path.name).write_text(text, encoding="utf-8")
        if count:
            left_out.append({"path": f"notebooks/{path.name}", "what": f"{count} lines", "exercises": "see the notes"})
    return written, left_out
