"""One training loop (training/loop.py) for every objective and command.

* No module of the package outside the loop steps an optimizer in a loop of its own: the package's syntax
  trees hold no `train_step(...)`, `step_on_next_batch(...)` or `<optimizer>.step(...)` inside a for or
  while loop (or a comprehension) anywhere but training/loop.py.
* `seq2seq`, `mlm` and `finetune` save on Ctrl-C (a real SIGINT during step k: exit status 130, a checkpoint
  of step k - 1... the step under way is finished first) and `--resume --out DIR` continues bit for bit: the
  weights, the optimizer's state and every step's loss equal an uninterrupted run's.
* `fit(evaluate_first=True)` evaluates a fresh loop at step 0, before its first step, and only a fresh one.
"""

import ast
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from minitransformer.__main__ import main
from minitransformer.training import loop as loop_module
from minitransformer.training.checkpoint import read_checkpoint

PACKAGE = Path(__file__).resolve().parent.parent / "minitransformer"
THE_LOOP = PACKAGE / "training" / "loop.py"


def _stepping_calls(tree):
    """(line, call) of every optimisation step called inside a for/while loop or a comprehension of `tree`."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.While, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for call in ast.walk(node):
                if not isinstance(call, ast.Call):
                    continue
                function = call.func
                name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
                owner = ast.unparse(function.value) if isinstance(function, ast.Attribute) else ""
                if name in ("train_step", "step_on_next_batch") or (name == "step" and "optim" in owner.lower()):
                    found.add((call.lineno, ast.unparse(call)))
    return sorted(found)


def test_no_module_outside_the_loop_steps_an_optimizer_in_a_loop_of_its_own():
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line}: {call}"
                 for path in sorted(PACKAGE.rglob("*.py")) if path != THE_LOOP
                 for line, call in _stepping_calls(ast.parse(path.read_text(encoding="utf-8")))]
    assert not offenders, "training loops outside training/loop.py:\n" + "\n".join(offenders)


def test_the_scan_finds_a_loop_of_its_own_and_the_loop_itself():
    """Guards against a vacuous pass: the kinds of loops the package had before are found."""
    own = ast.parse("for step in range(9):\n    losses.append(train_step(objective, optimizer, batch, lr, 1.0))\n"
                    "while True:\n    self.optimizer.step()\n"
                    "[trainer.step_on_next_batch() for _ in range(3)]\n")
    assert [line for line, _ in _stepping_calls(own)] == [2, 4, 5]
    assert _stepping_calls(ast.parse(THE_LOOP.read_text(encoding="utf-8")))       # the one loop is seen
    assert not _stepping_calls(ast.parse("for state in states:\n    logits = state.step(tokens)\n"))  # decoding


# ---------------------------------------------------------------- Ctrl-C and --resume, per command
TINY = {
    "seq2seq": ["seq2seq", "--steps", "6", "--batch-size", "4", "--d-model", "8", "--heads", "2", "--layers", "1",
                "--symbols", "4", "--min-len", "2", "--max-len", "3", "--test-size", "8", "--beam", "0",
                "--examples", "0", "--eval-interval", "2"],
    "mlm": ["mlm", "--steps", "6", "--batch-size", "4", "--d-model", "8", "--layers", "1", "--chunk", "4",
            "--nsp", "--eval-interval", "2"],
    "finetune": ["finetune", "--pretrain-steps", "4", "--steps", "6", "--batch-size", "4", "--length", "4",
                 "--eval-interval", "2"],
}


def interrupt_at(monkeypatch, call):
    """A real SIGINT to this process during the `call`-th training step of the command (1-based, counted over
    all its loops): the loop finishes that step, saves, and the command exits with 130."""
    real_step = loop_module.TrainingLoop.step_on_next_batch
    calls = [0]

    def step_on_next_batch(self):
        calls[0] += 1
        if calls[0] == call:
            signal.raise_signal(signal.SIGINT)      # this process's Ctrl-C (os.kill would end it on Windows)
        return real_step(self)
    monkeypatch.setattr(loop_module.TrainingLoop, "step_on_next_batch", step_on_next_batch)


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command, call", [("seq2seq", 3), ("mlm", 3), ("finetune", 3), ("finetune", 7)],
                         ids=["seq2seq", "mlm", "finetune-pre-training", "finetune-fine-tuning"])
def test_ctrl_c_then_resume_equals_an_uninterrupted_run_bit_for_bit(command, call, tmp_path, capsys, monkeypatch):
    options = TINY[command] + ["--no-progress"]
    if command == "mlm":
        text = tmp_path / "text.txt"
        text.write_text("the cat sat on the mat. " * 40, encoding="utf-8")
        options += ["--text", str(text)]
    whole, parted = tmp_path / "whole", tmp_path / "parted"
    assert _run(options + ["--out", str(whole)], capsys)[0] == 0
    with monkeypatch.context() as patch:
        interrupt_at(patch, call)
        code, _, err = _run(options + ["--out", str(parted)], capsys)
    assert code == 130, err
    assert f"--resume --out {parted}" in err and "checkpoint saved in" in err, err
    assert _run([command, "--resume", "--out", str(parted)], capsys)[0] == 0
    (whole_meta, whole_arrays), (parted_meta, parted_arrays) = read_checkpoint(whole), read_checkpoint(parted)
    assert whole_meta["history"] == parted_meta["history"]                       # every loss, exactly
    assert whole_meta["rng"] == parted_meta["rng"]
    assert sorted(whole_arrays) == sorted(parted_arrays)
    for name, array in whole_arrays.items():
        assert np.array_equal(array, parted_arrays[name]), f"{command}: {name} differs after the resume"


@pytest.mark.parametrize("command", sorted(TINY))
def test_resume_refuses_another_command_and_a_changed_option(command, tmp_path, capsys):
    options = TINY[command] + ["--no-progress", "--out", str(tmp_path / "run")]
    if command == "mlm":
        (tmp_path / "text.txt").write_text("the cat sat on the mat. " * 40, encoding="utf-8")
        options += ["--text", str(tmp_path / "text.txt")]
    assert _run(options, capsys)[0] == 0
    other = "seq2seq" if command != "seq2seq" else "finetune"
    code, _, err = _run([other, "--resume", "--out", str(tmp_path / "run")], capsys)
    assert code == 2 and err.count("\n") == 1 and f"is a run of {command}, not of {other}" in err, err
    code, _, err = _run([command, "--resume", "--out", str(tmp_path / "run"), "--seed", "5"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--seed 5 (checkpoint: 0)" in err, err


WATCHED = {"eval_interval": ["--eval-interval", "3"], "no_progress": ["--no-progress"],
           "parallel": ["--parallel", "sharded"], "worker_timeout": ["--worker-timeout", "30"],
           "beam": ["--beam", "2"], "examples": ["--examples", "1"]}


@pytest.mark.parametrize("command", sorted(TINY))
def test_every_option_resume_may_change_is_said_applied_and_kept(command, tmp_path, capsys, monkeypatch):
    """Each option the command's rules list (training/resuming.py's RULES: how to watch, where to run, what is
    printed), given anew to a run stopped by Ctrl-C, is said in a `note:` line and stored by the run's next
    checkpoint; --parallel among them."""
    from minitransformer.training.resuming import RULES

    changeable = RULES[command].changeable
    listed = {"eval_interval", "no_progress", "parallel", "worker_timeout"} | ({"beam", "examples"}
                                                                              if command == "seq2seq" else set())
    assert set(changeable) == listed, f"{command}: --resume may change {sorted(changeable)}, the docs say {sorted(listed)}"
    options = [word for word in TINY[command] if word not in ("--no-progress",)] + ["--out", str(tmp_path / "run")]
    if command == "mlm":
        (tmp_path / "text.txt").write_text("the cat sat on the mat. " * 40, encoding="utf-8")
        options += ["--text", str(tmp_path / "text.txt")]
    with monkeypatch.context() as patch:
        interrupt_at(patch, 3)
        assert _run(options, capsys)[0] == 130
    again = [word for dest in changeable for word in WATCHED[dest]]
    code, _, err = _run([command, "--resume", "--out", str(tmp_path / "run"), *again], capsys)
    assert code == 0, err
    stored = read_checkpoint(tmp_path / "run")[0]["run"]["options"]
    for dest in changeable:
        option = WATCHED[dest][0]
        assert f"note: {option} " in err and "applied" in err, (option, err)
        given = True if len(WATCHED[dest]) == 1 else WATCHED[dest][1]
        assert str(stored[dest]) == str(given) or stored[dest] == float(given), (dest, stored[dest])


@pytest.mark.parametrize("command", sorted(TINY))
def test_the_run_options_each_command_shares_default_to_a_run_that_saves_nothing_in_float32_on_replicated_ranks(command):
    """commands/resumable.py's options, by hand: no --out, a checkpoint every tenth of the run, float32, the
    gradient all-reduced (not ZeRO-1's shards), a minute's wait for a rank."""
    from minitransformer.__main__ import build_parser

    args = build_parser()[0].parse_args([command])
    assert (args.out, args.resume, args.force, args.eval_interval, args.no_progress) == (None, False, False, None, False)
    assert (args.dtype, args.parallel, args.worker_timeout) == ("float32", "replicated", 60.0)


@pytest.mark.parametrize("steps, every", [(25, 2), (9, 1), (100, 10)])
def test_without_eval_interval_a_command_checkpoints_every_tenth_of_its_run_and_at_least_every_step(steps, every):
    """commands/resumable.py's loop_options, by hand: steps // 10, and 1 below 10 steps; the rest as given."""
    from minitransformer.__main__ import build_parser
    from minitransformer.commands.resumable import loop_options

    parse = build_parser()[0].parse_args
    options = loop_options(parse(["seq2seq"]), "seq2seq", steps)
    assert (options["eval_interval"], options["out_dir"], options["parallel"]) == (every, None, None)
    assert options["overwrite"] is False and options["progress"] is True
    options = loop_options(parse(["seq2seq", "--eval-interval", "7", "--no-progress", "--out", "o"]), "seq2seq", steps)
    assert (options["eval_interval"], options["out_dir"], options["progress"]) == (7, "o", False)
    for again in ("--resume", "--force"):                       # the run's own checkpoint, or one to replace
        assert loop_options(parse(["seq2seq", again, "--out", "o"]), "seq2seq", steps)["overwrite"] is True


class _StoppedLoop:
    """Stands in for a TrainingLoop of phase `name` whose fit() raises `stop` (or returns losses): keeps what
    was restored."""

    def __init__(self, name, stop=None):
        import types

        self.options, self.stop, self.step, self.restored = types.SimpleNamespace(name=name), stop, 4, []

    def restore(self, out, contents):
        self.restored.append((out, contents))

    def fit(self):
        if self.stop is not None:
            raise self.stop
        return {"val": 1.0}


def test_fit_exits_1_when_diverged_130_on_ctrl_c_and_restores_only_a_checkpoint_of_its_phase(capsys):
    from minitransformer.commands.resumable import fit
    from minitransformer.training.harness import TrainingDiverged, TrainingInterrupted

    assert fit(_StoppedLoop("x", TrainingDiverged("x.step: the loss is nan at step 3")), "mlm", "o") == (1, None)
    assert capsys.readouterr().err == "error: x.step: the loss is nan at step 3\n"
    assert fit(_StoppedLoop("x", TrainingInterrupted(3, "o")), "mlm", "o") == (130, None)
    assert capsys.readouterr().err == ("interrupted at step 3: checkpoint saved in o; continue with: "
                                       "python -m minitransformer mlm --resume --out o\n")
    single = ({"run": {"command": "mlm"}}, {})                                  # a run of one phase names none
    for contents, name, restored in [(single, "mlm", True), (({"run": {"phase": "pre-train"}}, {}), "pre-train", True),
                                     (({"run": {"phase": "pre-train"}}, {}), "fine-tune", False)]:
        loop = _StoppedLoop(name)
        assert fit(loop, "finetune", "o", contents) == (None, {"val": 1.0})
        assert loop.restored == ([("o", contents)] if restored else []), (contents, name)


# ---------------------------------------------------------------- every command under mpiexec
@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["replicated", "sharded"])
@pytest.mark.parametrize("command", sorted(TINY))
def test_two_ranks_train_every_command_to_the_numbers_of_one_process(command, mode, tmp_path):
    """`mpiexec -n 2 python -m minitransformer <command>` (tiny, float64, at most 20 steps) ends with the weights
    and the losses of one process, to 1e-12: the data-parallel hook of train_step serves every objective."""
    import json
    import subprocess
    import sys

    from test_distributed import mpi_command

    options = TINY[command] + ["--no-progress", "--dtype", "float64", "--parallel", mode]
    if command == "mlm":
        (tmp_path / "text.txt").write_text("the cat sat on the mat. " * 40, encoding="utf-8")
        options = [word for word in options if word != "--nsp"] + ["--text", str(tmp_path / "text.txt")]
    environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(PACKAGE.parent)}
    for ranks, out in ((1, "one"), (2, "two")):
        argv = ["-m", "minitransformer", *options, "--out", str(tmp_path / out)]
        command_line = mpi_command(2, *argv) if ranks == 2 else [sys.executable, *argv]
        result = subprocess.run(command_line, capture_output=True, text=True, timeout=600, env=environment, encoding="utf-8")
        assert result.returncode == 0, result.stderr[-3000:]
        if ranks == 2:
            assert result.stdout.count("trained ") == 1, result.stdout            # rank 0 alone prints
    (one_meta, one_arrays), (two_meta, two_arrays) = read_checkpoint(tmp_path / "one"), read_checkpoint(tmp_path / "two")
    assert len(one_meta["history"]["loss"]) == len(two_meta["history"]["loss"]) > 0
    np.testing.assert_allclose(two_meta["history"]["loss"], one_meta["history"]["loss"], rtol=1e-12, atol=0)
    # The weights to 1e-12 of their scale: the key bias b_k, whose gradient is 0 in exact arithmetic (softmax
    # ignores a shift of every score), holds only rounding noise that Adam's eps turns into steps of ~1e-12.
    scale = max(float(np.abs(array).max()) for name, array in one_arrays.items() if name.startswith("param."))
    for name, array in one_arrays.items():
        if name.startswith("param."):
            np.testing.assert_allclose(two_arrays[name], array, rtol=1e-12, atol=1e-11 * scale, err_msg=name)
    assert json.dumps(two_meta["run"]["options"]["parallel"]) == json.dumps(mode)


