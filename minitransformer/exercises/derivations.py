"""Derivations: the text a student copy made to derive leaves out (`exercises make --derive`).

A docstring keeps the mathematics of a backward pass in a section of its own, Google style (the site shows it
as a box titled "Derivation"):

    Derivation:
        The forward's steps undone, the last first: ...

the heading alone on its line after a blank one, its lines indented below it, up to the next line indented
as the heading (the next section, `Args:`, or the closing quotes). What stays is the task: the summary line
and the shapes. A notebook cell that derives a layer's backward carries the tag `derives:<exercise>`
(`# %% [markdown] derives=crossentropy` in its source). A copy keeps each section's heading, its lines replaced
by a note. Left out: a derivation in code, such as a layer that is not assigned computing an assigned gradient its
own way.

This file imports nothing of the package: docs/gen_lists.py loads it by path to count derivation steps.
"""

import ast
import re

HEADING = "Derivation:"
NOTE = "Left out of this student copy: deriving it is the exercise."
TAG = "derives:"
_EQUATION = re.compile(r"=|\\Rightarrow|->")


def docstring_spans(text):
    """(first, last) 0-based line indices of each docstring in a module's source: the module's, each class's and
    each function's, in order."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str):
                found.add((first.lineno - 1, first.end_lineno - 1))
    return sorted(found)


def _indent(line):
    return len(line) - len(line.lstrip())


def sections(text, source="<text>"):
    """(heading, last) 0-based line indices, inclusive, of every Derivation section of a module's docstrings;
    ValueError naming `source` and the line for a section without indented lines or one the quotes close."""
    lines, found = text.splitlines(), []
    for first, last in docstring_spans(text):
        for index in range(first + 1, last):
            if lines[index].strip() != HEADING:
                continue
            end = index
            for later in range(index + 1, last + 1):
                if lines[later].strip() and _indent(lines[later]) <= _indent(lines[index]):
                    break
                end = later if lines[later].strip() else end
            if end == index or not lines[index + 1].strip():
                raise ValueError(f"{source}:{index + 1}: a Derivation section starts on the next line, indented")
            if end == last:
                raise ValueError(f"{source}:{end + 1}: close a docstring with a Derivation section on a line of its own")
            found.append((index, end))
    return found


def strip_derivations(text, source="<text>"):
    """`text` with the lines of every Derivation section replaced by NOTE."""
    lines = text.splitlines(keepends=True)
    for heading, end in reversed(sections(text, source)):         # from the bottom, so indices stay valid
        ending = "\r\n" if lines[heading].endswith("\r\n") else "\n"
        lines[heading + 1:end + 1] = [f"{' ' * (_indent(lines[heading]) + 4)}{NOTE}{ending}"]
    return "".join(lines)


def section_of(text, line, source="<text>"):
    """The lines (stripped) of the Derivation section in the docstring of the innermost function around the
    0-based line `line`; [] when it has none."""
    around = [node for node in ast.walk(ast.parse(text)) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
              and node.lineno - 1 <= line <= node.end_lineno - 1]
    if not around:
        return []
    body = max(around, key=lambda node: node.lineno).body[0]
    lines = text.splitlines()
    return next(([row.strip() for row in lines[heading + 1:end + 1]] for heading, end in sections(text, source)
                 if body.lineno - 1 <= heading <= body.end_lineno - 1), [])


def equations(section):
    """The derivation steps of a section's lines, counted by this rule: an equation is a row of a TeX display
    (between `$$` lines; rows end at `\\\\`) or a line outside one, that holds `=`, `->` or `\\Rightarrow`."""
    parts = "\n".join(section).split("$$")                 # odd parts: inside a display
    return sum(bool(_EQUATION.search(row)) for index, part in enumerate(parts)
               for row in (part.split("\\\\") if index % 2 else part.splitlines()))
