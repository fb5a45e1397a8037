"""Keep assigned answers out of a student copy: find every other place that shows one, and blank it.

The secrets are the non-trivial lines of the assigned regions (`regions.region_secrets`). A place
outside the regions that contains one gives the answer away:

* package code never does: a layer built on an exercise calls it (the relative-position and
  banded attentions call `ScaledDotProductAttention`), and fast forms are left out of the copy
  (`Exercise.fast_files`); the final scan of the copy (`leaks_in`) refuses a copy where one does;
* tests: the top-level function, class or assignment holding the line is removed, and with it
  every top-level definition that uses what was removed (a test of a near-solution subclass);
* notebook cells and other text: the cell or line is replaced by a note.

`LEFT_OUT` starts every note, so the copy's conftest can tell "left out" (skip) from "not written
yet" (fail, naming the exercise).

Left out: answers given away in other words (a derivation in prose, the same maths with other
names). The regions' docstrings keep the mathematics on purpose; notebook derivations are
exercise cells (`notebook.py`).
"""

import ast
from pathlib import Path

from .catalogue import exercise_of
from .regions import find_leaks, region_secrets

LEFT_OUT = "Left out of this student copy"


def package_secrets(package, regions, selected):
    """dict region name -> {secret key: region line} for the assigned regions of the reference `package`."""
    secrets = {}
    for relative in sorted({regions[name][0] for name in selected}):
        secrets.update(region_secrets((Path(package) / relative).read_text(), set(selected), relative))
    return secrets


def _exercises_of(leaks):
    return ", ".join(sorted({exercise_of(name) for _, name, _ in leaks}))


def _names_used(node):
    """Names a top-level statement reads: identifiers, attribute roots and function arguments (fixtures)."""
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    for function in (n for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        used |= {a.arg for a in function.args.args + function.args.kwonlyargs}
    return used


def _names_defined(node):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return set()


def strip_tests(text, secrets, source="<text>", names=None):
    """Remove the top-level statements of a test module that show a secret, and those that use them.

    Args:
        names: optional dict top-level name -> reason: definitions removed whatever they show.
    Returns:
        (new text, list of (removed name, exercises or reason)).
    """
    leaks = find_leaks(text, secrets)
    names = names or {}
    tree = ast.parse(text)
    if not leaks and not any(_names_defined(node) & set(names) for node in tree.body):
        return text, []
    spans = {id(node): (min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]), node.end_lineno)
             for node in tree.body}
    removed = {id(node): _exercises_of([leak for leak in leaks if spans[id(node)][0] <= leak[0] + 1 <= spans[id(node)][1]])
               for node in tree.body
               if any(spans[id(node)][0] <= leak[0] + 1 <= spans[id(node)][1] for leak in leaks)}
    outside = [leak for leak in leaks if not any(first <= leak[0] + 1 <= last for first, last in spans.values())]
    if outside:
        raise RuntimeError(f"{source}:{outside[0][0] + 1} gives away {outside[0][1]} outside any top-level statement")
    for node in tree.body:
        for name in _names_defined(node) & set(names):
            removed[id(node)] = names[name]
    gone = set().union(*(_names_defined(node) for node in tree.body if id(node) in removed))
    while True:                                            # what uses a removed definition goes too
        more = [node for node in tree.body if id(node) not in removed and _names_used(node) & gone
                and not isinstance(node, (ast.Import, ast.ImportFrom))]
        if not more:
            break
        for node in more:
            removed[id(node)] = "uses what was removed"
            gone |= _names_defined(node)
    lines = text.splitlines(keepends=True)
    notes = []
    for node in sorted((n for n in tree.body if id(n) in removed), key=lambda n: -spans[id(n)][0]):
        first, last = spans[id(node)]
        name = sorted(_names_defined(node))[0] if _names_defined(node) else f"line {first}"
        reason = removed[id(node)]
        why = reason if reason == "uses what was removed" or reason in names.values() \
            else f"it shows the answer to exercise {reason}"
        lines[first - 1:last] = [f"# {name}: {LEFT_OUT} ({why})\n"]
        notes.append((name, reason))
    return "".join(lines), list(reversed(notes))


def replace_lines(text, secrets):
    """Replace each line of a plain text that shows a secret by a note; returns (text, number replaced)."""
    leaks = find_leaks(text, secrets)
    lines = text.splitlines(keepends=True)
    for index, name, _ in leaks:
        lines[index] = f"({LEFT_OUT}: this line shows the answer to exercise {exercise_of(name)})\n"
    return "".join(lines), len({index for index, _, _ in leaks})


def copy_texts(root):
    """(path relative to root, kind, text) of every text file of a copy; notebooks by cell ("x.ipynb#3")."""
    import json

    for path in sorted(Path(root).rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".npz", ".pyc", ".png", ".pt"):
            continue
        relative = path.relative_to(root).as_posix()
        if path.suffix == ".ipynb":
            for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
                source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
                yield f"{relative}#{index}", "notebook cell", source
            continue
        try:
            yield relative, "text", path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue                                           # binary data: no source code in it


def leaks_in(root, secrets):
    """Every place of the copy in `root` that shows a secret: list of "where:line: region".."""
    found = []
    for where, _, text in copy_texts(root):
        found += [f"{where}:{index + 1}: {name}: {line}" for index, name, line in find_leaks(text, secrets)]
    return found
