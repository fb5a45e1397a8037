"""Gradescope: its results format, and the autograder bundle that grades a submission there.

`exercises grade DIR --gradescope results.json` writes Gradescope's autograder results (its
"specification for results.json"): the total `score`, and one entry in `tests` per graded region
with its `name`, `score`, `max_score` and `output` (what was wrong, and where). The file is
replaced if it exists: the platform reads it from a fixed place.

`exercises gradescope-bundle --assignment A --out autograder.zip` writes the zip Gradescope's
"autograder" setting takes:

    setup.sh          run once when Gradescope builds the image (as root): installs bubblewrap and a
                      Python virtual environment, NumPy and the package's other dependencies from
                      the package index, and the reference package from the wheel below, into a
                      directory only root can read
    run_autograder    run for each submission: grades /autograder/submission by the assignment into
                      /autograder/results/results.json
    assignment.json   the instructor's assignment (seed, points, the reference's hashes)
    minitransformer-<version>-py3-none-any.whl
                      the installed reference package, exactly the files the assignment's hashes cover
    requirements.txt  the package's dependencies

Both scripts read MINITRANSFORMER_AUTOGRADER_ROOT (default /autograder), so the bundle can be tried
anywhere; setup.sh also MINITRANSFORMER_AUTOGRADER_PYTHON (the Python that makes the venv),
MINITRANSFORMER_AUTOGRADER_PIP (the pip command) and MINITRANSFORMER_AUTOGRADER_PIP_OPTIONS (e.g.
"--no-index" offline), and skips apt-get when MINITRANSFORMER_AUTOGRADER_NO_APT is set;
run_autograder also MINITRANSFORMER_AUTOGRADER_ISOLATION (`--isolation`, default auto).

Gradescope's containers usually refuse the namespaces bubblewrap needs; the grader then falls back
to the process isolation, running the submission as `nobody` (see `isolation.py`), and says so
in the results' `output`.
"""

import base64
import hashlib
import io
import json
import os
import tempfile
import zipfile
from pathlib import Path

from .. import __version__

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder (minitransformer exercises gradescope-bundle).
set -euo pipefail
ROOT="${MINITRANSFORMER_AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
PYTHON="${MINITRANSFORMER_AUTOGRADER_PYTHON:-python3}"
if [ -z "${MINITRANSFORMER_AUTOGRADER_NO_APT:-}" ] && command -v apt-get >/dev/null; then
    # bubblewrap isolates each submission where the container allows namespaces; the grader falls back otherwise
    apt-get update && apt-get install -y python3 python3-venv python3-pip bubblewrap \
        || echo "setup.sh: apt-get failed, going on with what is installed"
fi
[ -x "$ROOT/venv/bin/python" ] || "$PYTHON" -m venv "$ROOT/venv"
PIP="${MINITRANSFORMER_AUTOGRADER_PIP:-$ROOT/venv/bin/python -m pip}"
# NumPy and the other dependencies, from the package index, into the venv (readable by the submission's user)
$PIP install ${MINITRANSFORMER_AUTOGRADER_PIP_OPTIONS:-} -r "$SOURCE/requirements.txt"
# the reference package, from this zip, where only root can read it: a submission never sees the solutions
rm -rf "$ROOT/grader"
$PIP install ${MINITRANSFORMER_AUTOGRADER_PIP_OPTIONS:-} --no-deps --target "$ROOT/grader" "$SOURCE"/minitransformer-*.whl
chmod -R go-rwx "$ROOT/grader" "$SOURCE"
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this for each submission (minitransformer exercises gradescope-bundle).
set -uo pipefail
ROOT="${MINITRANSFORMER_AUTOGRADER_ROOT:-/autograder}"
mkdir -p "$ROOT/results"
# From the reference's own directory: `python -m` puts the working directory first on sys.path, which
# must never be the submission's.
cd "$ROOT/grader"
PYTHONPATH="$ROOT/grader" "$ROOT/venv/bin/python" -m minitransformer exercises grade "$ROOT/submission" \
    --assignment "$ROOT/source/assignment.json" --gradescope "$ROOT/results/results.json" \
    --isolation "${MINITRANSFORMER_AUTOGRADER_ISOLATION:-auto}"
