"""Nothing of another exercise's answer reaches the student: the process that runs an answer holds no source, byte
code, `linecache` entry or file of another assigned region's reference answer.

With layernorm and block assigned, block's cases call LayerNorm. Each attack is a `block.backward` that reads what
it can of LayerNorm's code in its process and raises it (or prints it and crashes), so that the grader's feedback
would carry it. The student's own layernorm is right but written otherwise than the reference's, so block's forward
runs, the attack is reached, and anything of the reference's answer in what the student sees is a leak: the score
table and the rest of the command's output, the JSON, Gradescope's results.json. Code attacks report the SHA-256 of
the byte code they found beside it (the test knows the reference's).
"""

import csv
import hashlib
import json
import re
import shutil
import sys

import pytest
from _grading_answers import (
    REFERENCE,
    REGIONS,
    fresh_copy,
    indented,
    isolation_levels,
    make_once,
    put_bodies,
    reference_body,
    wrong_body,
)

from minitransformer.__main__ import main
from minitransformer.exercises.assignment import new_assignment, write_assignment
from minitransformer.exercises.grade import grade_copy
from minitransformer.exercises.gradescope import gradescope_results
from minitransformer.exercises.isolation import LINUX_ONLY
from minitransformer.exercises.leaks import normalise, package_secrets, secret_keys
from minitransformer.exercises.regions import blank_regions, replace_regions

if sys.platform != "linux":
    pytest.skip(LINUX_ONLY, allow_module_level=True)

ASSIGNED = ["block.backward", "layernorm.backward", "layernorm.forward"]
OTHER = ["layernorm.backward", "layernorm.forward"]            # the other exercise's regions, which block's cases call
LEVELS = isolation_levels()

# The student's layernorm: right, and written otherwise than the reference's (no line of it is one of the reference's)
OWN = {"layernorm.forward": indented(
    "layernorm.forward",
    "mu = np.mean(x, axis=-1, keepdims=True)",
    "self.rstd = (np.var(x, axis=-1, keepdims=True) + self.eps) ** -0.5",
    "self.xhat = (x - mu) * self.rstd"),
    "layernorm.backward": indented(
    "layernorm.backward",
    "rows = tuple(range(dout.ndim - 1))",
    "self.gamma.grad += np.sum(dout * self.xhat, axis=rows)",
    "self.beta.grad += np.sum(dout, axis=rows)",
    "gx = dout * self.gamma.data",
    "n = dout.shape[-1]",
    "return self.rstd / n * (n * gx - np.sum(gx, axis=-1, keepdims=True)"
    " - self.xhat * np.sum(gx * self.xhat, axis=-1, keepdims=True))")}

# What every attack shares: the module, the backward under the base class's wrapper, the code objects of a compiled
# module by qualified name, a code object as "<digest> <hex>", a text from the backward's region on
HEAD = [
    "import dis, gc, hashlib, importlib.util, inspect, linecache, marshal, os, sys",
    "import minitransformer.layers.layernorm as module",
    "function = inspect.unwrap(module.LayerNorm.backward)",
    "def codes(code, prefix=''):",
    "    for inner in code.co_consts:",
    "        if hasattr(inner, 'co_code'):",
    "            yield prefix + inner.co_name, inner",
    "            yield from codes(inner, prefix + inner.co_name + '.')",
    "def shown(code):",
    "    return hashlib.sha256(code.co_code).hexdigest()[:16] + ' ' + code.co_code.hex()",
    "def region(text):",
    "    return text[max(text.find('BEGIN SOLUTION layernorm.backward'), 0):]",
]