def test_evaluate_first_records_the_untrained_model_at_step_0_and_a_fresh_loop_alone():
    from minitransformer import GPT
    from minitransformer.layers.loss import CrossEntropyLoss
    from minitransformer.objectives.language_model import LanguageModelObjective
    from minitransformer.training.optim.adam import Adam

    def fitted(evaluate_first, steps=(3,)):
        model = GPT(8, 8, 2, 1, 0, 6, rng=0)
        batch = (np.arange(12).reshape(2, 6) % 8, (np.arange(12).reshape(2, 6) + 1) % 8)
        objective = LanguageModelObjective(model, CrossEntropyLoss())
        evaluated = []
        loop = loop_module.TrainingLoop(objective, Adam(model.parameters(), lr=1e-2), lambda: batch, lambda step: 1e-2,
                                        loop_module.LoopOptions(max_steps=steps[-1], eval_interval=2, log=False,
                                                                progress=False,
                                                                evaluate=lambda: {"val": float(objective.forward(*batch))}))
        for max_steps in steps:
            loop.fit(max_steps, on_eval=lambda loop, losses: evaluated.append(loop.step), evaluate_first=evaluate_first)
        return [row[0] for row in loop.history["eval"]], evaluated

    assert fitted(True) == ([0, 2, 3], [0, 2, 3])                 # step 0 first, then the usual ones
    assert fitted(False) == ([2, 3], [2, 3])
    assert fitted(True, steps=(1, 3))[0] == [0, 1, 2, 3]           # a second fit does not evaluate step 1 twice


