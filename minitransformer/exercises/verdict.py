"""The verdict on one exercise: the reference's numbers, the student's arrays read as untrusted, the comparison.

Everything here runs in the grader, a process that never imports student code, so nothing an
answer patches (the checker, NumPy, builtins) reaches it.

For each gradient-check case of the exercise's layers (`gradcheck.cases`):

* inputs and parameters are drawn from the assignment's seed (`default_rng([seed, case index])`),
  and an upstream gradient G of the output's shape (`default_rng([seed, case index, 1])`);
* the reference forward gives the expected output;
* the expected gradients are those of the *reference* forward, L = sum(G * forward(inputs)), by
  central differences in float64 (`numerical_gradient`), for every float input and every
  parameter. The reference backward must agree with them (else the reference is broken and
  grading stops), so what a student's backward is held to is the true gradient, not the gradient
  of the student's own forward: a wrong forward costs the forward region's point, and the backward
  keeps its own as long as what it reads from the forward is right.

The student's process hands back its forward outputs and gradients (`runner.py`); they are read
with bounded sizes, without pickles, and must have exactly the expected shapes and a real dtype.
A forward passes when every case's output is within the tolerance (`rel_error`, the gradient
checker's measure), a backward when every gradient of every case is.
"""

import io
import json
import os
import stat
import zipfile
from dataclasses import dataclass, field

import numpy as np

from ..gradcheck.cases import all_cases
from ..gradcheck.checker import _compare, numerical_gradient, rel_error

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
    input_names: list              # their names in forward's signature
    float_inputs: list             # indices of the differentiable (float) inputs
    param_names: list
    params: list                   # parameter values (arrays)
    upstream: np.ndarray           # G, the output's shape
    output: np.ndarray             # the reference forward's output, float64
    input_grads: dict              # float input index -> dL/dinput (finite differences of the reference)
    param_grads: list              # dL/dparam per parameter (finite differences of the reference)


def _differentiable(value):
    return isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating)


def _reference_case(case, index, key, seed, tolerance):
    module, inputs, forward = case.build(np.random.default_rng([seed, index]))
    forward = module.forward if forward is None else forward
    if not all(isinstance(value, np.ndarray) for value in inputs):
        raise ReferenceBroken(f"{case.id}: every input of a graded case must be an array")
    import inspect

    names = list(inspect.signature(forward).parameters)
    input_names = [names[i] if i < len(names) else f"input {i}" for i in range(len(inputs))]
    float_inputs = [i for i, value in enumerate(inputs) if _differentiable(value)]
    params = module.named_parameters()
    given_inputs = [value.copy() for value in inputs]
    given_params = [param.data.copy() for _, param in params]

    output = np.asarray(forward(*inputs), dtype=np.float64)
    upstream = np.random.default_rng([seed, index, 1]).standard_normal(output.shape)
    module.zero_grad()
    grads = module.backward(float(upstream) if upstream.ndim == 0 else upstream)
    grads = grads if isinstance(grads, tuple) else (grads,)
    one_per_input = len(grads) == len(inputs)
    analytic = {i: grads[i if one_per_input else rank] for rank, i in enumerate(float_inputs)}
    analytic_params = [param.grad.copy() for _, param in params]

    def loss():
        return float(np.sum(np.asarray(forward(*inputs), dtype=np.float64) * upstream))

    input_grads = {i: numerical_gradient(loss, inputs[i]) for i in float_inputs}
    param_grads = [numerical_gradient(loss, param.data) for _, param in params]
    comparisons = [_compare(f"input {i} ({input_names[i]})", analytic[i], input_grads[i]) for i in float_inputs]
    comparisons += [_compare(f"parameter {name}", analytic_params[j], param_grads[j])
                    for j, (name, _) in enumerate(params)]
    wrong = [c.describe() for c in comparisons if not c.error <= tolerance]
    if wrong:
        raise ReferenceBroken(f"the reference backward of {case.id} disagrees with finite differences of the reference "
                              f"forward ({'; '.join(wrong)}): the reference is broken, nothing is graded")
    return ReferenceCase(key, index, case.id, given_inputs, input_names, float_inputs, [name for name, _ in params],
                         given_params, upstream, output, input_grads, param_grads)


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
                      "inputs": len(case.inputs), "float_inputs": case.float_inputs})
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


def _finite(error):
    """A relative error, NaN and inf (a NaN in the student's array) counted as the worst, 1."""
    return float(error) if np.isfinite(error) else 1.0


def _worst_index(student, expected):
    difference = np.abs(student - expected)
    difference = np.where(np.isfinite(difference), difference, np.inf)
    return tuple(int(i) for i in np.unravel_index(np.argmax(difference), difference.shape)) if difference.size else ()


def judge(cases, records, arrays, tolerance):
    """One CaseVerdict per reference case, from the runner's records and arrays (already read as untrusted)."""
    verdicts = []
    for case in cases:
        verdict = CaseVerdict(case.id)
        verdicts.append(verdict)
        record = records.get(case.key)
        if record is None:
            verdict.forward_problems.append(f"{case.id}: the student's process handed back nothing for this case")
            continue
        if record["forward_error"]:
            verdict.raised.append(record["forward_error"])
            verdict.forward_problems.append(f"{case.id}: forward {record['forward_error']}")
            continue
        output = arrays.get(f"{case.key}.out")
        if output is None:
            verdict.forward_problems.append(f"{case.id}: no forward output")
        else:
            verdict.forward_error = _finite(rel_error(output, case.output))
            verdict.forward_ok = verdict.forward_error <= tolerance
            if not verdict.forward_ok:
                worst = _worst_index(output, case.output)
                verdict.forward_problems.append(
                    f"{case.id}: forward output differs from the reference: rel_error {verdict.forward_error:.2e}, "
                    f"worst at index {worst}: yours {output[worst]:.6e}, expected {case.output[worst]:.6e}")
        if record["backward_error"]:
            verdict.raised.append(record["backward_error"])
            verdict.backward_problems.append(f"{case.id}: backward {record['backward_error']}")
            continue
        pairs = [(f"input {i} ({case.input_names[i]})", f"{case.key}.dinput{i}", case.input_grads[i])
                 for i in case.float_inputs]
        pairs += [(f"parameter {name}", f"{case.key}.dparam{j}", case.param_grads[j])
                  for j, name in enumerate(case.param_names)]
        ok, worst = True, 0.0
        for what, name, expected in pairs:
            student = arrays.get(name)
            if student is None:
                ok = False
                verdict.backward_problems.append(f"{case.id}: backward returned no gradient for {what}")
                continue
            comparison = _compare(what, student, expected)
            error = _finite(comparison.error)
            worst = max(worst, error)
            if not error <= tolerance:
                ok = False
                verdict.backward_problems.append(f"{case.id}: {comparison.describe().replace('finite differences', 'expected')}")
        verdict.backward_ok, verdict.backward_error = ok, worst
    return verdicts
