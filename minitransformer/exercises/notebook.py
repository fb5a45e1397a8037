"""Student versions of notebooks: outputs stripped, solution cells cleared, nbgrader metadata kept.

An exercise cell holds solution regions (a named one is cleared when assigned, as in the package) or is
tagged `solution` (or nbgrader `solution`): then its whole source becomes the hint between markers. An
unnamed region or a tagged cell belongs to the exercise its nbgrader `grade_id` starts with
(`layernorm_backward_steps`: layernorm) and is cleared when that is assigned (always, without a grade_id
or a selection). A cell still showing an assigned answer of the package becomes a LEFT_OUT note. The
nbgrader metadata stays, so an nbgrader course built on the reference notebook can autograde the copy
(`pip install -e ".[nbgrader]"`). Notebooks are read and written as plain JSON, with no Jupyter package.
"""

import json
import shutil
from dataclasses import replace
from pathlib import Path

from .catalogue import exercise_of
from .leaks import LEFT_OUT, blank_file, cell_source, exercises_shown
from .regions import find_leaks, find_regions, hint

SOLUTION_TAG = "solution"


def _clear_cell(cell, selected, secrets):
    """Clear one cell in place; returns (True if it is an exercise cell, True if it became a LEFT_OUT note)."""
    if cell["cell_type"] == "code":
        cell["outputs"], cell["execution_count"] = [], None
    metadata = cell.get("metadata", {})
    nbgrader = metadata.get("nbgrader", {})
    grade_id = nbgrader.get("grade_id")                     # "layernorm_backward_steps": exercise layernorm
    assigned = selected is None or not grade_id or any(f"{grade_id}_".startswith(f"{exercise_of(n)}_") for n in selected)
    source = cell_source(cell)
    regions = find_regions(source, "notebook cell")
    chosen = [r for r in regions if (assigned if r.name is None else selected is None or r.name in selected)]
    if not regions and assigned and (SOLUTION_TAG in metadata.get("tags", []) or nbgrader.get("solution")):
        source = "### BEGIN SOLUTION\n### END SOLUTION\n"     # the whole cell is the answer: it gets markers
        chosen = find_regions(source)
    if chosen:
        lines = source.splitlines(keepends=True)
        for region in reversed(chosen):                     # from the bottom, so indices stay valid
            named = replace(region, name=region.name or grade_id, where="this cell")
            lines[region.begin + 1:region.end] = ["*Your answer here.*\n" if cell["cell_type"] == "markdown"
                                                  else hint(named, "the text above the cell says what to compute")]
        cell["source"] = "".join(lines)
    leaks = find_leaks(cell_source(cell), secrets) if secrets else []
    if leaks:
        note = f"{LEFT_OUT}: this cell shows the answer to exercise {exercises_shown(leaks)}."
        cell["source"] = f'# {note}\nraise NotImplementedError("{note}")\n' if cell["cell_type"] == "code" else f"*{note}*\n"
    return bool(chosen), bool(leaks)


def student_notebook(notebook, selected=None, secrets=None, left_out=None):
    """Clear `notebook` (an nbformat node or its JSON) in place for the assigned region names `selected` (None: all)
    and return its number of exercise cells; a cell still showing one of `secrets` (`leaks.package_secrets`)
    becomes a LEFT_OUT note, and its index is appended to the list `left_out`."""
    notebook.get("metadata", {}).pop("widgets", None)
    results = [_clear_cell(cell, selected, secrets) for cell in notebook["cells"]]
    if left_out is not None:
        left_out += [index for index, (_, replaced) in enumerate(results) if replaced]
    return sum(exercise for exercise, _ in results)


def write_student_notebooks(source_dir, out_dir, selected=None, secrets=None):
    """Write a student version of every `*.ipynb` and `*.md` in `source_dir` to `out_dir`.

    Returns:
        (list of {"notebook": file name, "exercise_cells": count, "left_out_cells": [cell indices]},
         list of left-out records {"path", "what", "exercises"} for the manifest).
    """
    written, left_out = [], []
    out_dir = Path(out_dir)
    for path in sorted(Path(source_dir).glob("*.ipynb")):
        notebook, cells = json.loads(path.read_text(encoding="utf-8")), []
        count = student_notebook(notebook, selected, secrets, cells)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / path.name).write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                                         encoding="utf-8")
        written.append({"notebook": path.name, "exercise_cells": count, "left_out_cells": cells})
        left_out += [{"path": f"notebooks/{path.name}", "what": f"cell {index}", "exercises": "see the note there"}
                     for index in cells]
    for path in sorted(Path(source_dir).glob("*.md")):
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, out_dir / path.name)
        left_out += blank_file(out_dir / path.name, f"notebooks/{path.name}", secrets or {})
    return written, left_out
