"""The grading subprocess: forward outputs and gradient checks of one exercise's layers.

`grade.py` launches this in a fresh Python whose `sys.path` starts with a
temporary package: the reference package with the student's regions of one
exercise put in. Everything imported here (the layers, the checker, the case
catalogue) therefore comes from that package, and the student's code runs only
inside the layers it was written for.

`exercises make` also runs `probe` here, in the new student copy, to find
the layers that raise because they use an assigned exercise.

Input, in the work directory: `task.json` {"layers", "seed", "package"}.
Output: `student_outputs.npz` (one forward output per case, key "case<i>") and
`result.json` (one record per case), written even when cases fail; a crash or
a hang leaves them missing, which the grader reports.
"""

import inspect
import json
import sys
import traceback
from pathlib import Path

import numpy as np


def _located(error, package):
    """`raised ExceptionType: message (at layers/x.py:12 in f: source line)`, at the frame deepest in the package.

    A hint left by `exercises make` becomes `not implemented (layers/x.py:12 in f)`.
    """
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith(package)]
    message = f"raised {type(error).__name__}: {error}".strip()
    unfinished = isinstance(error, NotImplementedError) and str(error).startswith("Exercise ")
    if unfinished:
        message = f"not implemented ({str(error).split(':')[0].split()[-1]})"
    if not frames:
        return message
    frame = frames[-1]
    where = f"{Path(frame.filename).relative_to(package).as_posix()}:{frame.lineno} in {frame.name}"
    return f"{message} at {where}" if unfinished else f"{message} (at {where}: {(frame.line or '').strip()})"


def _named(description, forward):
    """"input 0: ..." -> "input 0 (x): ...", with the name of forward's argument."""
    if not description.startswith("input "):
        return description
    index = int(description.split()[1].rstrip(":"))
    names = list(inspect.signature(forward).parameters)
    return description.replace(f"input {index}:", f"input {index} ({names[index]}):", 1) if index < len(names) else description


def run_cases(layers, seed, package):
    """Run every catalogue case of `layers`; return (outputs dict, list of case records)."""
    from minitransformer.gradcheck.cases import all_cases
    from minitransformer.gradcheck.checker import check_module

    outputs, records = {}, []
    for index, case in enumerate(c for c in all_cases() if c.layer in layers):
        record = {"case": case.id, "key": f"case{index}", "forward_error": None, "backward_error": None,
                  "input_error": None, "param_error": None, "failures": []}
        records.append(record)
        try:
            module, inputs, forward = case.build(np.random.default_rng(seed))
            forward = module.forward if forward is None else forward
            outputs[record["key"]] = np.asarray(forward(*inputs), dtype=np.float64)
        except Exception as error:                     # the student's forward: report it, go on
            record["forward_error"] = _located(error, package)
            continue
        try:
            report = check_module(module, inputs, forward=forward, rng=seed)
        except Exception as error:
            record["backward_error"] = _located(error, package)
            continue
        record["input_error"], record["param_error"] = report.worst_input_error, report.worst_param_error
        record["failures"] = [(c.error, _named(c.describe(), forward)) for c in report.inputs + report.params]
    return outputs, records


def probe():
    """Print, as JSON, the catalogue layers whose forward or backward raises NotImplementedError."""
    from minitransformer.gradcheck.cases import all_cases

    raising = []
    for case in all_cases():
        try:
            module, inputs, forward = case.build(np.random.default_rng(0))
            out = (module.forward if forward is None else forward)(*inputs)
            module.backward(np.ones(np.shape(out)) if np.ndim(out) else 1.0)
        except NotImplementedError:
            raising.append(case.layer)
        except Exception:                  # not caused by a blank region (the reference behaves the same): not ours
            pass
    print(json.dumps(list(dict.fromkeys(raising))))
    return 0


def main(workdir):
    workdir = Path(workdir)
    task = json.loads((workdir / "task.json").read_text())
    import minitransformer

    package = str(Path(task["package"]).resolve())
    if not str(Path(minitransformer.__file__).resolve()).startswith(package):
        print(f"grading runner imported minitransformer from {minitransformer.__file__}, expected {package}",
              file=sys.stderr)
        return 3
    outputs, records = run_cases(set(task["layers"]), task["seed"], package)
    np.savez(workdir / "student_outputs.npz", **outputs)
    (workdir / "result.json").write_text(json.dumps(records))
    return 0
