"""The verdict on one exercise: the reference's numbers, the student's arrays read as untrusted, the comparison.

Everything here runs in the grader, a process that never imports student code, so nothing an
answer patches (the checker, NumPy, builtins) reaches it.

For each gradient-check case of the exercise's layers (`gradcheck.cases`):

* inputs and parameters are drawn from the assignment's seed (`default_rng([seed, case index])`),
  and an upstream gradient G of the output's shape (`default_rng([seed, case index, 1])`);
* the reference forward gives the expected output;
* the expected gradients are those of the *reference* forward, L = sum(G * forward(inputs)), by
  the gradient checker's central differences in float64, for every float input and parameter.
  The reference backward must agree with them (`compare_gradients`; else the reference is broken
  and grading stops), so a student's backward is held to the true gradient, not to that of the
  student's own forward: a wrong forward costs the forward region's point only.

The student's process hands back its forward outputs and gradients (`runner.py`); they are read
with bounded sizes, without pickles, and must have exactly the expected shapes and a real dtype.
A forward passes when every case's output is within the tolerance, a backward when every
gradient of every case is, compared by the gradient checker's `compare`.
"""

import io
import json
import os
import stat
import zipfile
from dataclasses import dataclass, field

import numpy as np

from ..gradcheck.cases import all_cases
from ..gradcheck.checker import compare, compare_gradients, float_inputs, input_names

RESULT_LIMIT = 2**20                      # bytes of the JSON the student's process may hand back


class ReferenceBroken(RuntimeError):
    """The reference's own backward disagrees with finite differences of its forward: nothing can be graded."""


class OutputRefused(ValueError):
    """What the student's process handed back is not what a runner writes (too large, not .npz, wrong shapes)."""


@dataclass
class ReferenceCase:
    """One case of an exercise, as the grader computed it from the reference."""

    key: str                       # "case0": how the case's arrays are named in the files
    index: int                     # position in the catalogue (all_cases())
    id: str                        # "LayerNorm[x (2, 3, 6)]"
    inputs: list                   # arrays, forward's positional arguments
    input_names: list              # "input 0 (x)", from forward's signature
    float_inputs: list             # indices of the differentiable (float) inputs
    param_names: list
    params: list                   # parameter values (arrays)
    upstream: np.ndarray           # G, the output's shape
    output: np.ndarray             # the reference forward's output, float64
    input_grads: dict              # float input index -> dL/dinput (finite differences of the reference)
    param_grads: list              # dL/dparam per parameter (finite differences of the reference)


def _reference_case(case, index, key, seed, tolerance):
    module, inputs, forward = case.build(np.random.default_rng([seed, index]))
    forward = module.forward if forward is None else forward
    if not all(isinstance(value, np.ndarray) for value in inputs):
        raise ReferenceBroken(f"{case.id}: every input of a graded case must be an array")
    names, params = input_names(forward, len(inputs)), module.named_parameters()
    given = [value.copy() for value in inputs], [param.data.copy() for _, param in params]
    output = np.asarray(forward(*inputs), dtype=np.float64)
    upstream = np.random.default_rng([seed, index, 1]).standard_normal(output.shape)
    report, (input_grads, param_grads) = compare_gradients(
        module, inputs, forward, float(upstream) if upstream.ndim == 0 else upstream, names=names)
    wrong = [c.describe() for c in report.failures(tolerance)]
    if wrong:
        raise ReferenceBroken(f"the reference backward of {case.id} disagrees with finite differences of the reference "
                              f"forward ({'; '.join(wrong)}): the reference is broken, nothing is graded")
    return ReferenceCase(key, index, case.id, given[0], names, float_inputs(inputs), [name for name, _ in params],
                         given[1], upstream, output, input_grads, param_grads)


_CACHE = {}


def reference_cases(layers, seed, tolerance):
    """The ReferenceCase of every catalogue case of `layers` (a tuple), for `seed`; computed once per process."""
    key = (tuple(layers), int(seed), float(tolerance))
    if key not in _CACHE:
        cases = [(index, case) for index, case in enumerate(all_cases()) if case.layer in layers]
        _CACHE[key] = [_reference_case(case, index, f"case{n}", seed, tolerance)
                       for n, (index, case) in enumerate(cases)]
    return _CACHE[key]


def task_inputs(cases):
    """The arrays the student's process needs, as a dict for `np.savez`, and the task's case list."""
    arrays, specs = {}, []
    for case in cases:
        for i, value in enumerate(case.inputs):
            arrays[f"{case.key}.input{i}"] = value
        for j, value in enumerate(case.params):
            arrays[f"{case.key}.param{j}"] = value
        arrays[f"{case.key}.upstream"] = case.upstream
        specs.append({"key": case.key, "index": case.index, "id": case.id, "params": case.param_names,
                      "inputs": len(case.inputs)})
    return arrays, specs


def expected_shapes(cases):
    """dict array name -> shape of every array a runner may hand back for `cases`."""
    shapes = {}
    for case in cases:
        shapes[f"{case.key}.out"] = case.output.shape
        shapes.update({f"{case.key}.dinput{i}": case.inputs[i].shape for i in case.float_inputs})
        shapes.update({f"{case.key}.dparam{j}": value.shape for j, value in enumerate(case.params)})
    return shapes


# ---------------------------------------------------------------- reading what the student's process wrote

