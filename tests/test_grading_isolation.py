"""The isolation levels of the grader (issue 19): what the student's process can see, reach and use.

A "spy" answer looks around from inside the student's process and reports what it saw in the
message of the exception it raises (the grader shows that message among the problems). Each test
runs under every level this machine has; bubblewrap's tests skip where it does not work.
"""

import json
import os
import re
import shutil
import socket
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from _grading_answers import REFERENCE, REGIONS, fresh_copy, indented, make_once, put_bodies, reference_body

from minitransformer.__main__ import main
from minitransformer.exercises.assignment import new_assignment, write_assignment
from minitransformer.exercises.catalogue import exercise_named
from minitransformer.exercises.grade import OutputRefused, _exercise_files, grade_copy, read_arrays, read_records
from minitransformer.exercises.isolation import LINUX_ONLY, Limits, _others_can_read, choose_isolation, scratch
from minitransformer.exercises.leaks import leaks_in, package_secrets
from minitransformer.exercises.make import _copy_package

if sys.platform != "linux":
    pytest.skip(LINUX_ONLY, allow_module_level=True)

pytestmark = pytest.mark.sandbox

try:
    choose_isolation("bubblewrap")
    BWRAP = None
except RuntimeError as error:
    BWRAP = str(error)
LEVELS = [pytest.param("bubblewrap", marks=pytest.mark.skipif(BWRAP is not None, reason=str(BWRAP))), "process"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return make_once(tmp_path_factory, ["relu"])


@pytest.fixture
def student(made, tmp_path):
    return fresh_copy(made, tmp_path)


def grade_relu(copy, level, **limits):
    (result,) = grade_copy(copy, new_assignment(["relu.backward"], REFERENCE, seed=7), isolation=level,
                           limits=Limits(**limits))
    return result


def spy(copy, level, *lines, **limits):
    """Run `lines` as the relu answer; they end by `raise RuntimeError(json.dumps(seen))`: return `seen`."""
    put_bodies(copy, {"relu.backward": indented("relu.backward", "import json, os, sys", *lines)})
    result = grade_relu(copy, level, **limits)
    found = re.search(r"raised RuntimeError: (\{.*?\})( \(at |$)", result.problems[0])
    assert found, result.problems
    return json.loads(found.group(1))


@pytest.fixture
def places():
    """{"public": a folder anyone may read, "private": one only its owner may enter (0700, as root's home)}, each
    a copy of the reference package, in a directory others may enter (where the grader puts its own jobs)."""
    base = Path(tempfile.mkdtemp(prefix="places-", dir=scratch()))
    base.chmod(0o755)
    found = {}
    for name, mode in (("public", 0o755), ("private", 0o700)):
        found[name] = base / name / "minitransformer"
        shutil.copytree(REFERENCE, found[name], ignore=shutil.ignore_patterns("__pycache__"))
        for path in [found[name], *found[name].rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (base / name).chmod(mode)
    if not _others_can_read(found["public"] / "__init__.py"):
        shutil.rmtree(base)
        pytest.skip(f"{base.parent} cannot be entered by others (the grader needs such a place too: set TMPDIR)")
    yield found
    shutil.rmtree(base)


def _can(action):
    return (f"def can(path):\n    try:\n        {action}\n        return True\n    except OSError:\n        return False")


# ---------------------------------------------------------------- what the student's process sees

@pytest.mark.parametrize("level", LEVELS)
def test_the_student_process_has_a_scrubbed_environment_and_none_of_the_graders_places(student, level, tmp_path,
                                                                                        monkeypatch, places):
    secret = tmp_path / "instructor" / "assignment.json"
    write_assignment(secret, new_assignment(["relu.backward"], REFERENCE, seed=7))
    monkeypatch.setenv("GRADER_SECRET", "s3cret")
    monkeypatch.chdir(REFERENCE.parent)
    layernorm = {name: str(package / "layers" / "layernorm.py") for name, package in places.items()}
    seen = spy(student, level, *_can("open(path).close()").splitlines(),
               "seen = {'env': sorted(os.environ), 'cwd': os.getcwd(), 'uid': os.getuid(),",
               f"        'assignment': can({str(secret)!r}),",
               "        'parent environ': can(f'/proc/{os.getppid()}/environ'),",
               f"        'reference': can({str(REFERENCE / 'layers' / 'layernorm.py')!r}),",
               f"        'public': can({layernorm['public']!r}), 'private': can({layernorm['private']!r}),",
               "        'path': [p for p in sys.path if 'site-packages' in p or 'main' in p]}",
               "raise RuntimeError(json.dumps(seen))")
    assert "GRADER_SECRET" not in seen["env"] and "PYTHONPATH" not in seen["env"]
    assert set(seen["env"]) <= {"PATH", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE", "OPENBLAS_NUM_THREADS",
                                "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PWD"}
    assert not seen["cwd"].startswith(str(REFERENCE.parent))
    if level == "bubblewrap" or os.geteuid() == 0:               # else the fallback runs it as the grader's user
        assert not seen["assignment"] and not seen["parent environ"]
    if os.geteuid() == 0:
        assert seen["uid"] == 65534                              # nobody: limits hold, /proc of the grader is closed
    if level == "bubblewrap":
        assert not seen["reference"] and not seen["public"], "the reference and the machine's files are out of sight"
        assert seen["path"] == []                                # no site-packages, no checkout on sys.path
    else:               # the fallback hides nothing: the answer reads what its user may (its guarantee line says so)
        assert seen["public"], "a world-readable copy of the reference"
        assert seen["private"] == (os.geteuid() != 0), "a private folder: nobody (under root) cannot enter it"
        assert seen["reference"] == (os.geteuid() != 0 or _others_can_read(REFERENCE / "layers" / "layernorm.py"))


@pytest.mark.parametrize("level", LEVELS)
def test_the_student_process_cannot_change_the_reference(student, level, tmp_path):
    if level == "process" and os.geteuid() != 0:
        pytest.skip("not graded as root, the fallback runs the answer as the grader's own user, who owns this "
                    "copy of the reference (the hash check stops the next exercise: test_grading_attacks.py)")
    reference = tmp_path / "reference" / "minitransformer"
    shutil.copytree(REFERENCE, reference, ignore=shutil.ignore_patterns("__pycache__"))
    target = reference / "gradcheck" / "checker.py"
    put_bodies(student, {"relu.backward": indented(
        "relu.backward",
        "try:",
        f"    open({str(target)!r}, 'a').write('# changed')",
        "except OSError as error:",
        "    raise RuntimeError(type(error).__name__) from None",
        "raise RuntimeError('written')")})
    (result,) = grade_copy(student, new_assignment(["relu.backward"], reference, seed=7), isolation=level,
                           reference=reference)
    assert "written" not in result.problems[0] and "# changed" not in target.read_text(encoding="utf-8")
    assert ("FileNotFoundError" if level == "bubblewrap" else "PermissionError") in result.problems[0]


@pytest.mark.skipif(BWRAP is not None, reason=str(BWRAP))
def test_bubblewrap_gives_a_pid_namespace_no_network_and_a_read_only_package(student):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        seen = spy(student, "bubblewrap", *_can("open(path, 'a').close()").splitlines(),
                   "pids = [p for p in os.listdir('/proc') if p.isdigit()]",
                   "try:",
                   "    import socket",
                   f"    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()",
                   "    network = True",
                   "except OSError:",
                   "    network = False",
                   "package = os.path.dirname(os.path.dirname(__file__))",
                   "seen = {'pids': len(pids), 'network': network, 'top': sorted(os.listdir('/')),",
                   "        'sandbox': sorted(os.listdir('/sandbox')), 'package writable': can(package + '/x.py')}",
                   "raise RuntimeError(json.dumps(seen))")
    finally:
        listener.close()
    assert seen["pids"] <= 4 and not seen["network"] and not seen["package writable"]
    assert seen["sandbox"] == ["harness", "pkg", "python", "site", "task"] or seen["sandbox"] == [
        "harness", "pkg", "site", "task"]
    assert not {"home", "root", "work", "etc", "var"} & set(seen["top"])


@pytest.mark.parametrize("level", LEVELS)
def test_forged_output_is_refused(student, level):
    put_bodies(student, {"relu.backward": indented(
        "relu.backward",
        "import os, sys, pickle, numpy",
        "def is_open(fd):",
        "    try:",
        "        return bool(os.fstat(fd))",
        "    except OSError:",
        "        return False",
        "result_fd, arrays_fd = [fd for fd in range(3, 1024) if is_open(fd)]   # all the child holds: its own two",
        "with os.fdopen(arrays_fd, 'wb') as arrays:      # the runner's arrays: an object array (a pickle)",
        "    numpy.savez(arrays, **{'case0.dinput0': numpy.array([object()] * 24).reshape(2, 3, 4)})",
        "with os.fdopen(result_fd, 'w') as result:",
        "    result.write('[{\"key\": \"case0\", \"forward_error\": null, \"backward_error\": null}]')",
        "os._exit(0)")})
    result = grade_relu(student, level)
    assert (result.status, result.points) == ("crashed", 0)
    assert "refused what the student's process handed back" in result.problems[0]


@pytest.mark.parametrize("level", LEVELS)
def test_every_level_says_which_guarantees_are_in_force(student, level, tmp_path, capsys):
    put_bodies(student, {"relu.backward": reference_body("relu.backward")})
    write_assignment(tmp_path / "a.json", new_assignment(["relu.backward"], REFERENCE, seed=7))
    assert main(["exercises", "grade", str(student), "--assignment", str(tmp_path / "a.json"),
                 "--isolation", level]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    if level == "bubblewrap":
        assert first.startswith("isolation: bubblewrap (pid/net/mount namespaces, read-only reference hidden)")
    else:
        assert first.startswith("isolation: process (as --isolation process asked; bubblewrap not used)"), first
        assert "none available" not in first and "no namespaces: a new session, an empty environment" in first
        if os.geteuid() == 0:                   # what nobody may read of this checkout: said
            assert "runs as nobody" in first
            assert READS_THE_REFERENCE[_others_can_read(REFERENCE / "__init__.py")] in first, first
    assert "2048 MB of memory" in first and "60 s" in first


READS_THE_REFERENCE = {True: "can read world-readable files, the installed reference among them",
                       False: "nor read or write the reference (only its owner may), but can read world-readable files"}


@pytest.mark.parametrize("level", LEVELS)
def test_the_grader_works_from_a_private_checkout_and_says_what_the_student_can_read(student, level, places):
    """An instructor's checkout in a private home (0700, as root's): the student's process, nobody under root,
    cannot enter it, yet gets all it needs (copied to the job directory); the process level's line says which."""
    put_bodies(student, {"relu.backward": reference_body("relu.backward")})
    for where, package in places.items():
        (result,) = grade_copy(student, new_assignment(["relu.backward"], package, seed=7), isolation=level,
                               reference=package)
        assert (result.status, result.problems) == ("ok", []), (where, result.problems)
        line = choose_isolation(level, reference=package).describe(Limits())
        if level == "process" and os.geteuid() == 0:
            assert READS_THE_REFERENCE[where == "public"] in line, (where, line)


def test_asking_for_bubblewrap_where_it_does_not_work_is_one_error_line(student, tmp_path, monkeypatch, capsys):
    from minitransformer.exercises import isolation

    monkeypatch.setattr(isolation.shutil, "which", lambda name: None)
    monkeypatch.setattr(isolation, "_CHOSEN", {})
    write_assignment(tmp_path / "a.json", new_assignment(["relu.backward"], REFERENCE, seed=7))
    assert main(["exercises", "grade", str(student), "--assignment", str(tmp_path / "a.json"),
                 "--isolation", "bubblewrap"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: exercises grade: --isolation bubblewrap: not available here: bwrap not found "
                   "(apt-get install bubblewrap)"]
    assert choose_isolation("auto").name == "process"              # auto falls back, and says why
    assert "bwrap not found" in choose_isolation("auto").describe(Limits())


def test_nothing_is_left_behind_in_the_scratch_directory(student, tmp_path, monkeypatch):
    from minitransformer.exercises import isolation

    assert scratch() in ("/dev/shm", None)
    put_bodies(student, {"relu.backward": reference_body("relu.backward")})
    closed = tmp_path / "closed"                      # pytest's own tmp_path: only its owner may enter
    closed.mkdir(mode=0o700)
    monkeypatch.setattr(isolation, "scratch", lambda: str(closed))
    if os.geteuid() == 0:                            # the student's code runs as nobody: it could not get in
        with pytest.raises(RuntimeError, match="cannot be reached by nobody.*TMPDIR"):
            grade_relu(student, "process")
    place = tempfile.mkdtemp(prefix="scratch-", dir="/tmp")
    try:
        os.chmod(place, 0o755)
        monkeypatch.setattr(isolation, "scratch", lambda: place)
        assert grade_relu(student, "process").points == 1
        assert os.listdir(place) == [] and os.listdir(closed) == []
    finally:
        shutil.rmtree(place)


# ---------------------------------------------------------------- the temporary package holds no solution

@pytest.mark.parametrize("exercise", ["softmax", "layernorm", "attention", "linear"])
def test_what_the_exercises_child_sees_holds_no_answer_of_it_nor_of_the_others(exercise, tmp_path):
    """The contained process's package (every assigned region blank), with the files its child compiles written in:
    its own answers, and the student's to the others, or where there are none (not found, not compiling), hints."""
    names = sorted(name for name in REGIONS if name.split(".")[0] == exercise)
    assigned = sorted({*names, "relu.backward", "multihead.backward", "gelu.forward"})       # others beside it
    bodies = {name: indented(name, "raise NotImplementedError('Exercise blank')") for name in [*names, "relu.backward"]}
    target = tmp_path / "pkg" / "minitransformer"
    _copy_package(REFERENCE, target, assigned, REGIONS)
    assert leaks_in(tmp_path / "pkg", package_secrets(REFERENCE, REGIONS, assigned)) == []
    for relative, text in _exercise_files(REFERENCE, REGIONS, assigned, bodies).items():
        (target / relative).write_text(text, encoding="utf-8")
    assert leaks_in(tmp_path / "pkg", package_secrets(REFERENCE, REGIONS, assigned)) == []
    for fast in exercise_named(exercise).fast_files:
        assert not (target / "fast" / f"{fast}.py").exists()


# ---------------------------------------------------------------- limits and untrusted files

@pytest.mark.parametrize(("option", "value"), [("timeout", 0), ("timeout", -1), ("timeout", float("nan")),
                                               ("timeout", float("inf")), ("memory_mb", 100)])
def test_limits_refuse_what_is_not_a_limit(option, value):
    with pytest.raises(ValueError, match=f"--{option.split('_')[0]} expected"):
        Limits(**{option: value})


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return path


def test_untrusted_arrays_are_read_with_exact_shapes_and_bounded_sizes(tmp_path):
    shapes = {"case0.out": (2, 3)}
    assert read_arrays(_npz(tmp_path / "ok.npz", **{"case0.out": np.ones((2, 3), np.float32), "extra": np.ones(9)}),
                       shapes).keys() == {"case0.out"}
    refused = {
        "pickle": _npz(tmp_path / "p.npz", **{"case0.out": np.array([[object()] * 3] * 2)}),
        "shape": _npz(tmp_path / "s.npz", **{"case0.out": np.ones((3, 2))}),
        "complex": _npz(tmp_path / "c.npz", **{"case0.out": np.ones((2, 3), complex)}),
        "large": _npz(tmp_path / "l.npz", **{"case0.out": np.ones((2, 3)), "pad": np.ones(10**6)}),
    }
    bomb = tmp_path / "bomb.npz"                 # small on disk, 20 MB once inflated
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("case0.out.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_2_0(member, {"descr": "<f8", "fortran_order": False, "shape": (2, 3)})
            for _ in range(20):
                member.write(bytes(2**20))
    refused["bomb"] = bomb
    (tmp_path / "not.npz").write_text("hello", encoding="utf-8")
    refused["not a zip"] = tmp_path / "not.npz"
    os.symlink("/etc/passwd", tmp_path / "link.npz")
    refused["symlink"] = tmp_path / "link.npz"
    os.mkfifo(tmp_path / "fifo.npz")                    # opening it must not hang
    refused["fifo"] = tmp_path / "fifo.npz"
    for what, path in refused.items():
        with pytest.raises(OutputRefused):
            read_arrays(path, shapes)
            pytest.fail(f"{what} was accepted")


def test_untrusted_records_are_checked(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps([{"key": "case0", "forward_error": "x" * 900, "backward_error": None,
                                 "region": "layernorm.forward"}]), encoding="utf-8")
    assert read_records(path, {"case0"}, {"layernorm.forward"}) == {
        "case0": {"forward_error": "x" * 500, "backward_error": None, "region": "layernorm.forward"}}
    for text in ('{"key": "case0"}', '[{"key": "case9"}]', '[{"key": "case0", "forward_error": 3}]', "[" * 10,
                 " " * (2**20 + 1), '[{"key": "case0", "region": "relu.backward"}]', '[{"key": "case0", "region": 3}]'):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(OutputRefused):
            read_records(path, {"case0"}, {"layernorm.forward"})