ATTACKS = {
    "inspect.getsource": ["stolen = region(inspect.getsource(function))"],
    "linecache.getlines": ["stolen = region(''.join(linecache.getlines(module.__file__)))"],
    "the module's __file__": ["stolen = region(open(module.__file__).read())"],
    "inspect.getfile": ["stolen = region(open(inspect.getfile(module.LayerNorm)).read())"],
    "__code__.co_code": ["stolen = shown(function.__code__)"],
    "dis": ["stolen = shown(function.__code__)[:17] + ' '.join(i.argrepr for i in dis.get_instructions(function))"],
    "marshal": ["stolen = shown(function.__code__)[:17] + marshal.dumps(function.__code__).hex()"],
    "__pycache__ .pyc files": [
        "cache = importlib.util.cache_from_source(module.__file__)",
        "folders = {os.path.dirname(cache), os.path.dirname(module.__file__)}",
        "found = [os.path.join(f, n) for f in folders if os.path.isdir(f) for n in os.listdir(f) if 'layernorm' in n]",
        "stolen = 'no byte code: ' + ' '.join(found)",
        "for path in found:",
        "    try:",
        "        top = marshal.loads(open(path, 'rb').read()[16:])",
        "    except Exception:",
        "        continue",
        "    stolen = ' | '.join(shown(c) for name, c in codes(top) if name == 'LayerNorm.backward')"],
    "walking sys.modules": [
        "found = [inspect.unwrap(v.backward) for m in list(sys.modules.values()) for v in list(vars(m).values())",
        "         if isinstance(v, type) and v.__name__ == 'LayerNorm' and 'backward' in vars(v)]",
        "stolen = ' | '.join(shown(f.__code__) for f in found)"],
    "the runner's memory (gc, frames)": [
        "texts = [o.get('layers/layernorm.py') for o in gc.get_objects() if type(o) is dict]",
        "frame = sys._getframe()",
        "while frame is not None:",
        "    texts += [v.get('layers/layernorm.py') for v in frame.f_locals.values() if type(v) is dict]",
        "    frame = frame.f_back",
        "stolen = ' | '.join(region(t) for t in texts if isinstance(t, str))"],
    "the fast form (fast/layernorm.py)": [
        "try:",
        "    stolen = inspect.getsource(importlib.import_module('minitransformer.fast.layernorm'))",
        "    stolen = stolen[stolen.find('def backward'):]",
        "except ImportError as error:",
        "    stolen = f'no fast form: {error}'"],
    "a crash's last line of stderr": [
        "stolen = region(inspect.getsource(function))",
        "os.write(2, (' '.join(stolen.split()) + '\\n').encode())",
        "os._exit(1)"],
}


def attack(name):
    """block.backward doing the attack `name`, then raising what it found."""
    return indented("block.backward", *HEAD, *ATTACKS[name], "raise RuntimeError('STOLEN ' + stolen)")


def backward_code(text):
    """The code object of LayerNorm.backward in the module source `text` (compiled as the runner compiles it)."""
    classes = [c for c in compile(text, "layernorm.py", "exec", dont_inherit=True).co_consts if hasattr(c, "co_code")]
    return next(f for c in classes if c.co_name == "LayerNorm" for f in c.co_consts
                if hasattr(f, "co_code") and f.co_name == "backward")


def _hex_windows(code, size=24):
    text = code.co_code.hex()
    return {text[i:i + size] for i in range(0, len(text) - size + 1, 2)}


def _reference_marks():
    """What shows the reference's layernorm: its region lines' keys (as `exercises make` finds answers) and its fast
    form's (which a copy leaves out), the digest of its backward's byte code, and windows of that byte code in hex
    that neither the student's nor the blank backward has."""
    source = (REFERENCE / "layers" / "layernorm.py").read_text(encoding="utf-8")
    given = {normalise(line) for line in blank_regions(source, set(OTHER), "layers/layernorm.py").splitlines()}
    fast = (REFERENCE / "fast" / "layernorm.py").read_text(encoding="utf-8").splitlines()
    reference = backward_code(source)
    others = [backward_code(blank_regions(source, set(OTHER), "layers/layernorm.py")),
              backward_code(replace_regions(source, OWN, "layers/layernorm.py"))]
    keys = {key for name, found in package_secrets(REFERENCE, REGIONS, OTHER).items() for key in found}
    keys |= {key for line in fast for key in secret_keys(line, given)}
    own = "".join(normalise(line) for lines in OWN.values() for line in lines)
    assert keys and not [key for key in keys if key in own], "the student's layernorm must not be the reference's"
    windows = _hex_windows(reference) - set().union(*map(_hex_windows, others))
    assert len(windows) > 20
    return keys, hashlib.sha256(reference.co_code).hexdigest()[:16], windows


