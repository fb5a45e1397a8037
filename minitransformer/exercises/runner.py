"""The student's side of grading: run one exercise's layers on given inputs, hand back the arrays. `grade.py`
starts `python -I -S runner.py TASK RESULT_FD ARRAYS_FD` contained (`isolation.py`); this trusted code imports
NumPy, drops to `nobody` under root, sets the limits, and only then imports the temporary package holding the
answer. Nothing after that is believed: the grader, which never imports student code, judges.
TASK: task.json {"package_root", "site", "user", "limits", "nproc", "preload", "cases": [{"key", "index",
"id", "inputs": n, "rng": the bit generator's state}]}; inputs.npz "<key>.input<i>", "<key>.param<j>", "<key>.upstream".
RESULT_FD (opened by the grader): a JSON list of {"key", "forward_error", "backward_error"} (messages or
null). ARRAYS_FD: an .npz of "<key>.out", "<key>.dinput<i>" (float input i), "<key>.dparam<j>".
"""

import ctypes
import importlib
import json
import os
import sys
import traceback
import zipfile  # noqa: F401  (np.savez needs it: imported while the interpreter's files are readable)
from contextlib import suppress
from pathlib import Path

MIB = 2**20


def located(error, package, prefix=""):
    """`raised Type: message (at layers/x.py:12 in f: source line)` at `error`'s deepest frame in the directory
    `package` (`prefix` goes before the relative path), at most 500 characters. The hint `exercises make`
    leaves becomes `not implemented (layernorm.backward) at layers/x.py:12 in f`."""
    package = Path(package).resolve()

    def relative(filename):
        path = Path(filename or "").resolve()
        return path.is_relative_to(package) and prefix + path.relative_to(package).as_posix()

    if isinstance(error, SyntaxError) and relative(error.filename):
        return f"raised {type(error).__name__}: {error.msg} (at {relative(error.filename)}:{error.lineno})"[:500]
    message = f"raised {type(error).__name__}: {error}".strip()
    unfinished = isinstance(error, NotImplementedError) and str(error).startswith("Exercise ")
    if unfinished:
        message = f"not implemented ({str(error).split(':')[0].split()[-1]})"
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if relative(frame.filename)]
    if frames:
        where = f"{relative(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name}"
        message += f" at {where}" if unfinished else f" (at {where}: {(frames[-1].line or '').strip()})"
    return message[:500]


def _confine(user, limits, nproc):
    """Become `user` (uid, gid; None: stay) for good, with no setuid gain, then limit address space, file size,
    core files and processes (soft = hard: they cannot be raised again)."""
    import resource  # here, not at the top: `exercises check` imports `located` on any system

    if user:
        os.setgroups([])
        os.setgid(user[1])
        os.setuid(user[0])
        ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)                # PR_SET_NO_NEW_PRIVS: setuid programs stay powerless
    settings = {resource.RLIMIT_AS: limits["memory_mb"] * MIB, resource.RLIMIT_FSIZE: limits["file_mb"] * MIB,
                resource.RLIMIT_CORE: 0, resource.RLIMIT_NPROC: nproc}
    for which, value in settings.items():
        if value is not None:                                  # nproc None: the limit would not hold (root)
            resource.setrlimit(which, (value, value))


def _float_array(value, np, what):
    """`value` as a float64 array; TypeError when it does not hold real numbers (complex would lose a part)."""
    array = np.asarray(value)
    if array.dtype.kind not in "fiub":
        raise TypeError(f"{what} has dtype {array.dtype}, not a real number type")
    return array.astype(np.float64)


def run_cases(task, inputs, package):
    """Import the package in the directory `package` (the student's code runs from here on), run every case of
    the task with the given parameter values and inputs; return (records, arrays)."""
    import numpy as np

    records = [{"key": spec["key"], "forward_error": None, "backward_error": None} for spec in task["cases"]]
    try:
        import minitransformer
        from minitransformer.gradcheck.cases import all_cases
        from minitransformer.gradcheck.checker import backward_gradients
    except BaseException as error:                         # e.g. a SyntaxError in the answer: every forward fails
        for record in records:
            record["forward_error"] = located(error, package)
        return records, {}
    if not Path(minitransformer.__file__).resolve().is_relative_to(package):
        raise RuntimeError(f"the runner imported minitransformer from {minitransformer.__file__}, not {package}")
    catalogue, arrays = all_cases(), {}
    for spec, record in zip(task["cases"], records):
        key, stage = spec["key"], "forward_error"
        try:                                               # the student's code raised: report it, go on
            case = catalogue[spec["index"]]
            rng = np.random.default_rng()
            rng.bit_generator.state = spec["rng"]          # the grader's: what is no input nor parameter built alike
            module, _, forward = case.build(rng)
            for j, (_, param) in enumerate(module.named_parameters()):
                param.data[...] = inputs[f"{key}.param{j}"]
            given = [inputs[f"{key}.input{i}"].copy() for i in range(spec["inputs"])]
            arrays[f"{key}.out"] = _float_array((forward or module.forward)(*given), np, "the forward output")
            stage, upstream = "backward_error", inputs[f"{key}.upstream"]
            grads, param_grads = backward_gradients(module, given, float(upstream) if upstream.ndim == 0 else upstream)
            found = {f"{key}.dinput{i}": _float_array(grad, np, f"the gradient of input {i}")
                     for i, grad in grads.items() if grad is not None}
            found.update({f"{key}.dparam{j}": _float_array(grad, np, f"the gradient of parameter {j}")
                          for j, grad in enumerate(param_grads)})
            arrays.update(found)
        except Exception as error:
            record[stage] = located(error, package)
    return records, arrays


def main(argv):
    task_dir, result_fd, arrays_fd = Path(argv[0]), int(argv[1]), int(argv[2])
    task = json.loads((task_dir / "task.json").read_text())
    sys.path[:0] = [task["package_root"], *task["site"]]
    import numpy as np

    for name in task["preload"]:                           # what the unprivileged user could not read
        with suppress(Exception):
            importlib.import_module(name)
    with np.load(task_dir / "inputs.npz", allow_pickle=False) as data:
        inputs = {key: data[key] for key in data.files}
    _confine(task["user"], task["limits"], task["nproc"])
    records, arrays = run_cases(task, inputs, Path(task["package_root"], "minitransformer").resolve())
    with os.fdopen(arrays_fd, "wb") as handle:
        np.savez(handle, **arrays)
    with os.fdopen(result_fd, "w") as handle:
        json.dump(records, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