def _read_bounded(path, limit):
    """The bytes of the regular file `path` (no symlink, no FIFO), OutputRefused when larger than `limit`."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise OutputRefused(f"cannot open what the student's process wrote ({error.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OutputRefused("what the student's process wrote is not a regular file")
        if info.st_size > limit:
            raise OutputRefused(f"the student's process wrote {info.st_size} bytes, more than the {limit} expected")
        return handle.read(limit + 1)[:limit]


def read_records(path, keys):
    """The runner's JSON records as {key: {"forward_error": str or None, "backward_error": ...}}, checked."""
    try:
        records = json.loads(_read_bounded(path, RESULT_LIMIT).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        if isinstance(error, OutputRefused):
            raise
        raise OutputRefused(f"the student's process handed back no valid result ({type(error).__name__})") from None
    if not isinstance(records, list):
        raise OutputRefused("the student's process handed back a result that is not a list of cases")
    checked = {}
    for record in records:
        if not isinstance(record, dict) or record.get("key") not in keys:
            raise OutputRefused("the student's process handed back a result for a case that was not asked for")
        clean = {}
        for side in ("forward_error", "backward_error"):
            message = record.get(side)
            if message is not None and not isinstance(message, str):
                raise OutputRefused("the student's process handed back a result with a malformed message")
            clean[side] = None if message is None else message[:500]
        checked[record["key"]] = clean
    return checked


def read_arrays(path, shapes):
    """The arrays the runner handed back: {name: float64 array}, only names in `shapes` and of exactly that shape.

    Args:
        path: the .npz file.
        shapes: dict name -> expected shape (`expected_shapes`); anything else in the file is ignored.
    Raises OutputRefused for a file that is not a plain .npz of real arrays of the expected shapes.
    """
    budget = sum(8 * int(np.prod(shape)) + 4096 for shape in shapes.values()) + 65536
    data = _read_bounded(path, budget)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        raise OutputRefused("the arrays the student's process handed back are not a valid .npz") from None
    arrays = {}
    for member in members:
        name = member.filename[:-4] if member.filename.endswith(".npy") else None
        if name not in shapes:
            continue
        limit = 8 * int(np.prod(shapes[name])) + 4096
        if member.file_size > limit:
            raise OutputRefused(f"{name}: {member.file_size} bytes, more than an array of shape {shapes[name]} needs")
        try:
            with archive.open(member) as handle:
                raw = handle.read(limit + 1)
            if len(raw) > limit:
                raise OutputRefused(f"{name}: more bytes than an array of shape {shapes[name]} needs")
            array = np.load(io.BytesIO(raw), allow_pickle=False)
        except OutputRefused:
            raise
        except Exception as error:                         # a malformed header, a pickle, a bad CRC
            raise OutputRefused(f"{name}: not a plain NumPy array ({type(error).__name__})") from None
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "fiub":
            raise OutputRefused(f"{name}: not an array of real numbers")
        if array.shape != tuple(shapes[name]):
            raise OutputRefused(f"{name}: shape {array.shape}, expected {tuple(shapes[name])}")
        arrays[name] = array.astype(np.float64)
    return arrays


# ---------------------------------------------------------------- judging

@dataclass
class CaseVerdict:
    case: str
    forward_ok: bool = False
    backward_ok: bool = False
    forward_error: float = None         # rel_error of the output, None if there was none
    backward_error: float = None        # worst rel_error over the gradients, None if there were none
    raised: list = field(default_factory=list)      # messages of what the student's code raised
    forward_problems: list = field(default_factory=list)
    backward_problems: list = field(default_factory=list)

    @property
    def problems(self):
        return self.forward_problems + self.backward_problems


def _compared(case, arrays, expected, what_it_gave, tolerance, problems):
    """Compare each (what, array name, reference array) of `expected`; returns the errors (a NaN counts as 1)."""
    errors = []
    for what, name, reference in expected:
        if name not in arrays:
            problems.append(f"{case.id}: no {what}" if what == "forward output"
                            else f"{case.id}: backward returned no gradient for {what}")
            continue
        comparison = compare(what, arrays[name], reference)
        errors.append(min(comparison.error, 1.0))
        if not comparison.error <= tolerance:
            problems.append(f"{case.id}: {comparison.describe(what_it_gave, 'expected')}")
    return errors


def _judge_case(case, record, arrays, tolerance):
    verdict = CaseVerdict(case.id)
    if record is None:
        verdict.forward_problems.append(f"{case.id}: the student's process handed back nothing for this case")
        return verdict
    if record["forward_error"]:
        verdict.raised.append(record["forward_error"])
        verdict.forward_problems.append(f"{case.id}: forward {record['forward_error']}")
        return verdict
    errors = _compared(case, arrays, [("forward output", f"{case.key}.out", case.output)], "yours", tolerance,
                       verdict.forward_problems)
    verdict.forward_error = errors[0] if errors else None
    verdict.forward_ok = not verdict.forward_problems
    if record["backward_error"]:
        verdict.raised.append(record["backward_error"])
        verdict.backward_problems.append(f"{case.id}: backward {record['backward_error']}")
        return verdict
    expected = [(case.input_names[i], f"{case.key}.dinput{i}", case.input_grads[i]) for i in case.float_inputs]
    expected += [(f"parameter {name}", f"{case.key}.dparam{j}", case.param_grads[j])
                 for j, name in enumerate(case.param_names)]
    verdict.backward_error = max(_compared(case, arrays, expected, "backward gave", tolerance,
                                           verdict.backward_problems), default=0.0)
    verdict.backward_ok = not verdict.backward_problems
    return verdict


def judge(cases, records, arrays, tolerance):
    """One CaseVerdict per reference case, from the runner's records and arrays (already read as untrusted)."""
    return [_judge_case(case, records.get(case.key), arrays, tolerance) for case in cases]