KEYS, DIGEST, WINDOWS = _reference_marks()


def reference_shown(text):
    """What of the reference's layernorm answer `text` shows (empty: nothing)."""
    flat = re.sub(r"\s+", "", text).replace("self.", "")
    found = {key for key in KEYS if key in flat} | {f"byte code {window}" for window in WINDOWS if window in flat}
    return sorted(found | ({"the byte code's digest"} if DIGEST in flat else set()))


def strings(value):
    """Every string in a JSON value, one per line."""
    if isinstance(value, dict):
        return "\n".join(strings(v) for v in [*value.keys(), *value.values()])
    if isinstance(value, list):
        return "\n".join(map(strings, value))
    return value if isinstance(value, str) else ""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return make_once(tmp_path_factory, ["block", "layernorm"])


@pytest.fixture(scope="module")
def activations(tmp_path_factory):
    """A copy with relu and gelu assigned: both in layers/activations.py."""
    return make_once(tmp_path_factory, ["relu", "gelu"])


@pytest.fixture
def student(made, tmp_path):
    copy = fresh_copy(made, tmp_path)
    put_bodies(copy, OWN)
    return copy


def graded_output(student, tmp_path, level, capsys, only=()):
    """Everything a student can be shown of the grade: the command's stdout and stderr, the JSON, results.json."""
    assignment = write_assignment(tmp_path / "a.assignment.json", new_assignment(ASSIGNED, REFERENCE, seed=45))
    json_path, results = tmp_path / "grades.json", tmp_path / "results.json"
    code = main(["exercises", "grade", str(student), "--assignment", str(assignment), "--json", str(json_path),
                 "--gradescope", str(results), "--isolation", level, *(["--only", ",".join(only)] if only else [])])
    out = capsys.readouterr()
    assert code == 1, out.err
    return {"stdout (the score table)": out.out, "stderr": out.err,
            "--json": strings(json.loads(json_path.read_text(encoding="utf-8"))),
            "results.json": strings(json.loads(results.read_text(encoding="utf-8")))}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", list(ATTACKS))
def test_an_answer_shows_nothing_of_the_reference_it_calls(student, tmp_path, level, name, capsys):
    put_bodies(student, {"block.backward": attack(name)})
    shown = graded_output(student, tmp_path, level, capsys)
    assert {where: reference_shown(text) for where, text in shown.items()} == dict.fromkeys(shown, [])
    ran = "the grading process ended with exit code 1" if name == "a crash's last line of stderr" else "STOLEN"
    assert ran in shown["stdout (the score table)"]                # the attack was reached: block's forward ran


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", ["the module's __file__", "inspect.getfile", "inspect.getsource", "__code__.co_code",
                                  "the fast form (fast/layernorm.py)"])
def test_grading_one_exercise_of_several_shows_nothing_of_the_others(student, tmp_path, level, name, capsys):
    """`--only block`: layernorm is assigned, not graded in this run; block's process holds nothing of its answer."""
    put_bodies(student, {"block.backward": attack(name)})
    shown = graded_output(student, tmp_path, level, capsys, only=["block"])
    assert {where: reference_shown(text) for where, text in shown.items()} == dict.fromkeys(shown, [])
    assert "STOLEN" in shown["stdout (the score table)"]


@pytest.mark.parametrize("level", LEVELS)
def test_an_answer_shows_nothing_of_another_answer_in_its_own_file(activations, tmp_path, level, capsys):
    """relu and gelu are both in layers/activations.py; relu's cases never call GELU, yet its process compiled the
    file. The student has not written gelu: relu's answer raises what it reads of GELU's code."""
    copy = fresh_copy(activations, tmp_path)
    put_bodies(copy, {"relu.backward": indented(
        "relu.backward", "import inspect, minitransformer.layers.activations as module",
        "raise RuntimeError('STOLEN ' + inspect.getsource(module.GELU))")})
    assignment = write_assignment(tmp_path / "a.json", new_assignment(
        ["gelu.backward", "gelu.forward", "relu.backward"], REFERENCE, seed=45))
    assert main(["exercises", "grade", str(copy), "--assignment", str(assignment), "--isolation", level]) == 1
    out = capsys.readouterr().out
    keys = {key for found in package_secrets(REFERENCE, REGIONS, ["gelu.backward", "gelu.forward"]).values()
            for key in found}
    flat = re.sub(r"\s+", "", out).replace("self.", "")
    assert "STOLEN" in out and [key for key in keys if key in flat] == []


