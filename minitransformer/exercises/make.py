"""`exercises make`: a student copy of the project (package, tests, benchmarks, packaging files, a manifest, a
README, the self-check's expected outputs, notebooks on request; not the instructor's tests), the chosen solution
regions replaced by hints. No assigned answer stays: the fast forms of assigned layers and what repeats an answer
are left out (`leaks.py`), and a copy in which the final scan still finds one is deleted. A copy made to derive
leaves the derivations of the assigned backward passes out too (`derivations.py`).
"""

import importlib
import json
import shutil
import sys
from contextlib import suppress
from pathlib import Path

import numpy as np

from .. import __version__
from ..gradcheck.cases import all_cases
from .catalogue import EXERCISES, NOTEBOOK_EXERCISES, built_on, exercise_of
from .check import CHECK_SEED, EXPECTED_FILE, compute_expected
from .derivations import strip_derivations
from .leaks import blank_file, leaks_in, package_secrets, write_student_notebooks
from .regions import blank_regions, package_regions

MANIFEST = "exercises.json"
_BESIDE_PACKAGE = ("tests", "data", "benchmarks", "setup.cfg", "pyproject.toml", "LICENSE", ".gitignore")
_NOT_COPIED_NAMES = ("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", ".hypothesis")
_INSTRUCTOR_TESTS = ("test_exercises.py", "test_student_copy*.py", "test_nbgrader.py", "*grading*",   # hold answers
                     "test_compatibility.py", "make_compatibility_fixtures.py", "test_old_checkpoints.py")  # pin numbers
_README_SECTIONS = ("## The gradient checker",)      # taken over from the reference README (the copy's tests run it)


def read_manifest(directory):
    """The copy's `exercises.json` as a dict; {} when it has none or one that is no JSON object (nothing graded reads it)."""
    with suppress(OSError, ValueError):
        manifest = json.loads((Path(directory) / MANIFEST).read_text(encoding="utf-8"))
        return manifest if isinstance(manifest, dict) else {}
    return {}


def reference_package():
    """The directory of the installed (reference) `minitransformer` package."""
    return Path(__file__).resolve().parent.parent


def select_regions(region_names, only=None):
    """The sorted region names `--only` selects: None selects all; else a list of exercise names ("layernorm")
    and region names ("layernorm.backward"). KeyError listing both for a name that matches nothing."""
    selected = set(region_names) if only is None else set()
    for item in only or ():
        matches = {name for name in region_names if name == item or exercise_of(name) == item}
        if not matches:
            raise KeyError(f"--only {item!r} names no exercise or region; exercises: "
                           f"{', '.join(sorted(e.name for e in EXERCISES))}; regions: {', '.join(sorted(region_names))}; "
                           f"notebook exercises (with --notebooks): {', '.join(e.name for e in NOTEBOOK_EXERCISES)}")
        selected |= matches
    return sorted(selected)


def check_is_reference(regions):
    """Raise RuntimeError when the installed package is a student copy (a blank region, or a copy's files beside it)."""
    blank = sorted(name for name, (_, region) in regions.items() if region.is_blank())
    package = reference_package()
    if blank or (package.parent / MANIFEST).is_file() or EXPECTED_FILE.is_file():
        why = f"blank regions: {', '.join(blank)}" if blank else f"{package.parent / MANIFEST} is beside it"
        raise RuntimeError(f"the installed minitransformer is a student copy ({why}); "
                           f"run the exercises commands from the reference package")


def derived(selected):
    """The exercises whose derivations a copy made to derive leaves out, for the assigned region names `selected`:
    those with an assigned backward, and every exercise whose derivation restates one (`built_on`)."""
    return built_on({exercise_of(name) for name in selected if name.endswith(".backward")})


def derivation_files(selected, regions):
    """The package files (relative, sorted) whose docstrings' derivations a copy made to derive leaves out."""
    return sorted({relative for name, (relative, _) in regions.items() if exercise_of(name) in derived(selected)})


def copy_text(text, relative, selected, regions, derive=False):
    """The package file `relative` (the reference's `text`) as a copy holds it, and so as the grader runs an answer in
    it: the regions named in `selected` blanked and, with `derive`, the derivations left out (`derivation_files`)."""
    text = blank_regions(text, set(selected), relative, derive)
    return strip_derivations(text, relative) if derive and relative in derivation_files(selected, regions) else text