status=$?
# exit status 1 means "below full marks", a grade like any other: results.json holds it
[ -f "$ROOT/results/results.json" ] && exit 0
exit "$status"
"""


def _region_output(grade, region):
    """What a region's test entry says: passed, or the exercise's status and the problems of that part."""
    if grade.region_points.get(region, 0) == grade.region_max.get(region):
        return f"{region}: passed"
    part = "forward" if region.endswith(".forward") else "backward"
    lines = [f"{region}: {grade.status}"]
    if grade.status in ("timed out", "crashed", "markers missing"):
        lines += grade.problems
    else:
        for case in grade.cases:
            lines += case[f"{part}_problems"]
        if part == "backward" and not any(case["backward_problems"] for case in grade.cases):
            lines.append("backward not judged: the forward pass raised on every case (see the forward)")
    return "\n".join(lines)


def gradescope_results(grades, output=""):
    """Gradescope's results.json as a dict: the total score, and one test per graded region."""
    tests = [{"name": region, "score": grade.region_points.get(region, 0), "max_score": grade.region_max[region],
              "output": _region_output(grade, region), "visibility": "visible"}
             for grade in grades for region in grade.regions]
    return {"score": sum(test["score"] for test in tests), "output": output, "visibility": "visible",
            "stdout_visibility": "hidden", "tests": tests}


def failed_results(assignment, message, output=""):
    """results.json for a submission that could not be graded at all (no package in it): 0 on every region."""
    tests = [{"name": region, "score": 0, "max_score": points, "output": message, "visibility": "visible"}
             for region, points in sorted(assignment.points.items())]
    return {"score": 0, "output": f"{output}\n{message}".strip(), "visibility": "visible", "tests": tests}


def write_results(path, results):
    """Write results.json at `path`, replacing it (Gradescope reads it from there), atomically."""
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"--gradescope {path}: the directory {path.parent} does not exist")
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".results-", suffix=".json")
    with os.fdopen(handle, "w") as out:
        json.dump(results, out, indent=2)
    os.replace(temporary, path)
    return path


# ---------------------------------------------------------------- the bundle

def _record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _metadata():
    """(METADATA text, core requirements) of the installed distribution, or a minimal one."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        dist = distribution("minitransformer")
        if dist.version == __version__ and dist.read_text("METADATA"):
            core = [r for r in (dist.requires or []) if "extra ==" not in r]
            return dist.read_text("METADATA"), core
    except (ImportError, PackageNotFoundError):
        pass
    return f"Metadata-Version: 2.1\nName: minitransformer\nVersion: {__version__}\nRequires-Dist: numpy>=1.24\n", \
        ["numpy>=1.24"]


def build_wheel(package):
    """A pure-Python wheel of the package directory `package` (every file but byte code): (file name, bytes)."""
    package = Path(package)
    metadata, _ = _metadata()
    info = f"minitransformer-{__version__}.dist-info"
    files = {f"minitransformer/{p.relative_to(package).as_posix()}": p.read_bytes()
             for p in sorted(package.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
             and p.suffix not in (".pyc", ".pyo")}
    files[f"{info}/METADATA"] = metadata.encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: minitransformer exercises gradescope-bundle\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return f"minitransformer-{__version__}-py3-none-any.whl", buffer.getvalue()


def _executable(name, text):
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = 0o755 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info, text


def build_bundle(assignment_path, out, package, force=False):
    """Write the autograder zip to `out` (see the module docstring); returns the names it holds.

    Args:
        assignment_path: the instructor's assignment (already checked against `package`).
        out: the zip to write; an existing file is replaced only with `force`.
        package: the reference package directory.
    """
    out = Path(out)
    if out.exists() and not force:
        raise FileExistsError(f"--out {out} exists already; choose another name, or pass --force to replace it")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"--out {out}: the directory {out.parent} does not exist")
    wheel_name, wheel = build_wheel(package)
    _, requirements = _metadata()
    entries = [_executable("setup.sh", SETUP_SH), _executable("run_autograder", RUN_AUTOGRADER),
               ("assignment.json", Path(assignment_path).read_text()), (wheel_name, wheel),
               ("requirements.txt", "\n".join(requirements) + "\n")]
    handle, temporary = tempfile.mkstemp(dir=out.parent, prefix=".bundle-", suffix=".zip")
    with os.fdopen(handle, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, data in entries:
            bundle.writestr(name, data)
    os.replace(temporary, out)
    return [name if isinstance(name, str) else name.filename for name, _ in entries]