def test_a_class_grading_shows_nothing_of_the_reference_it_calls(made, tmp_path, capsys):
    """`exercises grade --class`: the gradebook, each student's kept grade and the command's output."""
    folder = tmp_path / "class"
    for name in ("getsource", "gc"):
        shutil.copytree(made, folder / name)
        put_bodies(folder / name, {**OWN, "block.backward": attack(
            "inspect.getsource" if name == "getsource" else "the runner's memory (gc, frames)")})
    assignment = write_assignment(tmp_path / "a.json", new_assignment(ASSIGNED, REFERENCE, seed=45))
    assert main(["exercises", "grade", str(folder), "--class", "--assignment", str(assignment), "-j", "1",
                 "--isolation", "process"]) == 0
    out = capsys.readouterr()
    kept = {path.name: strings(json.loads(path.read_text(encoding="utf-8")))
            for path in (tmp_path / "class.gradebook.grades").glob("*.json")}
    with open(tmp_path / "class.gradebook.csv", newline="", encoding="utf-8") as handle:
        gradebook = "\n".join(",".join(row) for row in csv.reader(handle))
    shown = {"stdout": out.out, "stderr": out.err, "gradebook": gradebook, **kept}
    assert len(kept) == 2 and all("STOLEN" in text for text in kept.values())
    assert {where: reference_shown(text) for where, text in shown.items()} == dict.fromkeys(shown, [])


# ---------------------------------------------------------------- the feedback stays useful

# the student's layernorm.backward with a shape mistake (means without keepdims); their forward is right
SHAPE_MISTAKE = "return self.rstd * (g - g.mean(-1) - self.xhat * (g * self.xhat).mean(-1))"


def grade_all(copy, level="process", regions=ASSIGNED, only=None):
    return {g.exercise: g for g in grade_copy(copy, new_assignment(regions, REFERENCE, seed=45), only=only,
                                                   isolation=level)}


def line_of(copy, relative, text):
    """The number of the line of the copy's file `relative` that holds `text`, counted from 1."""
    lines = (copy / "minitransformer" / relative).read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


@pytest.mark.parametrize("level", LEVELS)
def test_a_failure_in_what_an_exercise_calls_is_said_to_be_there(student, level):
    put_bodies(student, {"layernorm.forward": reference_body("layernorm.forward"), "block.backward":
                         reference_body("block.backward"), "layernorm.backward": indented(
                             "layernorm.backward", "g = dout * self.gamma.data", SHAPE_MISTAKE)})
    grades = grade_all(student, level)
    layernorm, block = grades["layernorm"], grades["block"]
    line = line_of(student, "layers/layernorm.py", SHAPE_MISTAKE)
    where = f"(at layers/layernorm.py:{line} in backward: {SHAPE_MISTAKE})"            # the student's own line
    assert layernorm.status == "error" and all(where in problem for problem in layernorm.problems)
    assert block.status == "failed in layernorm.backward, which it calls" and block.points == 0
    calling = [case for case in block.cases if case["failed_in"]]
    assert len(calling) == 7 and {case["failed_in"][0] for case in calling} == {"layernorm.backward"}
    for case in calling:                                    # which case, how (the exception), the student's own line
        (problem,) = case["backward_problems"]
        assert problem.startswith(f"{case['case']}: backward failed because layernorm.backward, which it calls, "
                                  f"failed: raised ValueError: operands could not be broadcast") and where in problem
    (rmsnorm,) = [case for case in block.cases if not case["failed_in"]]           # the case that calls no LayerNorm
    assert "rmsnorm" in rmsnorm["case"] and rmsnorm["backward_ok"]
    assert block.problems[-1] == "block's cases call your answers to layernorm (error): a mistake there fails block too"
    tests = {test["name"]: test["output"] for test in gradescope_results(list(grades.values()))["tests"]}
    assert tests["block.backward"].startswith("block.backward: failed in layernorm.backward, which it calls\n")
    assert "backward failed because layernorm.backward, which it calls, failed: raised ValueError" in tests[
        "block.backward"]