def _copy_package(package, target, selected, regions, derive=False):
    """Copy the package to `target`, its files as `copy_text` makes them, the fast forms of the layers of `selected`
    left out; returns the left-out records {"path", "what", "exercises"}."""
    shutil.copytree(package, target, ignore=shutil.ignore_patterns(*_NOT_COPIED_NAMES), dirs_exist_ok=True)
    changed = {regions[name][0] for name in selected} | set(derivation_files(selected, regions) if derive else ())
    for relative in sorted(changed):
        text = copy_text((target / relative).read_text(encoding="utf-8"), relative, selected, regions, derive)
        (target / relative).write_text(text, encoding="utf-8")
    fast = [(e.name, name) for e in EXERCISES if e.name in _exercises(selected) for name in e.fast_files]   # answers to call
    for _, name in fast:
        (target / "fast" / f"{name}.py").unlink(missing_ok=True)
    return [{"path": f"{package.name}/fast/{name}.py", "what": f"the fast form ({name})", "exercises": exercise}
            for exercise, name in fast]


def unavailable_layers(package, selected, regions):
    """dict catalogue layer -> the exercises it waits for, in the catalogues' orders: every gradient-check case runs
    forward and backward once on the reference, traced; a case reaching an assigned region would raise there."""
    lines = {}                                      # (file, line number) -> exercise
    for name in selected:
        relative, region = regions[name]
        file = importlib.import_module(f"{package.name}.{relative[:-3].replace('/', '.')}").__file__
        lines.update({(file, number): exercise_of(name) for number in range(region.begin + 2, region.end + 1)})
    files, reached, previous = {file for file, _ in lines}, {}, sys.gettrace()     # previous: a debugger's, coverage's

    def trace(frame, *_):                           # follows the lines of the regions' files only
        where = (frame.f_code.co_filename, frame.f_lineno)
        if where in lines:
            found.add(lines[where])
        return trace if where[0] in files else None

    for case in all_cases():
        found = reached.setdefault(case.layer, set())
        sys.settrace(trace)
        try:
            module, inputs, forward = case.build(np.random.default_rng(0))
            out = (module.forward if forward is None else forward)(*inputs)
            module.backward(np.ones(np.shape(out)) if np.ndim(out) else 1.0)
        finally:
            sys.settrace(previous)
    return {layer: _exercises(found) for layer, found in reached.items() if found}


def _exercises(names):
    """The exercises of these region names, in the catalogue's order."""
    return sorted({exercise_of(name) for name in names}, key=[e.name for e in EXERCISES].index)


