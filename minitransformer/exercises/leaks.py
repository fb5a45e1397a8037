"""Where else an assigned answer shows: a region's non-trivial lines, compared normalised (`secret_keys`). In a
student copy, a test module loses each top-level statement showing one and every statement using what went (a
test of a near-solution subclass), other text the line; notebooks lose outputs, exercise cells' answers and any cell
still showing one. `leaks_in` is the final scan. `LEFT_OUT` starts every note, so the copy's conftest tells "left
out" (skip) from "not written yet" (fail). Left out: answers in other words (docstrings keep the mathematics, but
in a copy made to derive: `derivations.py`).
"""

import ast
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

from .catalogue import exercise_of
from .derivations import NOTE, TAG
from .regions import find_regions, hint

LEFT_OUT = "Left out of this student copy"
_OPERATION = re.compile(r"\*\*|==|!=|<=|>=|[-+*/@%<>]|[\w\])]\(|[\w\])]\[")
_NEGATIVE_LITERAL = re.compile(r"(?<![\w)\]])-(?=\d)")
_HIDDEN = re.compile(r"[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[^\n]*\n?", re.S)
_ASSIGNED = re.compile(r"^(?:return|[\w.,\[\]]+(?:\*\*|//|[-+*/@%])?=(?!=))(?P<rhs>.+)$")


def normalise(line):
    """A line as secrets are compared: comment, whitespace and every `self.` removed."""
    return re.sub(r"\s+", "", re.sub(r"#.*", "", line)).replace("self.", "")


def operations(code):
    """How many operators, calls and subscripts a normalised line does (a negative literal is none)."""
    return len(_OPERATION.findall(_NEGATIVE_LITERAL.sub("", code)))


def secret_keys(line, given):
    """The normalised strings that give a region line away: none for a trivial line or one of `given` (shown
    outside the regions); else the line, and its right-hand side if that does two operations or more."""
    code = normalise(line)
    if not code or code.endswith(":") or operations(code) == 0 or code in given:
        return set()
    assigned = _ASSIGNED.match(code)
    return {code} | ({assigned.group("rhs")} if assigned and operations(assigned.group("rhs")) >= 2 else set())


def package_secrets(package, regions, selected):
    """dict region name -> {secret key: region line} for the regions `selected` of the reference `package`
    (`regions`: its `package_regions`)."""
    secrets = {}
    for name in selected:
        relative, region = regions[name]
        lines = (Path(package) / relative).read_text(encoding="utf-8").splitlines()
        inside = {i for where, r in regions.values() if where == relative for i in range(r.begin, r.end + 1)}
        given = {normalise(line) for i, line in enumerate(lines) if i not in inside}
        secrets[name] = {key: line.strip() for line in region.body for key in secret_keys(line, given)}
    return secrets


def find_leaks(text, secrets):
    """Where `text` gives a secret away: list of (0-based line index, region name, region line), without repeats."""
    codes = [normalise(line) for line in text.splitlines()]
    joined = "\n".join(codes)                       # a key holds no newline: one search tells if any line has it
    present = [(name, key, line) for name, keys in secrets.items() for key, line in keys.items() if key in joined]
    return list(dict.fromkeys((index, name, line) for index, code in enumerate(codes)
                              for name, key, line in present if key in code))


def _names_used(node):
    """Names a top-level statement reads: identifiers, attribute roots and arguments (a test's fixtures)."""
    return {n.id if isinstance(n, ast.Name) else n.arg for n in ast.walk(node) if isinstance(n, (ast.Name, ast.arg))}


def _names_defined(node):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def strip_tests(text, secrets):
    """Remove the top-level statements of a test module that show a secret, and those that use what went;
    returns (new text, list of (removed name, the exercises it shows or why it went))."""
    text = re.sub("[\v\f\x1c-\x1e\x85\u2028\u2029]", " ", text)     # lines as Python counts them (splitlines more)
    statements = [(min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]), node.end_lineno, node)
                  for node in ast.parse(text).body]
    shown = {}                                              # statement index -> exercises it shows
    for line, region, _ in find_leaks(text, secrets):
        index = next(i for i, (first, last, _) in enumerate(statements) if first <= line + 1 <= last)
        shown.setdefault(index, set()).add(exercise_of(region))
    removed = {i: (", ".join(sorted(e)), f"it shows the answer to exercise {', '.join(sorted(e))}")
               for i, e in shown.items()}                   # index -> (for the manifest, for the note)
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


