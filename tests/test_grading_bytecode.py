"""The reference's byte code: under `--isolation process` as the grader's own user, an answer can write the
reference's `__pycache__` (the assignment's hashes cover the sources only), and every later import of the reference
would run that code, computing the numbers submissions are graded against. The grader refuses a reference holding
code that is not its sources': a cache whose code differs from its source's, an extension module, a stray .pyc.
"""

import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
from importlib._bootstrap_external import _code_to_timestamp_pyc

import pytest
from _grading_answers import REFERENCE, fresh_copy, indented, make_once, put_bodies, reference_body

from minitransformer.exercises.assignment import ReferenceChanged, foreign_code, new_assignment, verify_reference
from minitransformer.exercises.grade import grade_copy
from minitransformer.exercises.isolation import LINUX_ONLY, choose_isolation

if sys.platform != "linux":
    pytest.skip(LINUX_ONLY, allow_module_level=True)

pytestmark = pytest.mark.sandbox

POISON = "relu.py's forward returns zeros"


def poisoned_pyc(source):
    """The bytes of a valid byte-code cache of `source` (its mtime and size in the header) whose ReLU forward
    returns zeros: what Python loads in place of the source."""
    text = source.read_text(encoding="utf-8").replace("return np.maximum(x, 0)", "return x * 0.0")
    assert text != source.read_text(encoding="utf-8")
    info = source.stat()
    return bytes(_code_to_timestamp_pyc(compile(text, str(source), "exec", dont_inherit=True), info.st_mtime,
                                        info.st_size))


@pytest.fixture
def reference(tmp_path):
    """A private copy of the reference package (its byte code ours to spoil) and an assignment made from it."""
    package = shutil.copytree(REFERENCE, tmp_path / "ref" / "minitransformer",
                              ignore=shutil.ignore_patterns("__pycache__"))
    return package, new_assignment(["relu.backward"], package, seed=7)


def relu_forward_in(package):
    """What ReLU's forward gives on [1, 2] when `package` is imported anew (byte code read as Python does)."""
    code = "from minitransformer.layers.activations import ReLU; print(ReLU().forward([1.0, 2.0]).tolist())"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    done = subprocess.run([sys.executable, "-c", code], cwd=package.parent, env=env, capture_output=True, text=True,
                          timeout=120, encoding="utf-8")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_poisoned_byte_code_cache_is_loaded_by_python_and_refused_by_the_grader(reference):
    package, assignment = reference
    source = package / "layers" / "activations.py"
    verify_reference(package, assignment)
    assert relu_forward_in(package) == "[1.0, 2.0]"           # the import wrote a sound cache: still accepted
    verify_reference(package, assignment)
    cache = importlib.util.cache_from_source(str(source))
    with open(cache, "wb") as handle:
        handle.write(poisoned_pyc(source))
    assert relu_forward_in(package) == "[0.0, 0.0]", "the attack is real: Python runs the cache, not the source"
    with pytest.raises(ReferenceChanged, match=r"layers/__pycache__/activations\.cpython-\d+\.pyc"):
        verify_reference(package, assignment)
    os.remove(cache)
    verify_reference(package, assignment)


@pytest.mark.parametrize("name", [f"layers/activations{importlib.machinery.EXTENSION_SUFFIXES[0]}", "layers/activations.pyc"])
def test_other_importable_files_in_the_reference_are_refused(reference, name):
    package, assignment = reference
    (package / name).write_bytes(b"\x7fELF not really")
    assert foreign_code(package) == [name]
    with pytest.raises(ReferenceChanged, match="not its sources'"):
        verify_reference(package, assignment)


def test_an_answer_that_writes_the_references_byte_code_stops_the_grading(reference, tmp_path_factory, tmp_path):
    package, assignment = reference
    copy = fresh_copy(make_once(tmp_path_factory, ["relu"]), tmp_path)
    source = package / "layers" / "activations.py"
    cache = importlib.util.cache_from_source(str(source))
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    payload = tmp_path / "payload.pyc"
    payload.write_bytes(poisoned_pyc(source))
    put_bodies(copy, {"relu.backward": indented("relu.backward", "import shutil",
                                                f"shutil.copyfile({str(payload)!r}, {cache!r})")
                      + reference_body("relu.backward")})
    isolation = choose_isolation("process", package)
    isolation.user = None                 # the grader's own user, as without root (under root: nobody, who cannot)
    with pytest.raises(ReferenceChanged, match="activations"):
        grade_copy(copy, assignment, isolation=isolation, reference=package)
    assert relu_forward_in(package) == "[0.0, 0.0]"           # what a later grading would have computed with