# ---------------------------------------------------------------- the lesson's shape and two behaviours of the loop
def test_the_loop_takes_its_options_as_one_object_and_the_step_knows_no_timer():
    """TrainingLoop(objective, optimizer, next_batch, learning_rate, options): the lesson's four ingredients and
    LoopOptions; training/step.py imports no phase timer (phases.py wraps what it is given instead)."""
    import inspect

    parameters = list(inspect.signature(loop_module.TrainingLoop.__init__).parameters)
    assert parameters == ["self", "objective", "optimizer", "next_batch", "learning_rate", "options", "keywords"], \
        parameters                                                  # keywords: 0.4's, until 0.6
    step = ast.parse((PACKAGE / "training" / "step.py").read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(step) if isinstance(node, ast.ImportFrom)}
    assert "phases" not in imported and "laps" not in ast.unparse(step)


def test_the_default_evaluation_is_the_mean_training_loss_of_the_steps_after_the_last_evaluation():
    loop = loop_module.TrainingLoop(None, None, None, None, loop_module.LoopOptions(model=object()))
    loop.history.update(step=[1, 2, 3, 4], loss=[1.0, 2.0, 3.0, 10.0], eval=[[2, 1.5]])
    assert loop.evaluate() == {"train": 6.5}                        # steps 3 and 4; step 2 was evaluated
    loop.history["eval"] = []
    assert loop.evaluate() == {"train": 4.0}                        # every step since the start
    loop.history.update(eval=[[4, 6.5]])
    assert np.isnan(loop.evaluate()["train"])                       # no step since
    loop.history.update(step=[1, 2, 3, 4, 5], loss=[1.0, 2.0, 3.0, 10.0, 20.0], eval=[[1, 1.0], [3, 2.0]])
    assert loop.evaluate() == {"train": 15.0}                       # steps 4 and 5: after the last of two evaluations


