"""Write a student copy of the project: the chosen solution regions replaced by hints.

The copy holds the package (every region not chosen keeps the reference
code, so every layer that does not use an assigned exercise works), the tests,
the packaging files (it installs with `pip install -e .`), an `exercises.json`
manifest for the grader, a README listing the exercises (the reference README
quotes backward passes), and, on request, student versions of the notebooks.

Left out of the copy on purpose: byte-compiled files (`__pycache__` would hold
the reference solutions), this feature's own tests, version control and
virtual environments.
"""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import __version__
from ..gradcheck.cases import all_cases
from .catalogue import EXERCISES, exercise_named, exercise_of
from .regions import blank_regions, package_regions

MANIFEST = "exercises.json"
_ROOT_FOLDERS = ("tests", "data")
_ROOT_FILES = ("setup.cfg", "pyproject.toml", "LICENSE", ".gitignore")
_NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", ".hypothesis",
                                     "test_exercises.py")


def read_manifest(directory):
    """The copy's `exercises.json` as a dict ({} when the copy has none)."""
    manifest = Path(directory) / MANIFEST
    return json.loads(manifest.read_text()) if manifest.is_file() else {}


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
        matches = {name for name in region_names if name == item or exercise_of(name) == item}
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


def _copy_package(package, target, selected, regions):
    """Copy the package to `target` with the regions named in `selected` blanked."""
    shutil.copytree(package, target, ignore=_NOT_COPIED, dirs_exist_ok=True)
    for relative in sorted({regions[name][0] for name in selected}):
        path = target / relative
        path.write_text(blank_regions(path.read_text(), set(selected), relative))
    for exercise in _exercises(selected):                  # fast forms of assigned layers would be answers
        for name in exercise_named(exercise).fast_files:
            (target / "fast" / f"{name}.py").unlink(missing_ok=True)


def _probe(root):
    """Layers of the gradient-check catalogue that raise NotImplementedError in the package under `root`."""
    boot = "import sys; sys.path.insert(0, sys.argv[1]); from minitransformer.exercises.runner import probe; sys.exit(probe())"
    done = subprocess.run([sys.executable, "-c", boot, str(Path(root).resolve())], cwd=root, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"a copy with blank regions does not run: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)


def unavailable_layers(package, selected, regions):
    """Which layers each assigned exercise disables, found by running the catalogue once per exercise.

    For each exercise a scratch copy of the package with only that exercise's
    regions blank runs every gradient-check case forward and backward once (in
    a subprocess); the layers that raise wait for that exercise.
    Returns:
        dict catalogue layer -> list of the exercises it waits for (layers that work are not listed).
    """
    waiting = {}
    for exercise in _exercises(selected):
        with tempfile.TemporaryDirectory(prefix=f"probe-{exercise}-") as tmp:
            names = [name for name in selected if exercise_of(name) == exercise]
            _copy_package(package, Path(tmp) / package.name, names, regions)
            for layer in _probe(tmp):
                waiting.setdefault(layer, []).append(exercise)
    order = list(dict.fromkeys(case.layer for case in all_cases()))
    return dict(sorted(waiting.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)))


def _exercises(selected):
    """The exercise names of the selected regions, in the catalogue's order."""
    order = [e.name for e in EXERCISES]
    return sorted({exercise_of(name) for name in selected}, key=order.index)


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

    _copy_package(package, out / package.name, selected, regions)
    source_root = package.parent
    for folder in _ROOT_FOLDERS:
        if (source_root / folder).is_dir():
            shutil.copytree(source_root / folder, out / folder, ignore=_NOT_COPIED)
    for name in _ROOT_FILES:
        if (source_root / name).is_file():
            shutil.copy2(source_root / name, out / name)

    written_notebooks = []
    if notebooks:
        from .notebook import write_student_notebooks

        written_notebooks = write_student_notebooks(Path(notebooks_dir or source_root / "notebooks"), out / "notebooks",
                                                    set(selected))
    manifest = {
        "minitransformer": __version__,
        "exercises": _exercises(selected),
        "regions": selected,
        "unavailable_layers": unavailable_layers(package, selected, regions),
        "notebooks": written_notebooks,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    (out / "README.md").write_text(student_readme(manifest, regions))
    return manifest


def student_readme(manifest, regions):
    """The copy's README: what to implement, where, and how to check it (the reference README shows solutions)."""
    lines = ["# minitransformer: exercises", "",
             "A Transformer language model in pure NumPy, with some passes left for you to write. Install the copy",
             "with `pip install -e .`, then fill in each place below, between its `### BEGIN SOLUTION` and",
             "`### END SOLUTION` lines (keep those two lines: the grader reads your answer from between them).",
             "The docstring above each place gives the shapes and the mathematics.", ""]
    for name in manifest["regions"]:
        relative, region = regions[name]
        lines.append(f"- `{name}`: `minitransformer/{relative}`, in `{region.where}`")
    lines += ["", "Check your work with the gradient checker and the tests, e.g.", "",
              "```bash", "python -m minitransformer gradcheck --only LayerNorm", "python -m pytest tests", "```"]
    if manifest["unavailable_layers"]:
        lines += ["", "Until your exercises are done, these layers raise `NotImplementedError`, because they use them:", ""]
        lines += [f"- {layer}: needs {', '.join(needs)}" for layer, needs in manifest["unavailable_layers"].items()]
    return "\n".join(lines) + "\n"
