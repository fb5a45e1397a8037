"""The instructor's assignment: what is graded, for how many points, on which inputs, against which reference.
`exercises make` writes it beside the student copy, never into it (`<copy>.assignment.json`), and `exercises grade`
grades by it alone, so a student who edits the copy's `exercises.json` changes nothing. Its seed draws the inputs
(a regrade gives the same verdict), and grading stops when the reference no longer matches its hashes. `derive`: the
copy was made to derive (absent: not). The points may be edited (any number > 0 per region; one left out is not graded):

    {"format": "minitransformer-assignment/1", "minitransformer": "0.3.0", "seed": 2718281828,
     "tolerance": 1e-07, "derive": false, "exercises": [{"name": "layernorm", "points": {"layernorm.backward": 1}}],
     "reference": {"files": {"layers/layernorm.py": "<sha256 of the file>", ...}}}
"""

import hashlib
import importlib.machinery
import json
import marshal
import math
import re
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..gradcheck.checker import DEFAULT_TOLERANCE
from .catalogue import EXERCISES, exercise_of

FORMAT = "minitransformer-assignment/1"
SUFFIX = ".assignment.json"


class AssignmentError(ValueError):
    """An assignment file that cannot be used: missing, malformed, or for another reference."""


class ReferenceChanged(RuntimeError):
    """The reference package on disk is not the one the assignment was made with: grading stops."""


def default_path(copy):
    """Where `exercises make` puts the assignment of the copy `copy`: beside it, `<copy>.assignment.json`."""
    copy = Path(copy)
    return copy.parent / f"{copy.name or 'copy'}{SUFFIX}"


def reference_files(package):
    """dict path relative to `package` -> sha256 of its bytes, for every .py file (no __pycache__)."""
    package = Path(package)
    return {path.relative_to(package).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(package.rglob("*.py")) if "__pycache__" not in path.parts}


@dataclass
class Assignment:
    """What an instructor grades; see the module docstring for the file."""

    points: dict                        # region name -> points (the graded regions)
    seed: int
    tolerance: float = DEFAULT_TOLERANCE
    reference: dict = field(default_factory=dict)     # {"files": {path relative to the package: sha256}}
    made_by: str = __version__
    derive: bool = False                # the copy was made to derive: its derivations were left out

    def check_regions(self, known_regions, path="the assignment"):
        """Raise AssignmentError unless every graded region is a region of the reference."""
        unknown = sorted(set(self.points) - set(known_regions))
        if unknown:
            exercise = exercise_of(unknown[0])
            own = sorted(r for r in known_regions if exercise_of(r) == exercise)
            raise AssignmentError(f"{path}: exercise {exercise!r} expected regions of that exercise "
                                  f"({', '.join(own) or 'none: no such exercise'}), got {unknown[0]!r}")

    def exercises(self):
        """The graded exercises in catalogue order: list of (Exercise, {region: points})."""
        return [(e, {name: p for name, p in sorted(self.points.items()) if exercise_of(name) == e.name})
                for e in EXERCISES if any(exercise_of(name) == e.name for name in self.points)]

    def to_json(self):
        grouped = [{"name": e.name, "points": points} for e, points in self.exercises()]
        return {"format": FORMAT, "minitransformer": self.made_by, "seed": self.seed, "tolerance": self.tolerance,
                "derive": self.derive, "exercises": grouped, "reference": self.reference}


def new_assignment(regions, package, seed=None, derive=False):
    """An Assignment of one point per region ("layernorm.backward") in `regions`, against the reference package
    directory `package`; `seed` None draws one at random, so no two courses share inputs; `derive`: the copy was
    made to derive."""
    return Assignment({name: 1 for name in sorted(regions)}, secrets.randbelow(2**32) if seed is None else int(seed),
                      reference={"files": reference_files(package)}, derive=bool(derive))


