"""Gradescope (issue 19): results.json in its format, and the autograder bundle, tried end to end offline.

The bundle's scripts read MINITRANSFORMER_AUTOGRADER_ROOT, so a temporary directory stands in for
/autograder; setup.sh installs the wheel from the zip with pip, offline (--no-index), into a fresh
virtual environment that borrows this one's NumPy (on Gradescope they come from the package index).
"""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _grading_answers import REFERENCE, fresh_copy, indented, make_once, put_bodies, reference_body

from minitransformer import __version__
from minitransformer.__main__ import main
from minitransformer.exercises.assignment import new_assignment, write_assignment
from minitransformer.exercises.isolation import LINUX_ONLY

if sys.platform != "linux":
    pytest.skip(LINUX_ONLY, allow_module_level=True)

ASSIGNED = ["layernorm.backward", "relu.backward"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return make_once(tmp_path_factory, ASSIGNED)


@pytest.fixture
def submission(made, tmp_path):
    """A student copy with relu right and layernorm's backward wrong (zeros)."""
    copy = fresh_copy(made, tmp_path)
    put_bodies(copy, {"relu.backward": reference_body("relu.backward"),
                      "layernorm.backward": indented("layernorm.backward", "return np.zeros_like(dout)")})
    return copy


@pytest.fixture
def assignment(tmp_path):
    return write_assignment(tmp_path / "course" / "a.assignment.json", new_assignment(ASSIGNED, REFERENCE, seed=3))


def test_results_json_is_written_in_gradescopes_format_replacing_the_file(submission, assignment, tmp_path):
    results = tmp_path / "results.json"
    results.write_text("an old result", encoding="utf-8")                     # the platform reads it from here: replaced
    assert main(["exercises", "grade", str(submission), "--assignment", str(assignment),
                 "--gradescope", str(results), "--isolation", "process"]) == 1
    data = json.loads(results.read_text(encoding="utf-8"))
    assert data["score"] == 1 and data["output"].startswith("isolation: ")
    tests = {test["name"]: test for test in data["tests"]}
    assert set(tests) == set(ASSIGNED)
    assert (tests["relu.backward"]["score"], tests["relu.backward"]["max_score"]) == (1, 1)
    assert (tests["layernorm.backward"]["score"], tests["layernorm.backward"]["max_score"]) == (0, 1)
    assert "relu.backward: passed" == tests["relu.backward"]["output"]
    wrong = tests["layernorm.backward"]["output"]
    assert wrong.startswith("layernorm.backward: wrong") and "input 0 (x): rel_error" in wrong
    assert "seed" not in results.read_text(encoding="utf-8")                  # nothing of the assignment's secret
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".results-")] == []