def test_the_default_evaluation_of_an_objective_in_parts_is_each_parts_mean_since_the_last_evaluation():
    """An objective that names the parts of its loss (BERT's masked-token and next-sentence terms) is evaluated
    part by part, each part's mean over the steps after the last evaluation."""
    loop = loop_module.TrainingLoop(None, None, None, None, loop_module.LoopOptions(model=object()))
    loop.history.update(step=[1, 2, 3], loss=[3.0, 5.0, 7.0], eval=[[1, 3.0]],
                        parts={"masked-token": [2.0, 4.0, 6.0], "next-sentence": [1.0, 1.0, 0.0]})
    assert loop.evaluate() == {"masked-token": 5.0, "next-sentence": 0.5}


def _counting_loop(max_steps, rates, losses=None, **options):
    """A loop over one weight with a fake objective whose loss at step k (0-based) is `losses[k]` (default k), at the
    rate `rates[k]`; `options` override its LoopOptions (saying nothing, no bar, a model with nothing to switch off)."""
    import contextlib
    import types

    from minitransformer.core.parameter import Parameter
    from minitransformer.training.optim.sgd import SGD

    weight = Parameter(np.zeros(1))
    taken = []

    class Counting:
        def forward(self, step):
            taken.append(step)
            return float(step) if losses is None else losses[step]

        def backward(self, grad=1.0):
            weight.grad += grad

        def parameters(self):
            return [weight]

    steps = iter(range(100))
    options = dict(dict(max_steps=max_steps, log=False, progress=False,
                        model=types.SimpleNamespace(evaluating=contextlib.nullcontext)), **options)
    loop = loop_module.TrainingLoop(Counting(), SGD([weight], lr=0.0), lambda: (next(steps),), rates.__getitem__,
                                    loop_module.LoopOptions(**options))
    return loop, taken


