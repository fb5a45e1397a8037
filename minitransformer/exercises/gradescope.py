"""Gradescope: its results.json (a test per graded region: its score, and what was wrong and where), and the
autograder zip: `setup.sh` (run once as root: a venv with `requirements.txt`, the reference from the zip's wheel where
only root reads it), `run_autograder` (grades the submission by `assignment.json`), the assignment, the wheel and the
requirements. The scripts read MINITRANSFORMER_AUTOGRADER_* variables (ROOT, PYTHON, PIP, PIP_OPTIONS, APT, NO_APT,
ISOLATION), so the bundle can be tried anywhere, offline; apt-get runs only on Gradescope (as root, ROOT not given)
or when APT=1 asks (docs/guide/instructors-class-grading.md).
"""

import base64
import hashlib
import io
import json
import zipfile
from importlib import metadata
from pathlib import Path

from .. import __version__

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder (minitransformer exercises gradescope-bundle).
set -euo pipefail
ROOT="${MINITRANSFORMER_AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
# apt-get changes the whole system: only on Gradescope (root, its /autograder: no ROOT given) or when APT=1 asks
[ -z "${MINITRANSFORMER_AUTOGRADER_ROOT:-}" ] && [ "$(id -u)" = 0 ] && APT="${MINITRANSFORMER_AUTOGRADER_APT:-1}"
if [ "${APT:-${MINITRANSFORMER_AUTOGRADER_APT:-}}" = 1 ] && [ -z "${MINITRANSFORMER_AUTOGRADER_NO_APT:-}" ] && command -v apt-get >/dev/null; then
    # bubblewrap isolates each submission where the container allows namespaces; the grader falls back otherwise
    apt-get update && apt-get install -y python3 python3-venv python3-pip bubblewrap \
        || echo "setup.sh: apt-get failed, going on with what is installed"
fi
[ -x "$ROOT/venv/bin/python" ] || "${MINITRANSFORMER_AUTOGRADER_PYTHON:-python3}" -m venv "$ROOT/venv"
PIP="${MINITRANSFORMER_AUTOGRADER_PIP:-$ROOT/venv/bin/python -m pip}"
# NumPy into the venv, which the submission's user may read; the reference (the solutions) where only root can
$PIP install ${MINITRANSFORMER_AUTOGRADER_PIP_OPTIONS:-} -r "$SOURCE/requirements.txt"
rm -rf "$ROOT/grader"
$PIP install ${MINITRANSFORMER_AUTOGRADER_PIP_OPTIONS:-} --no-deps --target "$ROOT/grader" "$SOURCE"/minitransformer-*.whl
chmod -R go-rwx "$ROOT/grader" "$SOURCE"
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this for each submission (minitransformer exercises gradescope-bundle).
set -uo pipefail
ROOT="${MINITRANSFORMER_AUTOGRADER_ROOT:-/autograder}"
mkdir -p "$ROOT/results"
# from the reference's own directory: `python -m` puts the working directory first on sys.path, never the submission
cd "$ROOT/grader"
PYTHONPATH="$ROOT/grader" "$ROOT/venv/bin/python" -m minitransformer exercises grade "$ROOT/submission" \
    --assignment "$ROOT/source/assignment.json" --gradescope "$ROOT/results/results.json" \
    --isolation "${MINITRANSFORMER_AUTOGRADER_ISOLATION:-auto}" \
    || [ -f "$ROOT/results/results.json" ]   # exit status 1 is "below full marks", a grade results.json holds
"""


def _region_output(grade, region):
    """A region's test output: passed, or the exercise's status, the problems of that part (of the forward where no
    case got as far as the backward) and what is said of the exercise as a whole (the exercises it calls)."""
    if grade.region_points.get(region, 0) == grade.region_max.get(region):
        return f"{region}: passed"
    if not grade.cases:                                 # timed out, crashed, markers missing
        return "\n".join([f"{region}: {grade.status}", *grade.problems])
    part = "forward" if region.endswith(".forward") else "backward"
    problems = [line for case in grade.cases for line in case[f"{part}_problems"]]
    if not problems:                                    # no case got as far as this part
        problems = [f"{part} not judged where the forward pass failed:"] + [
            line for case in grade.cases for line in case["forward_problems"]]
    of_cases = {line for case in grade.cases for line in case["forward_problems"] + case["backward_problems"]}
    said = [line for line in grade.problems if line not in of_cases]
    return "\n".join([f"{region}: {grade.status}", *problems, *said])


def _results(tests, output):
    """results.json as a dict from (name, score, max_score, output) per test: the total score, and the tests."""
    tests = [{"name": name, "score": score, "max_score": most, "output": text, "visibility": "visible"}
             for name, score, most, text in tests]
    return {"score": sum(test["score"] for test in tests), "output": output, "visibility": "visible",
            "stdout_visibility": "hidden", "tests": tests}


def gradescope_results(grades, output=""):
    """Gradescope's results.json as a dict: the total score, and one test per graded region."""
    return _results([(region, grade.region_points.get(region, 0), grade.region_max[region], _region_output(grade, region))
                     for grade in grades for region in grade.regions], output)


def failed_results(assignment, message, output=""):
    """results.json for a submission that could not be graded at all (no package in it): 0 on every region."""
    return _results([(region, 0, points, message) for region, points in sorted(assignment.points.items())],
                    f"{output}\n{message}".strip())


def write_results(path, results):
    """Write results.json at `path`, replacing the file (never writing through a link there) in one rename."""
    partial = Path(f"{path}.partial")
    partial.write_text(json.dumps(results, indent=2), encoding="utf-8")
    partial.replace(path)


def _zip(files, executable=()):
    """The bytes of a zip of {name: str or bytes}; the names in `executable` get mode 755, the others 644."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name in executable else 0o644) << 16
            archive.writestr(info, data, zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def build_wheel(package):
    """A pure-Python wheel of the package directory `package` (every file but byte code): (file name, bytes).
    It names no dependencies: setup.sh installs it with --no-deps, after requirements.txt."""
    package, info = Path(package), f"minitransformer-{__version__}.dist-info"
    files = {f"minitransformer/{p.relative_to(package).as_posix()}": p.read_bytes()
             for p in sorted(package.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: minitransformer\nVersion: {__version__}\n".encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: minitransformer\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
              f"{len(data)}\n" for name, data in files.items()]
    files[f"{info}/RECORD"] = ("".join(record) + f"{info}/RECORD,,\n").encode()
    return f"minitransformer-{__version__}-py3-none-any.whl", _zip(files)


def build_bundle(assignment_path, out, package):
    """Write the autograder zip for the assignment file `assignment_path` and the reference package directory
    `package` to `out` (the command line has refused an existing `out` unless --force); the names it holds."""
    try:                                                # the package's own dependencies (no extras)
        requirements = [r for r in metadata.requires("minitransformer") or [] if "extra ==" not in r]
    except metadata.PackageNotFoundError:
        raise RuntimeError("minitransformer runs from a source tree never installed, so its dependencies are "
                           "unknown: install it (pip install -e .) to build the bundle") from None
    wheel_name, wheel = build_wheel(package)
    files = {"setup.sh": SETUP_SH, "run_autograder": RUN_AUTOGRADER, "assignment.json": Path(assignment_path).read_text(encoding="utf-8"),
             wheel_name: wheel, "requirements.txt": "\n".join(requirements) + "\n"}
    Path(out).write_bytes(_zip(files, executable=("setup.sh", "run_autograder")))
    return list(files)