def check_writable(path, force=False):
    """Raise FileExistsError when `path` exists, unless `force` is set and it is a file (never overwritten unasked)."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise FileExistsError(f"the assignment path {path} is a directory; give a file name")
    if path.exists() and not force:
        raise FileExistsError(f"the assignment {path} exists already; choose another --assignment, or pass --force")


def write_assignment(path, assignment, force=False):
    """Write `assignment` to `path` as JSON, readable by its owner only (it holds the inputs' seed)."""
    path = Path(path)
    check_writable(path, force)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(assignment.to_json(), indent=2) + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def read_assignment(path, known_regions=None):
    """The Assignment in the file `path`, checked; AssignmentError names the field that is wrong. `known_regions`:
    the reference's regions, to check the graded ones against (None: later, by `Assignment.check_regions`)."""
    path = Path(path)
    if not path.is_file():
        raise AssignmentError(f"no assignment file {path} (exercises make writes it beside the student copy, "
                              f"as <copy>{SUFFIX}; give another with --assignment FILE)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise AssignmentError(f"the assignment {path} is not valid JSON ({error})") from None

    def bad(what, expected, got):
        return AssignmentError(f"the assignment {path}: {what} expected {expected}, got {got!r}")

    fields = data if isinstance(data, dict) else {"format": data}
    seed, tolerance, reference, exercises = (fields.get(key) for key in ("seed", "tolerance", "reference", "exercises"))
    derive = fields.get("derive", False)                # absent: a file written before 0.5.0, no copy made to derive
    for what, expected, ok in (                         # JSON numbers are int or float; true and false are bool
            ("format", repr(FORMAT), fields.get("format") == FORMAT),
            ("seed", "a whole number >= 0", type(seed) is int and seed >= 0),
            ("tolerance", "a number in (0, 1)", type(tolerance) in (int, float) and 0 < tolerance < 1),
            ("derive", "true or false", type(derive) is bool),
            ("reference", '{"files": {path: sha256}}', isinstance(reference, dict) and isinstance(reference.get("files"), dict)),
            ("exercises", "a non-empty list", isinstance(exercises, list) and exercises)):
        if not ok:
            raise bad(what, expected, fields.get(what))
    points = {}
    for entry in exercises:
        if not isinstance(entry, dict) or not isinstance(entry.get("points"), dict):
            raise bad("each exercise", '{"name": ..., "points": {region: points}}', entry)
        for name, value in entry["points"].items():
            if exercise_of(name) != entry.get("name"):
                raise bad(f"exercise {entry.get('name')!r}", "regions named <exercise>.forward or .backward", name)
            if type(value) not in (int, float) or not 0 < value < math.inf:
                raise bad(f"points of {name}", "a number > 0", value)
            points[name] = value
    assignment = Assignment(points, seed, float(tolerance), reference, str(fields.get("minitransformer", "unknown")),
                            derive)
    if known_regions is not None:
        assignment.check_regions(known_regions, f"the assignment {path}")
    return assignment


_SOUND_CODE = set()             # sha256 of byte-code files found to hold exactly their verified source's code


def foreign_code(package):
    """Files of `package` that this Python would import instead of, or besides, its .py sources: an extension module,
    a .pyc outside __pycache__, or a byte-code cache whose code is not that of its source (a submission run as the
    grader's own user can write one; every later import of the reference would run it)."""
    package, found, tag, machinery = Path(package), [], sys.implementation.cache_tag, importlib.machinery
    suffixes = tuple(machinery.BYTECODE_SUFFIXES + machinery.EXTENSION_SUFFIXES)       # what imports but .py
    for path in sorted(p for p in package.rglob("*") if p.name.endswith(suffixes) and p.is_file()):
        cached = re.fullmatch(rf"(\w+)\.{re.escape(str(tag))}(?:\.opt-(\d))?\.pyc", path.name)
        if path.parent.name == "__pycache__" and not cached:
            continue                                    # another Python's cache: never loaded by this one
        source = path.parent.parent / f"{cached[1]}.py" if cached else None
        if source is None or not source.is_file():
            found += [] if source else [path]           # a cache without its source is never loaded
            continue
        digest = hashlib.sha256(data := path.read_bytes()).hexdigest()
        try:                # a 16-byte header, then the code; code objects compare by what they do, not where from
            sound = digest in _SOUND_CODE or marshal.loads(data[16:]) == compile(
                source.read_bytes(), str(source), "exec", dont_inherit=True, optimize=int(cached[2] or 0))
        except (ValueError, EOFError, TypeError, SyntaxError):
            sound = False
        _SOUND_CODE.update([digest] if sound else [])
        found += [] if sound else [path]
    return [path.relative_to(package).as_posix() for path in found]


def verify_reference(package, assignment):
    """Raise ReferenceChanged unless the .py files of `package` hash to the assignment's reference and no other code
    would be imported in their place (`foreign_code`)."""
    files, expected = reference_files(package), assignment.reference["files"]
    changed = sorted(name for name in set(files) | set(expected) if files.get(name) != expected.get(name))
    foreign = foreign_code(package)
    if foreign:
        raise ReferenceChanged(f"the reference package {package} holds code that is not its sources' ({', '.join(foreign[:5])}"
                               f"): a submission wrote it (under --isolation process as your own user), or another "
                               f"install did; refusing to grade. Delete those files (byte-code caches are written "
                               f"again) or reinstall the reference, then grade again")
    if not changed:
        return
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    raise ReferenceChanged(f"the reference package {package} is not the one the assignment was made with (minitransformer "
                           f"{assignment.made_by}): {shown} changed (by a submission, or another install); refusing to "
                           f"grade. Reinstall that reference, or make a new assignment")