def make_student_copy(out, only=None, notebooks=False, notebooks_dir=None, derive=False):
    """Write the student copy into the new or empty directory `out` (`only`: see `select_regions`; `notebooks`: with
    those of `notebooks_dir`, default `notebooks/`; `derive`: the assigned backward passes' derivations left out)
    and return its manifest; FileExistsError, KeyError, RuntimeError."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not an empty directory; choose a new directory")
    package = reference_package()
    regions = package_regions(package)
    check_is_reference(regions)
    in_notebooks = [e.name for e in NOTEBOOK_EXERCISES if notebooks and (only is None or e.name in only)]
    selected = select_regions(regions, None if only is None else [name for name in only if name not in in_notebooks])
    secrets = package_secrets(package, regions, selected)
    left_out = _copy_package(package, out / package.name, selected, regions, derive)
    left_out += _copy_beside_package(package.parent, out, secrets)
    written_notebooks, blanked = [], []
    if notebooks:
        written_notebooks, blanked = write_student_notebooks(Path(notebooks_dir or package.parent / "notebooks"),
                                                             out / "notebooks", {*selected, *in_notebooks}, secrets,
                                                             derived(selected) if derive else ())
    np.savez(out / package.name / EXPECTED_FILE.relative_to(package), **compute_expected([e.name for e in EXERCISES]))
    manifest = {"minitransformer": __version__, "exercises": _exercises(selected), "regions": selected,
                "unavailable_layers": unavailable_layers(package, selected, regions), "left_out": left_out + blanked,
                "notebooks": written_notebooks, "notebook_exercises": in_notebooks, "self_check": {
                    "seed": CHECK_SEED, "expected_outputs": EXPECTED_FILE.relative_to(package.parent).as_posix()}}
    if derive:                                      # what a copy made to derive leaves out besides
        manifest["derive"] = {"exercises": derived(selected),
                              "files": [f"{package.name}/{path}" for path in derivation_files(selected, regions)]}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    (out / "README.md").write_text(student_readme(manifest, regions, package.parent / "README.md"), encoding="utf-8")
    remaining = leaks_in(out, secrets)
    if remaining:                    # a place none of the rules above knows: the copy (ours, just made) must not stay
        shutil.rmtree(out)
        raise RuntimeError("no student copy written: it would give answers away (a bug of exercises make, "
                           "please report it): " + "; ".join(remaining[:5]))
    return manifest


def _copy_beside_package(source_root, out, secrets):
    """Copy the tests, data, benchmarks and packaging files but the instructor's tests, blanking what shows an answer;
    returns the left-out records."""
    left_out, ignore = [], shutil.ignore_patterns(*_NOT_COPIED_NAMES, *_INSTRUCTOR_TESTS)
    for name in _BESIDE_PACKAGE:
        if (source_root / name).is_dir():
            shutil.copytree(source_root / name, out / name, ignore=ignore)
        elif (source_root / name).is_file():
            shutil.copy2(source_root / name, out / name)
    for path in sorted(p for name in _BESIDE_PACKAGE for p in (out / name).rglob("*") if p.is_file()):
        left_out += blank_file(path, path.relative_to(out).as_posix(), secrets)
    if (out / "setup.cfg").is_file():               # `pip install -e .` brings the self-check's pytest
        text = (out / "setup.cfg").read_text(encoding="utf-8")
        (out / "setup.cfg").write_text(text.replace("install_requires =\n", "install_requires =\n    pytest>=7\n", 1), encoding="utf-8")
    return left_out


def student_readme(manifest, regions, reference_readme):
    """The copy's README: what to implement, where, and how to check it, then the sections of the reference
    README (a path, maybe absent) named in `_README_SECTIONS` (the rest of it shows solutions)."""
    reference_readme = reference_readme.read_text(encoding="utf-8") if reference_readme.is_file() else ""
    guide = (["docstring above it gives the shapes and the task (for a forward pass, its steps). This copy asks you to",
              "derive each backward pass: its derivation is left out (a note in its docstring marks the place), and so",
              "are the notebook cells that derive it."] if manifest.get("derive") else
             ["docstring above it gives the shapes and the mathematics."])
    lines = ["# minitransformer: exercises", "",
             "A Transformer language model in pure NumPy, with some passes left for you to write. Install the copy with",
             "`pip install -e .` (pytest, for the self-check, comes with it), then write each place below between its",
             "`### BEGIN SOLUTION` and `### END SOLUTION` lines (keep them: the grader reads your answer there); the",
             *guide, ""]
    lines += [f"- `{name}`: `minitransformer/{regions[name][0]}`, in `{regions[name][1].where}`" for name in manifest["regions"]]
    notebooks = ", ".join(f"`notebooks/{n['notebook']}`" for n in manifest["notebooks"] if n["exercise_cells"])
    lines += ["", f"Notebook exercises, in {notebooks}: run a notebook to check its exercise cells."] if notebooks else []
    first = (manifest["exercises"] or ["layernorm"])[0]
    lines += ["", "Check your work as you go (the forward against outputs shipped with this copy, the backward against",
              "finite differences of your forward):", "", "```bash",
              f"python -m minitransformer exercises check {first}   # one exercise (or: all, or several: a,b)",
              f"python -m pytest -m {first}                         # the same check, as tests",
              f"python -m minitransformer gradcheck --only {first}  # the gradient checker's table",
              "```", "", "`python -m pytest` (quick) or `--full` (every test) fails only where your work is missing."]
    unavailable = [f"- {layer}: needs {', '.join(needs)}" for layer, needs in manifest["unavailable_layers"].items()]
    if unavailable:
        lines += ["", "These layers raise `NotImplementedError` until the exercises they use are done:", "", *unavailable]
    lines += ["\n" + heading + reference_readme.split(heading, 1)[1].split("\n## ", 1)[0].rstrip("\n")
              for heading in _README_SECTIONS if heading in reference_readme]
    return "\n".join(lines) + "\n"