def test_wrong_numbers_in_what_an_exercise_calls_are_named_beside_its_own(student):
    put_bodies(student, {"layernorm.forward": reference_body("layernorm.forward"),
                         "layernorm.backward": wrong_body("layernorm.backward"),
                         "block.backward": reference_body("block.backward")})
    grades = grade_all(student)
    assert (grades["layernorm"].status, grades["block"].status) == ("wrong", "wrong")
    assert grades["block"].problems[-1] == ("block's cases call your answers to layernorm (wrong): a mistake there "
                                            "fails block too")
    shown = {test["name"]: test["output"] for test in gradescope_results(list(grades.values()))["tests"]}
    assert shown["block.backward"].endswith("\n" + grades["block"].problems[-1])        # Gradescope's visible output
    assert not any("calls" in problem for problem in grades["layernorm"].problems)


def test_an_answer_that_does_not_compile_fails_its_exercise_and_what_calls_it(student):
    put_bodies(student, {"layernorm.forward": reference_body("layernorm.forward"),
                         "layernorm.backward": indented("layernorm.backward", "return dout *"),
                         "block.backward": reference_body("block.backward")})
    grades = grade_all(student)
    line = line_of(student, "layers/layernorm.py", "return dout *")
    assert grades["layernorm"].problems[0].endswith(
        f"forward raised SyntaxError: invalid syntax (at layers/layernorm.py:{line})")
    assert grades["block"].status == "failed in layernorm.backward, which it calls"
    assert grades["block"].problems[0].endswith("backward failed because layernorm.backward, which it calls, does not "
                                                "compile (see exercise layernorm)")


def test_an_answer_that_does_not_compile_costs_nothing_else(activations, tmp_path):
    """relu and gelu share layers/activations.py: gelu's broken answer does not break relu, which never calls it."""
    copy = fresh_copy(activations, tmp_path)
    put_bodies(copy, {name: reference_body(name) for name in ("relu.backward", "gelu.backward")})
    put_bodies(copy, {"gelu.forward": indented("gelu.forward", "return (x")})
    grades = grade_all(copy, regions=["gelu.backward", "gelu.forward", "relu.backward"])
    assert (grades["relu"].status, grades["relu"].points) == ("ok", 1)
    assert grades["gelu"].status == "error" and "SyntaxError" in grades["gelu"].problems[0]


def test_right_answers_written_otherwise_take_full_marks(student):
    put_bodies(student, {"block.backward": reference_body("block.backward")})          # OWN layernorm is right
    grades = grade_all(student)
    assert {name: (g.status, g.points, g.max_points) for name, g in grades.items()} == {
        "layernorm": ("ok", 2, 2), "block": ("ok", 1, 1)}


def test_what_is_called_but_not_graded_in_this_run_is_said_so(made, tmp_path):
    copy = fresh_copy(made, tmp_path)                                # layernorm blank, as the copy was made
    put_bodies(copy, {"block.backward": reference_body("block.backward")})
    (block,) = grade_all(copy, only=["block"]).values()
    assert block.status == "failed in layernorm.forward, which it calls"
    assert block.cases[0]["forward_problems"][0].endswith(
        "forward failed because layernorm.forward, which it calls, failed: not implemented (layernorm.forward) at "
        f"layers/layernorm.py:{line_of(copy, 'layers/layernorm.py', 'Exercise layernorm.forward')} in forward")
    assert block.problems[-1] == ("block's cases call your answers to layernorm (not graded in this run): a mistake "
                                  "there fails block too")
    (shown,) = gradescope_results([block])["tests"]             # block.backward: where the forward failed, and why
    assert shown["output"].splitlines()[:3] == [
        "block.backward: failed in layernorm.forward, which it calls",
        "backward not judged where the forward pass failed:", block.cases[0]["forward_problems"][0]]
    assert shown["output"].endswith("\n" + block.problems[-1])
