"""The student's side of grading: run one exercise's layers on given inputs, hand back the arrays.

`grade.py` starts this file as a script, in a fresh Python (`python -I -S runner.py TASK RESULT_FD
ARRAYS_FD`) inside the sandbox `isolation.py` sets up. It is the first code that process runs, and
the only trusted code in it: it imports NumPy, drops to `nobody` when started as root, sets the
limits, and only then imports the temporary package holding the student's answer (whose code may
run at import). From there on nothing this process does is believed: it computes arrays, and the
grader, a process that never imports student code, judges them.

Input, the directory TASK (read-only):
    task.json   {"package_root", "site", "user", "limits", "nproc", "preload",
                 "cases": [{"key", "index", "id", "params": [names], "inputs": n}]}
    inputs.npz  per case: "<key>.input<i>", "<key>.param<j>", "<key>.upstream"
Output, written to the two descriptors (the grader opened the files; this process cannot open them):
    RESULT_FD   JSON list, one record per case: {"key", "forward_error", "backward_error"} (messages or null)
    ARRAYS_FD   .npz: "<key>.out" the forward output; "<key>.dinput<i>" the gradient of float input i;
                "<key>.dparam<j>" parameter j's gradient, after `backward(upstream)` from zeroed gradients

Each case builds its module from the catalogue (`gradcheck.cases`), then puts the given parameter
values and inputs in: the inputs come from the assignment's seed, which this process never sees.

Only the standard library is imported at the top, before any privilege is dropped (under root the
interpreter's own files may be unreadable for `nobody`, e.g. a Python under /root): NumPy and the
package come from `sys.path` entries the task names.
"""

import ctypes
import importlib
import json
import os
import sys
import traceback
import zipfile  # noqa: F401  (np.savez needs it: imported while the interpreter's files are readable)
from pathlib import Path

try:
    import resource
except ImportError:                                        # not POSIX: `exercises check` imports `located` only
    resource = None


def located(error, package, prefix=""):
    """`raised ExceptionType: message (at layers/x.py:12 in f: source line)`, at the frame deepest in `package`
    (the one place that finds the frame that raised; `prefix` goes before the relative path).

    A hint left by `exercises make` becomes `not implemented (layernorm.backward)`.
    """
    message, package = f"raised {type(error).__name__}: {error}".strip(), str(Path(package).resolve())
    if isinstance(error, SyntaxError) and str(Path(error.filename or "").resolve()).startswith(package):
        relative = Path(error.filename).resolve().relative_to(package).as_posix()
        return f"raised {type(error).__name__}: {error.msg} (at {prefix}{relative}:{error.lineno})"[:500]
    frames = [f for f in traceback.extract_tb(error.__traceback__) if str(Path(f.filename).resolve()).startswith(package)]
    unfinished = isinstance(error, NotImplementedError) and str(error).startswith("Exercise ")
    if unfinished:
        message = f"not implemented ({str(error).split(':')[0].split()[-1]})"
    if not frames:
        return message[:500]
    frame = frames[-1]
    where = f"{prefix}{Path(frame.filename).resolve().relative_to(package).as_posix()}:{frame.lineno} in {frame.name}"
    located = f"{message} at {where}" if unfinished else f"{message} (at {where}: {(frame.line or '').strip()})"
    return located[:500]


def _drop_privileges(user):
    """Become `user` (uid, gid) for good, with no way back to root and no setuid gain (Linux)."""
    if user is None:
        return
    uid, gid = user
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("could not drop to the unprivileged user")
    try:
        ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)                # PR_SET_NO_NEW_PRIVS: setuid programs stay powerless
    except (OSError, AttributeError):
        pass


def _limit(limits, nproc):
    """Set the address-space, file-size, core and process limits (soft = hard: they cannot be raised again)."""
    mib = 2**20
    settings = [(resource.RLIMIT_AS, limits["memory_mb"] * mib), (resource.RLIMIT_FSIZE, limits["file_mb"] * mib),
                (resource.RLIMIT_CORE, 0)]
    if nproc is not None:
        settings.append((resource.RLIMIT_NPROC, nproc))
    for which, value in settings:
        resource.setrlimit(which, (value, value))