def test_each_step_is_recorded_with_its_loss_and_the_rate_it_was_taken_at():
    loop, taken = _counting_loop(3, [0.5, 0.25, 0.125, 1.0])
    loop.fit()
    assert taken == [0, 1, 2] and loop.step == 3
    assert loop.history["step"] == [1, 2, 3] and loop.history["loss"] == [0.0, 1.0, 2.0]
    assert loop.history["lr"] == [0.5, 0.25, 0.125]                 # step k's rate is rates[k - 1], not the next one


def test_fit_0_takes_no_step_and_fit_alone_goes_to_the_options_max_steps():
    loop, taken = _counting_loop(3, [0.1] * 4)
    assert loop.fit(max_steps=0) is None and taken == [] and loop.step == 0
    assert loop.fit() == {"train": 1.0} and taken == [0, 1, 2]      # the mean loss of steps 1 to 3


def _tiny_gpt():
    from minitransformer import GPT

    return GPT(8, 8, 2, 1, 0, 6, rng=0)


def test_adam_warmup_loop_is_plain_adam_with_a_linear_warmup_and_decay_and_clipping_at_1():
    """adam_warmup_loop (the encoder family's loop), one process: the plain Adam, `steps` steps, gradients clipped
    at 1.0, the rate rising over 50 steps to lr and falling linearly to lr / 10 at `steps`, by default. The rates by
    hand: step k < 50 takes lr (k + 1) / 50; step k >= 50 takes lr (1 - 0.9 (k - 50) / (steps - 50))."""
    from minitransformer.objectives.language_model import LanguageModelObjective
    from minitransformer.training.optim.adam import Adam

    model = _tiny_gpt()
    loop = loop_module.adam_warmup_loop(LanguageModelObjective(model), None, 200, 1e-2, log=False, progress=False)
    assert type(loop.optimizer) is Adam                              # not the fast form: no ranks to send it
    assert (loop.options.max_steps, loop.options.grad_clip) == (200, 1.0)
    expected = {0: 1e-2 / 50, 24: 1e-2 / 2, 49: 1e-2, 50: 1e-2, 125: 1e-2 * 0.55, 199: 1e-2 * (1 - 0.9 * 149 / 150)}
    for step, rate in expected.items():
        assert loop.learning_rate(step) == pytest.approx(rate, rel=1e-12), step


def test_a_first_ctrl_c_asks_the_loop_to_stop_and_a_second_stops_at_once():
    """The first SIGINT only sets the flag and puts the handler that was there before back, so a second SIGINT
    reaches it at once (here Python's own, KeyboardInterrupt, put there first: a process started in the background
    may have inherited SIGINT ignored); after the block that handler is back too."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        before = signal.getsignal(signal.SIGINT)
        with loop_module.stop_at_step_boundary() as stop:
            assert not stop.requested and signal.getsignal(signal.SIGINT) is not before
            os.kill(os.getpid(), signal.SIGINT)
            assert stop.requested and signal.getsignal(signal.SIGINT) is before
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):                               # the signal is handled between bytecodes
                    pass
        assert signal.getsignal(signal.SIGINT) is before
        with loop_module.stop_at_step_boundary():
            assert signal.getsignal(signal.SIGINT) is not before
        assert signal.getsignal(signal.SIGINT) is before             # put back by a run without Ctrl-C too
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_0_4s_keyword_options_still_work_with_a_deprecation_warning():
    from minitransformer.objectives.language_model import loss_curve as old_loss_curve

    batches = iter([(np.zeros((1, 2)),)] * 2)
    with pytest.warns(DeprecationWarning, match=r"TrainingLoop\(\.\.\., max_steps=\.\.\., log=\.\.\.\): pass them as LoopOptions"):
        loop = loop_module.TrainingLoop(None, None, lambda: next(batches), None, max_steps=2, log=False)
    assert (loop.options.max_steps, loop.options.log, loop.options.grad_clip) == (2, False, 0.0)
    with pytest.raises(TypeError, match="colour"), pytest.warns(DeprecationWarning):
        loop_module.TrainingLoop(None, None, None, None, colour="red")
    history = {"step": [1, 2], "loss": [3.0, 2.0], "lr": [0.1, 0.1], "eval": [[2, 2.5, 2.7]]}
    with pytest.warns(DeprecationWarning, match="goes in 0.6"):
        series = old_loss_curve(history, 4)
    assert [one["label"] for one in series] == ["batch loss", "train (4 batches)", "validation"]
    assert series == loop_module.loss_curve(history, ["train (4 batches)", "validation"])


def test_the_untrained_evaluation_is_outside_the_first_steps_time_and_phases(monkeypatch):
    """fit(evaluate_first=True): the step-0 evaluation is timed neither as the first step (tokens per second)
    nor in its phases. A clock that only the batches (1 s each) and the evaluations (100 s each) advance."""
    import types

    import minitransformer.training.harness as harness
    import minitransformer.training.phases as phases
    from minitransformer import GPT
    from minitransformer.objectives.language_model import LanguageModelObjective
    from minitransformer.training.optim.adam import Adam

    now = [0.0]
    clock = types.SimpleNamespace(perf_counter=lambda: now[0], process_time=lambda: now[0])
    monkeypatch.setattr(harness, "time", clock)
    monkeypatch.setattr(phases, "time", clock)
    model = GPT(8, 8, 2, 1, 0, 6, rng=0)
    batch = (np.arange(12).reshape(2, 6) % 8, (np.arange(12).reshape(2, 6) + 1) % 8)

    def next_batch():
        now[0] += 1.0
        return batch

    def evaluate():
        now[0] += 100.0
        return {"val": 1.0}

    loop = loop_module.TrainingLoop(LanguageModelObjective(model), Adam(model.parameters(), lr=1e-2), next_batch,
                                    lambda step: 1e-2, loop_module.LoopOptions(max_steps=2, evaluate=evaluate,
                                                                               log=False, progress=False))
    with phases.recording() as recorded:
        loop.fit(evaluate_first=True)
        recorded.table("")
    assert [row[0] for row in loop.history["eval"]] == [0, 2] and loop.step_times == [1.0, 1.0]
    assert recorded.steps == 2 and recorded.wall["batch"] == 2.0 and recorded.wall["evaluation"] == 100.0


# ---------------------------------------------------------------- the harness (training/harness.py)
def test_the_loop_options_defaults_are_a_loop_that_saves_nothing_evaluates_at_its_end_and_shows_its_progress():
    """LoopOptions() field by field, as its comments say, and what they do: a loop of 0 steps by default; without
    an interval one evaluation, at the end; a restored loop's evaluations named "train" until it evaluates."""
    import dataclasses

    defaults = {field.name: field.default_factory() if field.default is dataclasses.MISSING else field.default
                for field in dataclasses.fields(loop_module.LoopOptions)}
    assert defaults == dict(max_steps=0, grad_clip=0.0, eval_interval=None, evaluate=None, nll=True, parallel=None,
                            generators={}, model=None, meta=None, out_dir=None, overwrite=False, progress=True,
                            tokens_per_step=None, log=None, on_step=None, name="TrainingLoop")
    loop, taken = _counting_loop(5, [0.1] * 6)
    loop.fit()
    assert loop.history["eval"] == [[5, 2.0]]                       # the mean of the losses 0 to 4, at step 5 alone
    restored = loop_module.TrainingLoop(None, None, None, None, loop_module.LoopOptions(model=object()))
    assert restored.fit() is None and restored.step == 0            # max_steps 0
    restored.history.update(step=[1, 2], loss=[1.0, 2.0], lr=[0.1, 0.1], eval=[[2, 1.5]])
    assert [series["label"] for series in restored.loss_curve()] == ["batch loss", "train"]


