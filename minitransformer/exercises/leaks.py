"""Keep assigned answers (`regions.region_secrets`) out of a student copy: every other place showing one is blanked.

A test module loses each top-level statement showing one and every statement using what went (a test of a
near-solution subclass); other text loses the line; `leaks_in` is the final scan of the copy. `LEFT_OUT` starts
every note, so the copy's conftest tells "left out" (skip) from "not written yet" (fail). Left out: answers
in other words (the regions' docstrings keep the mathematics on purpose).
"""

import ast
import json
from pathlib import Path

from .catalogue import exercise_of
from .regions import find_leaks, region_secrets

LEFT_OUT = "Left out of this student copy"


def package_secrets(package, regions, selected):
    """dict region name -> {secret key: region line} for the assigned regions of the reference `package`."""
    return {name: keys for relative in sorted({regions[name][0] for name in selected})
            for name, keys in region_secrets((Path(package) / relative).read_text(), set(selected), relative).items()}


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
    return set()


def strip_tests(text, secrets, names=None):
    """Remove the top-level statements of a test module that show a secret or define one of `names` (dict
    name -> reason), and those that use them; returns (new text, list of (removed name, exercises or reason))."""
    names = names or {}
    statements = [(min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]), node.end_lineno, node)
                  for node in ast.parse(text).body]
    shown = {}                                              # statement index -> exercises it shows
    for line, region, _ in find_leaks(text, secrets):
        index = next(i for i, (first, last, _) in enumerate(statements) if first <= line + 1 <= last)
        shown.setdefault(index, set()).add(exercise_of(region))
    removed = {i: (", ".join(sorted(e)), f"it shows the answer to exercise {', '.join(sorted(e))}")
               for i, e in shown.items()}                   # index -> (for the manifest, for the note)
    for index, (_, _, node) in enumerate(statements):
        for name in _names_defined(node) & set(names):
            removed[index] = (names[name], names[name])
    gone, more = set(), list(removed)
    while more:                                             # what uses a removed definition goes too
        gone |= set().union(*(_names_defined(statements[i][2]) for i in more))
        more = [i for i, (_, _, node) in enumerate(statements) if i not in removed and _names_used(node) & gone]
        removed.update({i: ("uses what was removed",) * 2 for i in more})
    lines, notes = text.splitlines(keepends=True), []
    for index in sorted(removed, reverse=True):             # from the bottom, so line numbers stay valid
        first, last, node = statements[index]
        name = min(_names_defined(node), default=f"line {first}")
        lines[first - 1:last] = [f"# {name}: {LEFT_OUT} ({removed[index][1]})\n"]
        notes.insert(0, (name, removed[index][0]))
    return "".join(lines), notes


def blank_file(path, relative, secrets, names=None):
    """Blank in place what shows a secret in a copied file (`strip_tests` for Python; in other text, the line
    becomes a note; binary files are skipped); returns the left-out records {"path", "what", "exercises"}."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    if path.suffix == ".py":
        new, removed = strip_tests(text, secrets, names)
        records = [{"path": relative, "what": name, "exercises": why} for name, why in removed]
    else:
        leaks, lines = find_leaks(text, secrets), text.splitlines(keepends=True)
        for index, name, _ in leaks:
            lines[index] = f"({LEFT_OUT}: this line shows the answer to exercise {exercise_of(name)})\n"
        new, count = "".join(lines), len({index for index, _, _ in leaks})
        records = [{"path": relative, "what": f"{count} lines", "exercises": "see the notes there"}] if count else []
    if new != text:                                         # else untouched (a data file keeps its line ends)
        path.write_text(new, encoding="utf-8")
    return records


def cell_source(cell):
    """A notebook cell's source as one string (a file may store it as a list of lines)."""
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def leaks_in(root, secrets):
    """Every place of the copy in `root` showing a secret, as "path:line: region: line" (a cell: "x.ipynb#3:line")."""
    found = []
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file() and p.suffix not in (".npz", ".pyc", ".png", ".pt")):
        relative = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue                                        # binary data: no source code in it
        texts = ([(f"{relative}#{i}", cell_source(cell)) for i, cell in enumerate(json.loads(text)["cells"])]
                 if path.suffix == ".ipynb" else [(relative, text)])
        found += [f"{where}:{index + 1}: {name}: {line}" for where, text in texts
                  for index, name, line in find_leaks(text, secrets)]
    return found
