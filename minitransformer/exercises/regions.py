"""Solution regions: the marked parts of the reference code an instructor may assign, and their secrets.

A region is the lines between `### BEGIN SOLUTION <exercise>.<part>` and `### END SOLUTION`, each
marker a comment line of its own, indented like the code (nbgrader's and otter-grader's markers; see
`layers/layernorm.py`). `--only layernorm` selects every part of an exercise, `--only
layernorm.backward` one. A student copy keeps the markers and replaces the lines between them by a
`raise NotImplementedError(...)` hint; the grader reads the answer back from between them. Left out:
nesting, and unnamed regions in Python files (notebook cells may have them, `notebook.py`).

Secrets: a region line is a secret unless trivial (a block header, a line without an operation, or one
its own file shows outside the regions anyway). Lines compare normalised (comments, whitespace and
`self.` dropped); `find_leaks` reports every line of a text that holds a secret, or the right-hand side
of one that does two operations or more (`t = np.tanh(<GELU's right-hand side>)`).
"""

import re
from dataclasses import dataclass
from pathlib import Path

BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION(?:[ \t]+(?P<name>\S+))?[ \t]*$")
END = re.compile(r"^[ \t]*### END SOLUTION[ \t]*$")
HINT_MARK = 'raise NotImplementedError("Exercise'        # how every hint begins
_DEF = re.compile(r"^(?P<indent>[ \t]*)(?:def|class)[ \t]+(?P<name>\w+)")


@dataclass
class Region:
    """One marked region of a text: the BEGIN line index `begin`, the END line index `end` (both 0-based)."""

    name: str                  # "layernorm.backward", or None when the marker has no name
    begin: int
    end: int
    indent: str                # the BEGIN marker's indentation, reused for the hint
    body: list                 # the lines strictly between the markers, each ending in "\n"
    where: str = ""            # enclosing function, e.g. "LayerNorm.backward" (Python sources only)

    def is_blank(self):
        """True when the body is a hint left by `exercises make`, i.e. not yet implemented."""
        return any(line.strip().startswith(HINT_MARK) for line in self.body)


def find_regions(text, source="<text>"):
    """Return the regions of `text` in order; raise ValueError on unbalanced or nested markers.

    Args:
        text: a Python source or a notebook cell's source.
        source: what to call it in error messages (a path).
    Returns:
        list of Region.
    """
    lines = text.splitlines(keepends=True)
    regions, open_at = [], None
    for index, line in enumerate(lines):
        begin, end = BEGIN.match(line.rstrip("\r\n")), END.match(line.rstrip("\r\n"))
        if begin:
            if open_at is not None:
                raise ValueError(f"{source}:{index + 1}: BEGIN SOLUTION inside the region opened at line {open_at + 1}")
            open_at, name, indent = index, begin.group("name"), begin.group("indent")
        elif end:
            if open_at is None:
                raise ValueError(f"{source}:{index + 1}: END SOLUTION without a BEGIN SOLUTION")
            body = [line if line.endswith("\n") else line + "\n" for line in lines[open_at + 1:index]]
            regions.append(Region(name, open_at, index, indent, body, _enclosing(lines, open_at, indent)))
            open_at = None
    if open_at is not None:
        raise ValueError(f"{source}:{open_at + 1}: BEGIN SOLUTION never closed by END SOLUTION")
    return regions


def _enclosing(lines, index, indent):
    """Dotted name of the functions and classes around line `index`, e.g. "LayerNorm.backward"."""
    names, width = [], len(indent)
    for line in reversed(lines[:index]):
        match = _DEF.match(line)
        if match and len(match.group("indent")) < width:
            names.append(match.group("name"))
            width = len(match.group("indent"))
    return ".".join(reversed(names))


def hint(region):
    """The line that replaces a region's body in a student copy: it names the exercise and the function."""
    name = f" {region.name}" if region.name else ""
    where = f" in {region.where}" if region.where else ""
    return (f'{region.indent}{HINT_MARK}{name}: write the missing code{where} between the SOLUTION markers '
            f'(keep them); the docstring gives the shapes and the mathematics")\n')