def test_0_4s_keywords_warn_at_the_callers_line_and_loop_options_alone_do_not_warn():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop_module.TrainingLoop(None, None, None, None, loop_module.LoopOptions(model=object()))
        assert caught == []
        loop_module.TrainingLoop(None, None, None, None, model=object())
    [warning] = caught
    assert warning.category is DeprecationWarning and warning.filename == __file__, (warning.filename, warning.lineno)


def test_a_fresh_loop_refuses_an_out_dir_holding_a_checkpoint_it_did_not_write(tmp_path):
    """Made with out_dir holding another run's checkpoint: refused, naming the loop and how to continue it; told
    to (overwrite=True), it replaces it; a checkpoint that appears after the loop was made is not replaced either.
    A script's loop stores no command's run (null)."""
    from minitransformer.objectives.language_model import LanguageModelObjective
    from minitransformer.training.checkpoint import CheckpointExistsError, save_checkpoint
    from minitransformer.training.optim.adam import Adam

    def loop(out_dir, **options):
        model = _tiny_gpt()
        batch = (np.arange(12).reshape(2, 6) % 8, (np.arange(12).reshape(2, 6) + 1) % 8)
        return loop_module.TrainingLoop(LanguageModelObjective(model), Adam(model.parameters(), lr=1e-2),
                                        lambda: batch, lambda step: 1e-2,
                                        loop_module.LoopOptions(max_steps=1, out_dir=out_dir, log=False, progress=False,
                                                                **options))

    save_checkpoint(tmp_path / "other", _tiny_gpt(), None, {"step": 7})
    with pytest.raises(CheckpointExistsError, match=r"^TrainingLoop: out_dir .*other already holds a checkpoint.*"
                                                    r"continue it with TrainingLoop\.restore\("):
        loop(tmp_path / "other")
    loop(tmp_path / "other", overwrite=True).save(tmp_path / "other")
    assert read_checkpoint(tmp_path / "other")[0]["step"] == 0
    late = loop(tmp_path / "late")
    save_checkpoint(tmp_path / "late", _tiny_gpt(), None, {"step": 7})                    # another run's, since
    with pytest.raises(CheckpointExistsError, match="already holds a checkpoint that this run did not write"):
        late.save(tmp_path / "late")
    assert read_checkpoint(tmp_path / "late")[0]["step"] == 7
    loop(tmp_path / "mine").save(tmp_path / "mine")
    assert read_checkpoint(tmp_path / "mine")[0]["run"] is None