def test_a_submission_without_the_package_gets_zero_with_a_reason(assignment, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    results = tmp_path / "results.json"
    assert main(["exercises", "grade", str(tmp_path / "empty"), "--assignment", str(assignment),
                 "--gradescope", str(results), "--isolation", "process"]) == 2
    data = json.loads(results.read_text(encoding="utf-8"))
    assert data["score"] == 0 and len(data["tests"]) == 2
    assert all("no minitransformer package" in test["output"] and test["score"] == 0 for test in data["tests"])
    err = capsys.readouterr().err
    assert err.startswith("error: exercises grade: no minitransformer package") and err.count("exercises grade:") == 1


def test_results_json_in_a_missing_directory_is_one_error_line(submission, assignment, tmp_path, capsys):
    assert main(["exercises", "grade", str(submission), "--assignment", str(assignment),
                 "--gradescope", str(tmp_path / "nowhere" / "results.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gradescope" in err[0] and "does not exist" in err[0]


def test_the_bundle_holds_the_scripts_the_assignment_and_the_reference_and_is_never_overwritten_unasked(
        assignment, tmp_path, capsys):
    out = tmp_path / "autograder.zip"
    assert main(["exercises", "gradescope-bundle", "--assignment", str(assignment), "--out", str(out)]) == 0
    with zipfile.ZipFile(out) as bundle:
        names = set(bundle.namelist())
        wheel = f"minitransformer-{__version__}-py3-none-any.whl"
        assert names == {"setup.sh", "run_autograder", "assignment.json", "requirements.txt", wheel}
        assert bundle.getinfo("run_autograder").external_attr >> 16 & 0o111
        assert json.loads(bundle.read("assignment.json")) == json.loads(assignment.read_text(encoding="utf-8"))
        assert "numpy" in bundle.read("requirements.txt").decode()
        out.with_name(wheel).write_bytes(bundle.read(wheel))
    with zipfile.ZipFile(out.with_name(wheel)) as wheel_zip:
        packaged = {n[len("minitransformer/"):] for n in wheel_zip.namelist()
                    if n.startswith("minitransformer/") and n.endswith(".py")}
    assert packaged == {p.relative_to(REFERENCE).as_posix() for p in REFERENCE.rglob("*.py")
                        if "__pycache__" not in p.parts}
    capsys.readouterr()
    before = out.read_bytes()
    assert main(["exercises", "gradescope-bundle", "--assignment", str(assignment), "--out", str(out)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err and out.read_bytes() == before
    assert main(["exercises", "gradescope-bundle", "--assignment", str(assignment), "--out", str(out), "--force"]) == 0


def fake_apt_get(tmp_path):
    """A PATH whose apt-get only notes its arguments in tmp_path/apt-get.log."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    fake = tmp_path / "bin" / "apt-get"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "apt-get.log"}\n', encoding="utf-8")
    fake.chmod(0o755)
    return f"{fake.parent}:{os.environ['PATH']}"


@pytest.mark.parametrize("asked, called", [("APT=1", True), ("APT=1 NO_APT=1", False), ("", False)])
def test_setup_runs_apt_get_only_when_asked_outside_gradescope(tmp_path, asked, called):
    from minitransformer.exercises.gradescope import SETUP_SH

    venv = '[ -x "$ROOT/venv/bin/python" ]'
    assert venv in SETUP_SH                                     # what follows apt-get: stopped there
    (tmp_path / "setup.sh").write_text(SETUP_SH.replace(venv, "exit 0", 1), encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("MINITRANSFORMER_AUTOGRADER_")}
    env.update({"MINITRANSFORMER_AUTOGRADER_ROOT": str(tmp_path / "root"), "PATH": fake_apt_get(tmp_path)})
    env.update({f"MINITRANSFORMER_AUTOGRADER_{word.split('=')[0]}": "1" for word in asked.split()})
    subprocess.run(["bash", str(tmp_path / "setup.sh")], env=env, check=True, capture_output=True)
    log = tmp_path / "apt-get.log"
    assert log.exists() == called
    assert not called or "install -y" in log.read_text(encoding="utf-8") and "bubblewrap" in log.read_text(encoding="utf-8")


def install_bundle(assignment, submission, tmp_path):
    """Build the bundle of `assignment` (tmp_path/autograder.zip), unpack it as Gradescope would into
    tmp_path/autograder, which stands in for /autograder, hand in `submission` and run setup.sh, offline;
    (that root, the environment run_autograder runs in)."""
    root = tmp_path / "autograder"
    bundle = tmp_path / "autograder.zip"
    assert main(["exercises", "gradescope-bundle", "--assignment", str(assignment), "--out", str(bundle)]) == 0
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    for script in ("setup.sh", "run_autograder"):
        (root / "source" / script).chmod(0o755)
    shutil.copytree(submission, root / "submission" / "my-copy")      # uploaded as a folder: found inside it
    # a fresh venv without pip, borrowing this environment's packages (Gradescope installs them from PyPI)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    site = next((root / "venv" / "lib").glob("python*/site-packages"))
    numpy_site = Path(__import__("numpy").__file__).resolve().parent.parent
    (site / "borrowed.pth").write_text(f"{numpy_site}\n", encoding="utf-8")
    env = {**os.environ, "MINITRANSFORMER_AUTOGRADER_ROOT": str(root), "PATH": fake_apt_get(tmp_path),
           "MINITRANSFORMER_AUTOGRADER_PIP": f"{sys.executable} -m pip --python {root / 'venv' / 'bin' / 'python'}",
           "MINITRANSFORMER_AUTOGRADER_PIP_OPTIONS": "--no-index --quiet",
           "MINITRANSFORMER_AUTOGRADER_ISOLATION": "process"}       # Gradescope's containers refuse namespaces
    env.pop("PYTHONPATH", None)
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env, capture_output=True, text=True, encoding="utf-8")
    assert setup.returncode == 0, setup.stderr
    return root, env


def test_the_bundle_grades_a_submission_end_to_end_offline(submission, assignment, tmp_path):
    root, env = install_bundle(assignment, submission, tmp_path)
    assert not (tmp_path / "apt-get.log").exists(), "a local run (ROOT given) installs nothing system-wide unasked"
    installed = root / "grader" / "minitransformer"
    assert (installed / "layers" / "layernorm.py").read_bytes() == (REFERENCE / "layers" / "layernorm.py").read_bytes()
    assert (root / "grader").stat().st_mode & 0o077 == 0, "only root reads the reference"
    graded = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                            text=True, cwd=root / "submission", encoding="utf-8")
    assert graded.returncode == 0, graded.stderr
    assert graded.stdout.startswith("isolation: process"), graded.stdout[:300]
    results = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    if os.geteuid() == 0:                           # as on Gradescope: the submission runs as nobody
        assert "nor read or write the reference (only its owner may)" in results["output"]
    assert results["score"] == 1
    assert {t["name"]: (t["score"], t["max_score"]) for t in results["tests"]} == {
        "layernorm.backward": (0, 1), "relu.backward": (1, 1)}
