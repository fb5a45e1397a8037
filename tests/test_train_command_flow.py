"""`train` reads top to bottom: `commands/train.py:run` is its phases, each a function called once, in order, and
`--resume` reads the checkpoint once.

* Read from the syntax tree: `run`'s body is a straight sequence of phase calls (`x = _phase(...)`,
  `_phase(...)`, `return _phase(...)`, and one `with _phase(...):` around the rest), with no branch or loop;
  each phase is a function of train.py, called once there, and defined in the order `run` calls them; `run`'s
  docstring lists them in that order.
* Traced: a fresh run and a resumed one call every phase once, in that order.
* Counted: `--resume` of `train` (and of `seq2seq`, `mlm`, `finetune`) opens the checkpoint's files
  (checkpoint.json, its arrays) exactly as often as one `read_checkpoint` does, before the loop runs.
"""

import ast
import builtins
import io
import re
from pathlib import Path

import pytest
from test_train_command import TINY, cli

import minitransformer.commands.train as train_command
from minitransformer.training.checkpoint import read_checkpoint
from minitransformer.training.loop import TrainingLoop

TRAIN_PY = Path(train_command.__file__)


def _phase_name(call):
    """The name of a phase call `_phase(...)`, or None for anything else."""
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.keywords:
        return call.func.id
    return None


def straight_phases(body):
    """The names of the phases a function body calls, in order; AssertionError naming the first statement that
    is not a phase call (a branch, a loop, a `try`, an expression of its own)."""
    phases = []
    for statement in body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name):
            call = statement.value
        elif isinstance(statement, (ast.Expr, ast.Return)):
            call = statement.value
        elif isinstance(statement, ast.With) and len(statement.items) == 1 and statement.items[0].optional_vars is None:
            call = statement.items[0].context_expr
        else:
            call = None
        name = _phase_name(call)
        if name is None:
            raise AssertionError(f"line {statement.lineno}: not a phase call: {ast.unparse(statement)[:120]}")
        phases.append(name)
        if isinstance(statement, ast.With):
            phases += straight_phases(statement.body)
    assert isinstance(body[-1], (ast.Return, ast.With)), "the last phase returns the exit status"
    return phases


def _module():
    return ast.parse(TRAIN_PY.read_text(encoding="utf-8"))


def _function(tree, name):
    return next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name)


def test_run_is_a_straight_sequence_of_phases_each_called_once_and_defined_in_its_order():
    tree = _module()
    run = _function(tree, "run")
    body = run.body[1:] if ast.get_docstring(run) else run.body
    phases = straight_phases(body)
    assert len(phases) >= 5, phases                       # options, build, the loop's run, report, and more
    assert len(set(phases)) == len(phases), f"a phase called twice in run: {phases}"
    defined = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert all(phase in defined for phase in phases), f"a phase that is not a function of train.py: {phases}"
    assert sorted(phases, key=defined.index) == phases, \
        f"the phases are defined in the order {[name for name in defined if name in phases]}, run calls {phases}"
    calls = [node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
    again = [phase for phase in phases if calls.count(phase) != 1]
    assert not again, f"phases called elsewhere in train.py too: {again}"
    listed = re.findall(r"^\s*\d+\. `(\w+)`", ast.get_docstring(run), flags=re.MULTILINE)
    assert listed == phases, f"run's docstring lists {listed}, run calls {phases}"


@pytest.mark.parametrize("source", [
    "x = _a(args)\nif x:\n    return _b(x)\nreturn _c(x)",
    "x = _a(args)\nfor y in x:\n    _b(y)\nreturn _c(x)",
    "x = _a(args)\ntry:\n    _b(x)\nfinally:\n    _c(x)\nreturn _d(x)",
    "x = _a(args)\nwith _b(x):\n    y = _c(x)\n    if y:\n        return 1\n    return _d(y)",
    "x = _a(args)\nreturn x",
], ids=["if", "for", "try", "if-in-with", "no-call"])
def test_the_reading_of_run_refuses_a_branch_a_loop_and_a_try(source):
    """Guards against a vacuous pass: the forms `run` had before (a try around a phase, an if on its outcome)."""
    with pytest.raises(AssertionError, match="not a phase call"):
        straight_phases(ast.parse(source).body)


def _phases_of_run():
    run = _function(_module(), "run")
    return straight_phases(run.body[1:])


def _trace_phases(monkeypatch):
    """Wrap every phase of train.py so that its calls are recorded, in order; the list of the names called."""
    called = []
    for name in _phases_of_run():
        real = getattr(train_command, name)

        def traced(*args, _name=name, _real=real, **kwargs):
            called.append(_name)
            return _real(*args, **kwargs)
        monkeypatch.setattr(train_command, name, traced)
    return called


def test_a_fresh_run_and_a_resumed_one_call_each_phase_once_in_order(tmp_path, text_file, capsys, monkeypatch):
    out = tmp_path / "run"
    called = _trace_phases(monkeypatch)
    assert cli(["train", "--text", str(text_file), "--max-steps", "2", *TINY, "--out", str(out)], capsys)[0] == 0
    assert called == _phases_of_run(), f"phases called: {called}, run calls: {_phases_of_run()}"
    called.clear()
    code, printed, err = cli(["train", "--resume", "--out", str(out), "--max-steps", "3"], capsys)
    assert code == 0 and "resuming at step 2" in printed, err
    assert called == _phases_of_run(), f"phases called: {called}, run calls: {_phases_of_run()}"


def _count_opens(monkeypatch, directory):
    """Count from here every open of a file in `directory` (builtins.open and io.open, which pathlib calls):
    the list of the file names opened."""
    opened = []
    real = builtins.open

    def counting_open(file, *args, **kwargs):
        if isinstance(file, (str, Path)) and Path(file).resolve().parent == Path(directory).resolve():
            opened.append(Path(file).name)
        return real(file, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_open)
    return opened


def _first_run(command, tmp_path, text_file):
    """The command line of a short run of `command` into tmp_path/run, and what its --resume adds."""
    from test_one_loop import TINY as LOOP_RUNS

    out = ["--out", str(tmp_path / "run"), "--no-progress"]
    if command == "train":
        return ["train", "--text", str(text_file), "--max-steps", "2", *TINY, *out], ["--max-steps", "4"]
    text = ["--text", str(text_file)] if command == "mlm" else []
    return [*LOOP_RUNS[command], *text, *out], []


@pytest.mark.parametrize("command", ["train", "seq2seq", "mlm", "finetune"])
def test_resume_reads_the_checkpoint_once(command, tmp_path, text_file, capsys, monkeypatch):
    out = tmp_path / "run"
    first, more = _first_run(command, tmp_path, text_file)
    assert cli(first, capsys)[0] == 0
    with monkeypatch.context() as patch:
        opened = _count_opens(patch, out)
        read_checkpoint(out)
        one_read = sorted(opened)
    assert "checkpoint.json" in one_read and any(name.endswith(".npz") for name in one_read), one_read

    opened, before_the_loop = _count_opens(monkeypatch, out), []
    real_fit = TrainingLoop.fit

    def fit(self, *args, **kwargs):
        if not before_the_loop:                            # what was opened to resume, before any step or save
            before_the_loop.append(sorted(opened))
        return real_fit(self, *args, **kwargs)
    monkeypatch.setattr(TrainingLoop, "fit", fit)
    code, printed, err = cli([command, "--resume", "--out", str(out), *more], capsys)
    assert code == 0 and "resuming" in printed + err, err
    assert before_the_loop == [one_read], f"--resume opened {before_the_loop}, one read opens {one_read}"