def test_an_infinite_training_loss_stops_the_run_naming_its_step():
    loop, _ = _counting_loop(3, [0.1] * 4, losses=[1.0, np.inf, 1.0])
    with pytest.raises(loop_module.TrainingDiverged, match="training diverged at step 2: the training loss is inf"):
        loop.fit()
    assert loop.step == 1


def test_an_evaluation_with_one_loss_not_finite_stops_the_run_naming_its_step():
    import math

    loop, _ = _counting_loop(3, [0.1] * 4, eval_interval=2, evaluate=lambda: {"train": 1.0, "val": math.nan})
    with pytest.raises(loop_module.TrainingDiverged,
                       match=r"training diverged at step 2: the evaluation losses are \{'train': 1.0, 'val': nan\}"):
        loop.fit()
    assert loop.step == 2


def test_the_loops_evaluations_run_with_dropout_off():
    model = _tiny_gpt()
    loop, _ = _counting_loop(2, [0.1] * 3, model=model, evaluate=lambda: {"training": float(model.training)})
    loop.fit()
    assert loop.history["eval"] == [[2, 0.0]] and model.training


class JobAborted(BaseException):
    """What OneOfTwoRanks.abort raises, where DataParallel.abort ends every rank of the job."""


class OneOfTwoRanks:
    """Stands in for DataParallel on rank `rank` of 2, in one process: what the harness asks of it, recorded."""

    size = 2

    def __init__(self, rank):
        self.rank, self.interrupted, self.stop_requested, self.root_pause, self.aborted = rank, False, False, 0.0, []

    def attach(self, optimizer):
        pass

    def gather_state(self):
        pass

    def abort(self, message):
        self.aborted.append(message)
        raise JobAborted(message)


def test_the_progress_bar_is_drawn_on_a_terminal_by_rank_0_of_a_run_that_shows_it_from_the_step_reached(monkeypatch):
    import minitransformer.training.harness as harness

    monkeypatch.setattr(harness, "is_terminal", lambda stream: True)

    def bar(step=0, progress=True, **options):
        loop, _ = _counting_loop(6, [0.1] * 7, progress=progress, **options)
        loop.step = step                                            # as restored
        with loop.running(6, None) as run:
            return not run.bar.disable, run.bar.n
    assert bar() == (True, 0) and bar(step=4) == (True, 4)
    assert not bar(progress=False)[0]
    assert not bar(parallel=OneOfTwoRanks(1))[0] and bar(parallel=OneOfTwoRanks(0))[0]


def test_under_mpi_a_rank_that_fails_ends_the_job_naming_it_and_a_nan_is_raised_on_every_rank():
    ranks = OneOfTwoRanks(1)
    loop, _ = _counting_loop(12, [0.1] * 13, parallel=ranks)
    loop.step = 9
    with pytest.raises(JobAborted), loop.running(12, None):
        raise RuntimeError("an injected failure")
    assert ranks.aborted == ["rank 1 failed at step 10: RuntimeError: an injected failure"]
    with pytest.raises(loop_module.TrainingDiverged), loop.running(12, None):
        raise loop_module.TrainingDiverged("the loss is nan")       # every rank meets it at the same step
    assert len(ranks.aborted) == 1


