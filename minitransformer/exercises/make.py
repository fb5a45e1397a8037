"""Write a student copy of the project: the chosen solution regions replaced by hints.

The copy holds the package (every region not chosen keeps the reference
code, so every layer that does not use an assigned exercise works), the tests,
the packaging files (it installs with `pip install -e .`), an `exercises.json`
manifest for the grader, and, on request, student versions of the notebooks.

Left out of the copy on purpose: byte-compiled files (`__pycache__` would hold
the reference solutions), this feature's own tests, version control and
virtual environments.
"""

import json
import shutil
from pathlib import Path

from .. import __version__
from ..gradcheck_cases import all_cases
from .catalogue import EXERCISES, unavailable_layers
from .regions import blank_regions, package_regions

MANIFEST = "exercises.json"
_ROOT_FILES = ("setup.cfg", "pyproject.toml", "README.md", "LICENSE", ".gitignore")
_NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", ".hypothesis",
                                     "test_exercises.py")


def reference_package():
    """The directory of the installed (reference) `minitransformer` package."""
    return Path(__file__).resolve().parent.parent


def select_regions(region_names, only=None):
    """Resolve `--only` to region names.

    Args:
        region_names: every region name of the package.
        only: None (every region) or a list of exercise names ("layernorm")
            and region names ("layernorm.backward").
    Returns:
        sorted list of region names.
    """
    if only is None:
        return sorted(region_names)
    known_exercises = {e.name for e in EXERCISES}
    selected = set()
    for item in only:
        matches = {name for name in region_names if name == item or name.split(".")[0] == item}
        if not matches:
            raise KeyError(f"--only {item!r} names no exercise or region; exercises: {', '.join(sorted(known_exercises))}; "
                           f"regions: {', '.join(sorted(region_names))}")
        selected |= matches
    return sorted(selected)


def check_is_reference(regions):
    """Raise when a region of the installed package is already blank: it is itself a student copy."""
    blank = sorted(name for name, (_, region) in regions.items() if region.is_blank())
    if blank:
        raise RuntimeError(f"the installed minitransformer is a student copy (blank regions: {', '.join(blank)}); "
                           f"run the exercises commands from the reference package")


def make_student_copy(out, only=None, notebooks=False, notebooks_dir=None):
    """Write the student copy into the new directory `out`.

    Args:
        out: path of a directory that does not exist yet (or is empty).
        only: see `select_regions`.
        notebooks: also write student versions of the notebooks.
        notebooks_dir: where the reference notebooks are (default `notebooks/` next to the package).
    Returns:
        the manifest dict, also written to `out/exercises.json`.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"exercises make: {out} exists and is not empty; choose a new directory")
    package = reference_package()
    regions = package_regions(package)
    check_is_reference(regions)
    selected = select_regions(regions, only)

    shutil.copytree(package, out / package.name, ignore=_NOT_COPIED, dirs_exist_ok=True)
    for relative in sorted({regions[name][0] for name in selected}):
        path = out / package.name / relative
        path.write_text(blank_regions(path.read_text(), set(selected), relative))
    source_root = package.parent
    if (source_root / "tests").is_dir():
        shutil.copytree(source_root / "tests", out / "tests", ignore=_NOT_COPIED)
    for name in _ROOT_FILES:
        if (source_root / name).is_file():
            shutil.copy2(source_root / name, out / name)

    written_notebooks = []
    if notebooks:
        from .notebook import write_student_notebooks

        written_notebooks = write_student_notebooks(Path(notebooks_dir or source_root / "notebooks"), out / "notebooks",
                                                    set(selected))
    exercises = sorted({name.split(".")[0] for name in selected}, key=[e.name for e in EXERCISES].index)
    layers = list(dict.fromkeys(case.layer for case in all_cases()))
    manifest = {
        "minitransformer": __version__,
        "exercises": exercises,
        "regions": selected,
        "unavailable_layers": unavailable_layers(exercises, layers),
        "notebooks": written_notebooks,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
