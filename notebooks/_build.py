"""Build the notebooks in this folder from their sources in `_src/`.

Each source is a Python file in the "percent" format: a line `# %%` starts a
code cell, a line `# %% [markdown]` starts a markdown cell whose lines are
written as comments (`# text`). Two more headers make exercise cells that an
nbgrader course can release and autograde (nbgrader's cell metadata, schema 3):

    # %% [solution] layernorm_forward_steps        the student's cell; its answer sits between
                                                   the markers `### BEGIN SOLUTION` / `### END SOLUTION`
    # %% [check 2] check_layernorm_forward_steps   an autograded, locked test cell worth 2 points

A header may end with `derives=<exercise>[,<exercise>...]`: the cell derives that exercise's backward pass
(`# %% [markdown] derives=crossentropy`); it carries the tag `derives:crossentropy`, and a student copy made to
derive (`exercises make --notebooks --derive`) leaves it out when the exercise is assigned.

The word after the header is the cell's nbgrader `grade_id` (letters, digits, `_`, `-`; unique). A solution
cell's grade_id starts with the name of its exercise in the catalogue (`layernorm`, or a notebook-only one such
as `warmup_rule`); its check cell follows it and is named `check_` + the solution's grade_id, so that a student
copy (`exercises make --notebooks`) blanks the assigned answers, takes hidden tests
(`### BEGIN HIDDEN TESTS` / `### END HIDDEN TESTS`) out of their checks, and never keeps a check whose answer
it had to leave out. The committed `.ipynb` files are what readers
open; they are stored WITHOUT outputs (clean diffs; the test suite executes
every one of them), and `tests/test_notebooks.py` checks that each committed
notebook is exactly what this script builds from its source.

    python notebooks/_build.py          # rewrite every notebook from _src/
    python notebooks/_build.py --check  # exit 1 if a notebook is out of date
"""

import argparse
import pathlib
import re
import sys

import nbformat

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = HERE / "_src"
KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}
_HEADER = re.compile(r"^# %%(?:\s+\[(?P<kind>markdown|solution|check(?:\s+(?P<points>\d+(?:\.\d+)?))?)\]"
                     r"(?:\s+(?P<grade_id>[A-Za-z0-9_-]+))?)?(?:\s+derives=(?P<derives>\w+(?:,\w+)*))?\s*$")


def _nbgrader(kind, points, grade_id, where):
    """nbgrader's cell metadata (schema 3) for a solution or check cell, None for a plain one."""
    if kind in (None, "markdown"):
        return None
    if not grade_id:
        raise ValueError(f"{where}: a [{kind}] cell needs a grade_id after the header")
    check = kind.startswith("check")
    metadata = {"grade": check, "grade_id": grade_id, "locked": check, "schema_version": 3, "solution": not check}
    if check:
        metadata["points"] = float(points) if points and "." in points else int(points or 1)
    return metadata


def _cell(kind, lines, nbgrader=None, derives=None):
    while lines and not lines[-1].strip():
        lines.pop()
    if kind == "markdown":
        text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in lines)
        cell = nbformat.v4.new_markdown_cell(text)
    else:
        cell = nbformat.v4.new_code_cell("\n".join(lines))
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    if derives:
        cell.metadata["tags"] = [f"derives:{name}" for name in derives.split(",")]
    return cell


def build(source_path):
    """Return the notebook (a NotebookNode, no outputs) described by one percent-format source."""
    cells, kind, lines, nbgrader, grade_ids, answer, derives = [], None, [], None, set(), None, None
    for number, line in enumerate(pathlib.Path(source_path).read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("# %%"):
            header = _HEADER.match(line)
            if header is None:
                raise ValueError(f"{source_path}:{number}: unknown cell header {line!r}")
            if kind is not None:
                cells.append(_cell(kind, lines, nbgrader, derives))
            kind, lines = ("markdown" if header.group("kind") == "markdown" else "code"), []
            derives = header.group("derives")
            nbgrader = _nbgrader(header.group("kind"), header.group("points"), header.group("grade_id"),
                                 f"{source_path}:{number}")
            if nbgrader and nbgrader["grade_id"] in grade_ids:
                raise ValueError(f"{source_path}:{number}: grade_id {nbgrader['grade_id']} is used twice")
            grade_ids |= {nbgrader["grade_id"]} if nbgrader else set()
            answer = nbgrader["grade_id"] if nbgrader and nbgrader["solution"] else answer
            if nbgrader and nbgrader["grade"] and nbgrader["grade_id"] != f"check_{answer}":
                raise ValueError(f"{source_path}:{number}: a check cell is named check_ + the grade_id of the "
                                 f"solution cell above it (check_{answer}), not {nbgrader['grade_id']}")
        elif kind is not None:
            lines.append(line)
    if kind is not None:
        cells.append(_cell(kind, lines, nbgrader, derives))
    for index, cell in enumerate(cells):       # stable ids, so a rebuild gives the same file
        cell["id"] = f"cell-{index:02d}"
    notebook = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": KERNEL,
                                                               "language_info": {"name": "python"}})
    return notebook


def render(notebook):
    """The exact text written to disk."""
    return nbformat.writes(notebook) + "\n"


def targets():
    """(source, notebook path) for every source, in reading order."""
    return [(source, HERE / f"{source.stem}.ipynb") for source in sorted(SOURCES.glob("[0-9][0-9]_*.py"))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report notebooks that differ from their source")
    args = parser.parse_args(argv)
    stale = []
    for source, path in targets():
        text = render(build(source))
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(HERE.parent)}")
    if stale:
        print("out of date (run python notebooks/_build.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