@pytest.mark.parametrize("rank", [None, 0, 1])
def test_rank_0_alone_records_and_says_each_evaluation_and_allows_the_others_its_pause(rank, monkeypatch):
    """One process or rank 0: the evaluation is recorded, said in one line (without a bar: with the rate, unless
    the run shows no progress) and handed to on_eval; rank 0's pause, the longest yet, is the others' allowance.
    Rank 1 does none of it. A clock that only the evaluation (3 s) advances."""
    import types

    import minitransformer.training.harness as harness

    now = [100.0]
    monkeypatch.setattr(harness, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

    def evaluate():
        now[0] += 3.0
        return {"train": 2.0}

    for progress, line in ((False, "step     2: train loss 2.0000 (perplexity 7.39)"),
                           (True, "step     2: train loss 2.0000 (perplexity 7.39)  (lr 1.00e-01, 0.0 steps/s)")):
        said, handed, now[0] = [], [], 100.0
        ranks = None if rank is None else OneOfTwoRanks(rank)
        loop, _ = _counting_loop(2, [0.1] * 3, parallel=ranks, log=said.append, progress=progress, evaluate=evaluate)
        loop.history.update(step=[1, 2], loss=[1.0, 3.0], lr=[0.1, 0.1])
        loop.step = 2
        with loop.running(2, lambda loop, losses, handed=handed: handed.append(losses)) as run:
            run.evaluate()
            if ranks is not None:
                ranks.root_pause = 5.0
            run.evaluate()
        if rank == 1:
            assert loop.history["eval"] == [] and said == [] and handed == [] and ranks.root_pause == 5.0
            assert now[0] == 100.0                                  # not evaluated: the run does not share it
            loop.shares_evaluation = True
            run.evaluate()
            assert now[0] == 103.0 and loop.history["eval"] == []   # its share taken, nothing recorded
            continue
        assert loop.history["eval"] == [[2, 2.0], [2, 2.0]] and said == [line, line]
        assert handed == [{"train": 2.0}] * 2
        if ranks is not None:
            assert ranks.root_pause == 5.0                          # the longest pause: 3 s, then 5 s kept
            ranks.root_pause = 1.0
            run.evaluate()
            assert ranks.root_pause == 3.0


def test_the_rate_is_tokens_or_steps_per_second_over_the_last_20_steps():
    loop, _ = _counting_loop(2, [0.1] * 3)
    loop.step_times = [10.0] + [0.25] * 20                          # the 10 s step has left the window
    assert loop.tokens_per_second() == 4.0 and loop.rate_text() == "4.0 steps/s"
    loop.options.tokens_per_step = 32
    assert loop.tokens_per_second() == 128.0 and loop.rate_text() == "128 tok/s"


def test_the_untrained_evaluation_is_recorded_and_not_saved():
    saved = []
    loop, _ = _counting_loop(4, [0.1] * 5, eval_interval=2, out_dir="run", evaluate=lambda: {"train": 1.0})
    loop.save_and_plot = lambda: saved.append(loop.step)           # what fit saves, and when
    loop.fit(max_steps=2, evaluate_first=True)
    assert [row[0] for row in loop.history["eval"]] == [0, 2] and saved == [2]


def test_ctrl_c_at_an_evaluation_step_saves_that_step_once(tmp_path, monkeypatch):
    import minitransformer.training.harness as harness
    from minitransformer.objectives.language_model import LanguageModelObjective
    from minitransformer.training.optim.adam import Adam

    saves, real = [], harness.save_checkpoint
    monkeypatch.setattr(harness, "save_checkpoint", lambda directory, *args: saves.append(args[-1]["step"]) or
                        real(directory, *args))
    model = _tiny_gpt()
    batch = (np.arange(12).reshape(2, 6) % 8, (np.arange(12).reshape(2, 6) + 1) % 8)
    loop = loop_module.TrainingLoop(
        LanguageModelObjective(model), Adam(model.parameters(), lr=1e-2), lambda: batch, lambda step: 1e-2,
        loop_module.LoopOptions(max_steps=6, eval_interval=2, out_dir=tmp_path, log=False, progress=False,
                                on_step=lambda loop: loop.step == 4 and signal.raise_signal(signal.SIGINT)))
    loop.plot = lambda path: None                                   # the picture is not the point here
    with pytest.raises(loop_module.TrainingInterrupted, match="interrupted at step 4: checkpoint saved in"):
        loop.fit()
    assert saves == [2, 4] and read_checkpoint(tmp_path)[0]["step"] == 4


def test_under_mpi_every_rank_stops_at_the_step_where_one_was_interrupted():
    """A rank's Ctrl-C is sent in the next step's first message (`interrupted`); the ranks stop when that message
    says some rank was (`stop_requested`), not at their own Ctrl-C, so that all stop after the same step."""
    ranks = OneOfTwoRanks(0)
    loop, _ = _counting_loop(6, [0.1] * 7, parallel=ranks)
    with loop.running(6, None) as run:
        run.stop.requested = True                                   # this rank's Ctrl-C, before the step's message
        try:
            run.stop_if_asked()                                     # goes on: the others do not know yet
        except loop_module.TrainingInterrupted:                     # a KeyboardInterrupt: pytest would stop at it
            pytest.fail("a rank stopped at its own Ctrl-C, before the step's message told the others")
        assert ranks.interrupted is True
        loop.stop_requested = True                                  # the step's message: a rank was interrupted
        with pytest.raises(loop_module.TrainingInterrupted, match="interrupted at step 0: nothing saved"):
            run.stop_if_asked()
    other = OneOfTwoRanks(1)
    loop, _ = _counting_loop(6, [0.1] * 7, parallel=other)
    with pytest.raises(loop_module.TrainingInterrupted), loop.running(6, None) as run:
        loop.stop_requested = True                                  # rank 1 was not interrupted itself
        run.stop_if_asked()


def test_on_ranks_a_command_saves_on_rank_0_alone_and_steps_with_the_ranks_hook(monkeypatch):
    """commands/resumable.py's loop_options on rank 1 of 2 (the world and the hook stood in for): no place to
    save; the hook built from the run's --parallel, --seed, --worker-timeout and the checkpoints' interval."""
    import minitransformer.training.distributed as distributed
    from minitransformer.__main__ import build_parser
    from minitransformer.commands.resumable import loop_options

    args = build_parser()[0].parse_args(["mlm", "--out", "o", "--parallel", "sharded", "--seed", "4",
                                         "--worker-timeout", "9", "--eval-interval", "3"])
    monkeypatch.setattr(distributed, "DataParallel", lambda *given: given)
    for rank, out_dir in ((1, None), (0, "o")):
        monkeypatch.setattr(distributed, "mpi_world", lambda rank=rank: (rank, 2))
        options = loop_options(args, "mlm", 30)
        assert options["out_dir"] == out_dir and options["parallel"] == ("sharded", 4, 9.0, 3), rank
