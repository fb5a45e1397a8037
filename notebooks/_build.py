"""Build the notebooks in this folder from their sources in `_src/`.

Each source is a Python file in the "percent" format: a line `# %%` starts a
code cell, a line `# %% [markdown]` starts a markdown cell whose lines are
written as comments (`# text`). The committed `.ipynb` files are what readers
open; they are stored WITHOUT outputs (clean diffs; the test suite executes
every one of them), and `tests/test_notebooks.py` checks that each committed
notebook is exactly what this script builds from its source.

    python notebooks/_build.py          # rewrite every notebook from _src/
    python notebooks/_build.py --check  # exit 1 if a notebook is out of date
"""

import argparse
import pathlib
import sys

import nbformat

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = HERE / "_src"
KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}


def _cell(kind, lines):
    while lines and not lines[-1].strip():
        lines.pop()
    if kind == "markdown":
        text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in lines)
        return nbformat.v4.new_markdown_cell(text)
    return nbformat.v4.new_code_cell("\n".join(lines))


def build(source_path):
    """Return the notebook (a NotebookNode, no outputs) described by one percent-format source."""
    cells, kind, lines = [], None, []
    for line in pathlib.Path(source_path).read_text(encoding="utf-8").splitlines():
        if line.startswith("# %%"):
            if kind is not None:
                cells.append(_cell(kind, lines))
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind is not None:
            lines.append(line)
    if kind is not None:
        cells.append(_cell(kind, lines))
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