def blank_file(path, relative, secrets):
    """Blank in place what shows a secret in a copied file (`strip_tests` for Python; in other text, the line
    becomes a note; binary files are skipped); returns the left-out records {"path", "what", "exercises"}."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    if path.suffix == ".py":
        new, removed = strip_tests(text, secrets)
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


def _clear_cell(cell, selected, secrets):
    """Clear one cell in place; returns (exercise cell?, became a LEFT_OUT note?, its answer's grade_id or None). An
    exercise cell holds solution regions or is tagged `solution` (also nbgrader's): then all of it is the answer. A
    named region is cleared when assigned; an unnamed one or a tagged cell when the answer's grade_id (a check's is
    `check_` + it) starts with an assigned exercise, or there is none; then its checks lose their hidden tests."""
    if cell["cell_type"] == "code":
        cell["outputs"], cell["execution_count"] = [], None
    metadata = cell.get("metadata", {})
    nbgrader = metadata.get("nbgrader", {})
    grade_id = (nbgrader.get("grade_id") or "").removeprefix("check_") or None   # "layernorm_backward_steps": layernorm
    assigned = selected is None or not grade_id or any(f"{grade_id}_".startswith(f"{exercise_of(n)}_") for n in selected)
    source = "".join(cell["source"])                        # a file may store it as a list of lines
    if nbgrader.get("grade") and not nbgrader.get("solution") and assigned:
        cell["source"] = source = _HIDDEN.sub("", source)
    tagged = "solution" in metadata.get("tags", []) or nbgrader.get("solution")
    if tagged and assigned and not find_regions(source, "notebook cell"):
        source = "### BEGIN SOLUTION\n### END SOLUTION\n"     # the whole cell is the answer: it gets markers
    chosen = [r for r in find_regions(source) if (assigned if r.name is None else selected is None or r.name in selected)]
    lines = source.splitlines(keepends=True)
    for region in reversed(chosen):                         # from the bottom, so indices stay valid
        named = replace(region, name=region.name or grade_id, where="this cell")
        lines[region.begin + 1:region.end] = ["*Your answer here.*\n" if cell["cell_type"] == "markdown"
                                              else hint(named, "the text above the cell says what to compute")]
    if chosen:
        cell["source"] = "".join(lines)
    leaks = find_leaks("".join(cell["source"]), secrets)
    if leaks:
        shown = ", ".join(sorted({exercise_of(name) for _, name, _ in leaks}))
        note = f"{LEFT_OUT}: this cell shows the answer to exercise {shown}."
        cell["source"] = f'# {note}\nraise NotImplementedError("{note}")\n' if cell["cell_type"] == "code" else f"*{note}*\n"
    return bool(chosen), bool(leaks), grade_id


def _clear_derivation(cell, derive):
    """Leave out a cell tagged as deriving an exercise of `derive` (its text becomes NOTE); True if it was."""
    derived = {tag[len(TAG):] for tag in cell.get("metadata", {}).get("tags", []) if tag.startswith(TAG)}
    if not derived & set(derive):
        return False
    cell["source"] = f"*{NOTE}*\n" if cell["cell_type"] == "markdown" else f"# {NOTE}\n"
    return True


def student_notebook(notebook, selected=None, secrets=None, left_out=None, derive=()):
    """Clear `notebook` (an nbformat node or its JSON; its nbgrader metadata stays) in place for the assigned region
    names `selected` (None: all); returns its number of exercise cells. A cell still showing one of `secrets`
    becomes a LEFT_OUT note, its index appended to the list `left_out`; its exercise's cells lose their nbgrader
    metadata (no check is left to grade an answer left out). A cell tagged as deriving an exercise of `derive`
    becomes NOTE, its index appended too."""
    notebook.get("metadata", {}).pop("widgets", None)
    results = [_clear_cell(cell, selected, secrets or {}) for cell in notebook["cells"]]
    derived = [index for index, cell in enumerate(notebook["cells"]) if _clear_derivation(cell, derive)]
    gone = {answer for _, replaced, answer in results if replaced} - {None}
    for cell in (cell for cell, (_, _, answer) in zip(notebook["cells"], results) if answer in gone):
        cell["metadata"].pop("nbgrader")
    if left_out is not None:
        left_out += sorted({index for index, (_, replaced, _) in enumerate(results) if replaced} | set(derived))
    return sum(exercise for exercise, _, _ in results)


def write_student_notebooks(source_dir, out_dir, selected, secrets, derive=()):
    """Write a student version of every `*.ipynb` and `*.md` in `source_dir` to `out_dir` (`derive`: see
    `student_notebook`); returns ([{"notebook", "exercise_cells", "left_out_cells": [cell indices]}], the left-out
    records {"path", "what", "exercises"})."""
    written, left_out = [], []
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(source_dir).glob("*.ipynb")):
        notebook, cells = json.loads(path.read_text(encoding="utf-8")), []
        count = student_notebook(notebook, selected, secrets, cells, derive)
        (out_dir / path.name).write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                                         encoding="utf-8")
        written.append({"notebook": path.name, "exercise_cells": count, "left_out_cells": cells})
        left_out += [{"path": f"notebooks/{path.name}", "what": f"cell {index}", "exercises": "see the note there"}
                     for index in cells]
    for path in sorted(Path(source_dir).glob("*.md")):
        shutil.copy2(path, out_dir / path.name)
        left_out += blank_file(out_dir / path.name, f"notebooks/{path.name}", secrets)
    return written, left_out


def leaks_in(root, secrets):
    """Every place of the copy in `root` showing a secret, as "path:line: region: line" (a cell: "x.ipynb#3:line")."""
    found = []
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file() and p.suffix not in (".npz", ".pyc", ".png", ".pt")):
        relative = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue                                        # binary data: no source code in it
        texts = ([(f"{relative}#{i}", "".join(cell["source"])) for i, cell in enumerate(json.loads(text)["cells"])]
                 if path.suffix == ".ipynb" else [(relative, text)])
        found += [f"{where}:{index + 1}: {name}: {line}" for where, text in texts
                  for index, name, line in find_leaks(text, secrets)]
    return found
