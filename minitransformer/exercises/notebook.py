"""Student notebooks: outputs stripped, solution cells cleared, nbgrader metadata kept (an nbgrader course
built on the reference notebook autogrades the copy), read and written as plain JSON.

An exercise cell holds solution regions, or is tagged `solution` (or nbgrader `solution`): then its whole
source becomes the hint between markers. A named region is cleared when assigned; an unnamed one, or a
tagged cell, when the exercise its nbgrader `grade_id` starts with is (`layernorm_backward_steps`), or
always without either. A cell still showing an assigned answer of the package becomes a LEFT_OUT note.
"""

import json
import shutil
from dataclasses import replace
from pathlib import Path

from .catalogue import exercise_of
from .leaks import LEFT_OUT, blank_file, cell_source
from .regions import find_leaks, find_regions, hint


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
    if not regions and assigned and ("solution" in metadata.get("tags", []) or nbgrader.get("solution")):
        source = "### BEGIN SOLUTION\n### END SOLUTION\n"     # the whole cell is the answer: it gets markers
        chosen = find_regions(source)
    if chosen:
        lines = source.splitlines(keepends=True)
        guide = "the text above the cell says what to compute"
        for region in reversed(chosen):                     # from the bottom, so indices stay valid
            named = replace(region, name=region.name or grade_id, where="this cell")
            answer = "*Your answer here.*\n" if cell["cell_type"] == "markdown" else hint(named, guide)
            lines[region.begin + 1:region.end] = [answer]
        cell["source"] = "".join(lines)
    leaks = find_leaks(cell_source(cell), secrets) if secrets else []
    if leaks:
        shown = ", ".join(sorted({exercise_of(name) for _, name, _ in leaks}))
        note = f"{LEFT_OUT}: this cell shows the answer to exercise {shown}."
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
    """Write a student version of every `*.ipynb` and `*.md` in `source_dir` to `out_dir`; returns ([{"notebook",
    "exercise_cells", "left_out_cells": [cell indices]}], the left-out records {"path", "what", "exercises"})."""
    written, left_out = [], []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(source_dir).glob("*.ipynb")):
        notebook, cells = json.loads(path.read_text(encoding="utf-8")), []
        count = student_notebook(notebook, selected, secrets, cells)
        (out_dir / path.name).write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                                         encoding="utf-8")
        written.append({"notebook": path.name, "exercise_cells": count, "left_out_cells": cells})
        left_out += [{"path": f"notebooks/{path.name}", "what": f"cell {index}", "exercises": "see the note there"}
                     for index in cells]
    for path in sorted(Path(source_dir).glob("*.md")):
        shutil.copy2(path, out_dir / path.name)
        left_out += blank_file(out_dir / path.name, f"notebooks/{path.name}", secrets or {})
    return written, left_out
