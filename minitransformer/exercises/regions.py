"""Solution regions: the lines between `### BEGIN SOLUTION <exercise>.<part>` and `### END SOLUTION`
(nbgrader's markers, each a comment line; see `layers/layernorm.py`). A student copy keeps the markers
around a `raise NotImplementedError(...)` hint; the grader reads the answer back from between them.
Left out: nesting, and unnamed regions in the package (notebook cells may have them).
"""

import re
from dataclasses import dataclass
from pathlib import Path

BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION(?:[ \t]+(?P<name>\S+))?[ \t]*$")
END = re.compile(r"^[ \t]*### END SOLUTION[ \t]*$")
HINT_MARK = 'raise NotImplementedError("Exercise'        # how every hint begins
GUIDE = "the docstring gives the shapes and the mathematics"
DERIVE_GUIDE = "the docstring gives the shapes and the task: deriving the gradient is yours"   # a backward, --derive
_DEF = re.compile(r"^(?P<indent>[ \t]*)(?:def|class)[ \t]+(?P<name>\w+)")


@dataclass
class Region:
    """One marked region: its markers' 0-based line indices, the lines between them (each ending in "\\n")."""

    name: str                  # "layernorm.backward", or None when the marker has no name
    begin: int
    end: int
    indent: str                # the BEGIN marker's, reused for the hint
    body: list
    where: str = ""            # enclosing function, e.g. "LayerNorm.backward"

    def is_blank(self):
        """True when the body is a hint left by `exercises make`, i.e. not yet implemented."""
        return any(line.strip().startswith(HINT_MARK) for line in self.body)


def find_regions(text, source="<text>"):
    """The regions of `text` in order; ValueError naming `source` for unbalanced or nested markers."""
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


def hint(region, guide=GUIDE):
    """The line that replaces a region's body in a student copy: it names the exercise, the function and `guide`."""
    name, where = f" {region.name}" if region.name else "", f" in {region.where}" if region.where else ""
    return (f'{region.indent}{HINT_MARK}{name}: write the missing code{where} between the SOLUTION markers '
            f'(keep them); {guide}")\n')


def replace_regions(text, bodies, source="<text>"):
    """`text` with the body of each region named in `bodies` (dict name -> lines ending in "\\n") replaced."""
    lines = text.splitlines(keepends=True)
    for region in reversed(find_regions(text, source)):        # from the bottom, so indices stay valid
        if region.name in bodies:
            lines[region.begin + 1:region.end] = bodies[region.name]
    return "".join(lines)


def blank_regions(text, selected, source="<text>", derive=False):
    """Return `text` with every region whose name is in `selected` replaced by its hint (`derive`: a backward's
    hint says the derivation is the student's)."""
    guide = {True: DERIVE_GUIDE, False: GUIDE}
    return replace_regions(text, {r.name: [hint(r, guide[derive and r.name.endswith(".backward")])]
                                  for r in find_regions(text, source) if r.name in selected}, source)


def package_regions(package_dir):
    """dict region name -> (path relative to package_dir, Region); ValueError for a region unnamed or named twice."""
    package_dir, found = Path(package_dir), {}
    for path in sorted(p for p in package_dir.rglob("*.py") if p.parent.name != "exercises"):   # it talks about markers
        relative = path.relative_to(package_dir).as_posix()
        for region in find_regions(path.read_text(encoding="utf-8"), relative):
            if region.name is None:
                raise ValueError(f"{relative}:{region.begin + 1}: a region in the package needs a name "
                                 f"(### BEGIN SOLUTION <exercise>.<part>)")
            if region.name in found:
                raise ValueError(f"{relative}:{region.begin + 1}: region {region.name} is also in {found[region.name][0]}")
            found[region.name] = (relative, region)
    return found