def replace_regions(text, bodies, source="<text>"):
    """Return `text` with the body of each region named in `bodies` replaced.

    Args:
        text: the source.
        bodies: dict region name -> list of lines (each ending in "\\n") to put between the markers.
        source: for error messages.
    Returns:
        the new text; the markers themselves are kept.
    """
    lines = text.splitlines(keepends=True)
    for region in reversed(find_regions(text, source)):        # from the bottom, so indices stay valid
        if region.name in bodies:
            lines[region.begin + 1:region.end] = bodies[region.name]
    return "".join(lines)


def blank_regions(text, selected, source="<text>"):
    """Return `text` with every region whose name is in `selected` replaced by its hint."""
    regions = find_regions(text, source)
    return replace_regions(text, {r.name: [hint(r)] for r in regions if r.name in selected}, source)


_COMMENT = re.compile(r"#.*$")
_OPERATION = re.compile(r"\*\*|==|!=|<=|>=|[-+*/@%<>]|[\w\])]\(|[\w\])]\[")
_NEGATIVE_LITERAL = re.compile(r"(?<![\w)\]])-(?=\d)")
_ASSIGNED = re.compile(r"^(?:return|[\w.,\[\]]+(?:\*\*|//|[-+*/@%])?=(?!=))(?P<rhs>.+)$")


def normalise(line):
    """A line as secrets are compared: comment, whitespace and every `self.` removed."""
    return re.sub(r"\s+", "", _COMMENT.sub("", line)).replace("self.", "")


def operations(code):
    """How many operators, calls and subscripts a normalised line does (a negative literal is none)."""
    return len(_OPERATION.findall(_NEGATIVE_LITERAL.sub("", code)))


def secret_keys(line, given=frozenset()):
    """The normalised strings of one region line whose presence elsewhere gives the line away.

    Args:
        line: a line of a region's body.
        given: normalised lines the region's own file shows outside its regions (never secret).
    Returns:
        set of str: empty for a trivial line; else the whole line, and its right-hand side when
        that does two operations or more.
    """
    code = normalise(line)
    if not code or code.endswith(":") or operations(code) == 0 or code in given:
        return set()
    keys = {code}
    assigned = _ASSIGNED.match(code)
    if assigned and operations(assigned.group("rhs")) >= 2:
        keys.add(assigned.group("rhs"))
    return keys


def region_secrets(text, names, source="<text>"):
    """dict region name -> {secret key: the region line} for the regions of `text` named in `names`."""
    regions = find_regions(text, source)
    inside = {i for r in regions for i in range(r.begin, r.end + 1)}
    given = {normalise(line) for i, line in enumerate(text.splitlines()) if i not in inside}
    secrets = {}
    for region in regions:
        if region.name in names:
            for line in region.body:
                for key in secret_keys(line, given):
                    secrets.setdefault(region.name, {})[key] = line.strip()
    return secrets


def find_leaks(text, secrets):
    """Where `text` gives a secret away.

    Args:
        text: any text (a source file, a notebook cell, a README).
        secrets: dict region name -> {key: region line}, as `region_secrets` returns.
    Returns:
        list of (0-based line index, region name, the region line it gives away).
    """
    codes = [normalise(line) for line in text.splitlines()]
    joined = "\n".join(codes)                       # a key holds no newline: one search tells if any line has it
    present = {name: {key: original for key, original in keys.items() if key in joined}
               for name, keys in secrets.items()}
    leaks = []
    for index, code in enumerate(codes):
        for name, keys in present.items():
            hit = next((original for key, original in keys.items() if key in code), None)
            if hit is not None:
                leaks.append((index, name, hit))
    return leaks


def package_regions(package_dir):
    """Every named region of a package: dict name -> (path relative to package_dir, Region).

    Raises ValueError for a region without a name or a name used twice.
    """
    package_dir = Path(package_dir)
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        if "__pycache__" in path.parts or path.parent.name == "exercises":     # this package only talks about markers
            continue
        relative = path.relative_to(package_dir).as_posix()
        for region in find_regions(path.read_text(), relative):
            if region.name is None:
                raise ValueError(f"{relative}:{region.begin + 1}: a region in the package needs a name "
                                 f"(### BEGIN SOLUTION <exercise>.<part>)")
            if region.name in found:
                raise ValueError(f"{relative}:{region.begin + 1}: region {region.name} is also in {found[region.name][0]}")
            found[region.name] = (relative, region)
    return found
