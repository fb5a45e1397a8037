"""The verdict on one exercise, computed in the grader (which never imports student code).

Each case's inputs and parameters come from `default_rng([seed, case index])`, its upstream gradient G from
`default_rng([seed, case index, 1])`. Expected are the reference forward's output and the gradients of
L = sum(G * forward) by central differences in float64, which the reference backward must match: a backward is
held to the true gradient, so a wrong forward costs the forward's points only. What the student's process hands
back (`runner.py`) is read with bounded sizes, without pickles, and only with the expected names and shapes.
"""

import functools
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
    """One case of an exercise: what the student's process is given, and what it must hand back."""

    key: str                       # "case0": how the case's arrays are named in the files
    index: int                     # position in the catalogue (all_cases())
    id: str                        # "LayerNorm[x (2, 3, 6)]"
    inputs: list                   # forward's positional arguments
    param_names: list
    params: list                   # parameter values
    upstream: np.ndarray           # G, the output's shape
    expected: dict                 # array name -> (what it is, the reference's float64 array): the output first


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
    expected = {f"{key}.out": ("forward output", output)}
    expected.update({f"{key}.dinput{i}": (names[i], input_grads[i]) for i in float_inputs(inputs)})
    expected.update({f"{key}.dparam{j}": (f"parameter {name}", param_grads[j]) for j, (name, _) in enumerate(params)})
    return ReferenceCase(key, index, case.id, given[0], [name for name, _ in params], given[1], upstream, expected)


@functools.cache
def reference_cases(layers, seed, tolerance):
    """The ReferenceCase of every catalogue case of `layers` (a tuple), for `seed`; computed once per process."""
    cases = [(index, case) for index, case in enumerate(all_cases()) if case.layer in layers]
    return [_reference_case(case, index, f"case{n}", seed, tolerance) for n, (index, case) in enumerate(cases)]


# ---------------------------------------------------------------- reading what the student's process wrote

def _read_bounded(path, limit):
    """The bytes of the regular file `path` (no symlink, no FIFO); OutputRefused when larger than `limit`."""
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
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise OutputRefused(f"the student's process handed back no valid result ({type(error).__name__})") from None
    if not isinstance(records, list):
        raise OutputRefused("the student's process handed back a result that is not a list of cases")
    checked = {}
    for record in records:
        if not isinstance(record, dict) or record.get("key") not in keys:
            raise OutputRefused("the student's process handed back a result for a case that was not asked for")
        messages = {side: record.get(side) for side in ("forward_error", "backward_error")}
        if any(message is not None and not isinstance(message, str) for message in messages.values()):
            raise OutputRefused("the student's process handed back a result with a malformed message")
        checked[record["key"]] = {side: message and message[:500] for side, message in messages.items()}
    return checked


def read_arrays(path, shapes):
    """The arrays the runner handed back, {name: float64 array}: only names in `shapes` (others are ignored), each
    of exactly that shape. OutputRefused for a file that is not a plain .npz of real arrays of those shapes."""
    data = _read_bounded(path, sum(8 * int(np.prod(shape)) + 4096 for shape in shapes.values()) + 65536)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = [m for m in archive.infolist() if m.filename.endswith(".npy") and m.filename[:-4] in shapes]
    except (zipfile.BadZipFile, ValueError, OSError):
        raise OutputRefused("the arrays the student's process handed back are not a valid .npz") from None
    arrays = {}
    for member in members:
        name, shape = member.filename[:-4], tuple(shapes[member.filename[:-4]])
        limit = 8 * int(np.prod(shape)) + 4096              # a member may not inflate beyond its array's size
        try:
            with archive.open(member) as handle:
                raw = handle.read(limit + 1)
            array = np.load(io.BytesIO(raw), allow_pickle=False) if len(raw) <= limit else None
        except Exception as error:                         # a malformed header, a pickle, a bad CRC
            raise OutputRefused(f"{name}: not a plain NumPy array ({type(error).__name__})") from None
        if array is None:
            raise OutputRefused(f"{name}: more bytes than an array of shape {shape} needs")
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "fiub":
            raise OutputRefused(f"{name}: not an array of real numbers")
        if array.shape != shape:
            raise OutputRefused(f"{name}: shape {array.shape}, expected {shape}")
        arrays[name] = array.astype(np.float64)
    return arrays


# ---------------------------------------------------------------- judging

@dataclass
class CaseVerdict:
    case: str
    forward_ok: bool = False
    backward_ok: bool = False
    forward_error: float = None         # relative error of the output, None if there was none
    backward_error: float = None        # worst relative error over the gradients, None if there were none
    raised: list = field(default_factory=list)      # messages of what the student's code raised
    forward_problems: list = field(default_factory=list)
    backward_problems: list = field(default_factory=list)


def judge(case, record, arrays, tolerance):
    """The CaseVerdict of one reference case, from the runner's record and arrays (already read as untrusted):
    each array within `tolerance` of the reference's (a NaN counts as an error of 1)."""
    verdict = CaseVerdict(case.id)
    if record is None:
        verdict.forward_problems.append(f"{case.id}: the student's process handed back nothing for this case")
        return verdict
    output, *gradients = case.expected
    for part, names in (("forward", [output]), ("backward", gradients)):
        problems, errors = getattr(verdict, f"{part}_problems"), []
        if record[f"{part}_error"]:                        # the student's code raised: what follows is not judged
            verdict.raised.append(record[f"{part}_error"])
            problems.append(f"{case.id}: {part} {record[f'{part}_error']}")
            return verdict
        for name in names:
            what, reference = case.expected[name]
            if name not in arrays:
                problems.append(f"{case.id}: " + (f"no {what}" if part == "forward" else
                                                  f"backward returned no gradient for {what}"))
                continue
            comparison = compare(what, arrays[name], reference)
            errors.append(min(comparison.error, 1.0))
            if not comparison.error <= tolerance:
                gave = "yours" if part == "forward" else "backward gave"
                problems.append(f"{case.id}: {comparison.describe(gave, 'expected')}")
        setattr(verdict, f"{part}_error", max(errors, default=None if part == "forward" else 0.0))
        setattr(verdict, f"{part}_ok", not problems)
    return verdict