def _float_array(value, np, what):
    """`value` as a float64 array; TypeError saying why it is not one."""
    try:
        array = np.asarray(value)
    except Exception as error:                             # an object that refuses to become an array
        raise TypeError(f"{what} is not an array ({type(error).__name__})") from None
    if array.dtype.kind not in "fiub":
        raise TypeError(f"{what} has dtype {array.dtype}, not a real number type")
    return array.astype(np.float64)


def _forward(spec, case, inputs, np):
    """The case's module with the given parameter values, and its forward output on the given inputs."""
    if case.id != spec["id"]:
        raise RuntimeError(f"the catalogue's case {spec['index']} is {case.id}, the grader's {spec['id']}")
    module, _, forward = case.build(np.random.default_rng(0))
    params = module.named_parameters()
    if [name for name, _ in params] != spec["params"]:
        raise RuntimeError(f"{case.id}: parameters {[name for name, _ in params]}, expected {spec['params']}")
    for j, (_, param) in enumerate(params):
        param.data[...] = inputs[f"{spec['key']}.param{j}"]
    given = [inputs[f"{spec['key']}.input{i}"].copy() for i in range(spec["inputs"])]
    return module, given, (module.forward if forward is None else forward)(*given)


def run_cases(task, inputs, package):
    """Run every case of the task; return (records, arrays)."""
    import numpy as np

    from minitransformer.gradcheck.cases import all_cases
    from minitransformer.gradcheck.checker import backward_gradients

    catalogue = all_cases()
    records, arrays = [], {}
    for spec in task["cases"]:
        key = spec["key"]
        record = {"key": key, "forward_error": None, "backward_error": None}
        records.append(record)
        try:                                               # the student's forward (or a broken package): report, go on
            module, given, out = _forward(spec, catalogue[spec["index"]], inputs, np)
            out = _float_array(out, np, "the forward output")
        except Exception as error:
            record["forward_error"] = located(error, package)
            continue
        arrays[f"{key}.out"] = out
        upstream = inputs[f"{key}.upstream"]
        try:
            grads, param_grads = backward_gradients(module, given, float(upstream) if upstream.ndim == 0 else upstream)
            found = {f"{key}.dinput{i}": _float_array(grad, np, f"the gradient of input {i}")
                     for i, grad in grads.items() if grad is not None}
            found.update({f"{key}.dparam{j}": np.array(grad, dtype=np.float64) for j, grad in enumerate(param_grads)})
            arrays.update(found)
        except Exception as error:
            record["backward_error"] = located(error, package)
    return records, arrays


def main(argv):
    task_dir, result_fd, arrays_fd = Path(argv[0]), int(argv[1]), int(argv[2])
    task = json.loads((task_dir / "task.json").read_text())
    sys.path[:0] = [task["package_root"], *task["site"]]
    import numpy as np

    for name in task["preload"]:                           # what the unprivileged user could not read
        try:
            importlib.import_module(name)
        except Exception:
            pass
    with np.load(task_dir / "inputs.npz", allow_pickle=False) as data:
        inputs = {key: data[key] for key in data.files}
    _drop_privileges(task["user"])
    _limit(task["limits"], task["nproc"])
    # ---- from here on, the student's code may run (the package's import runs the answer's module)
    package = str(Path(task["package_root"], "minitransformer"))
    try:
        import minitransformer
    except BaseException as error:                         # e.g. a SyntaxError in the answer
        records = [{"key": spec["key"], "forward_error": located(error, package), "backward_error": None}
                   for spec in task["cases"]]
        arrays = {}
    else:
        if not str(Path(minitransformer.__file__).resolve()).startswith(package):
            print(f"the runner imported minitransformer from {minitransformer.__file__}, expected {package}",
                  file=sys.stderr)
            return 3
        records, arrays = run_cases(task, inputs, package)
    with os.fdopen(arrays_fd, "wb") as handle:
        np.savez(handle, **arrays)
    with os.fdopen(result_fd, "w") as handle:
        json.dump(records, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
