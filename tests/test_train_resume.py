"""`train --resume` continues a run as it was configured, Ctrl-C saves at the step boundary and exits 130, and a run
directory is left only where something was saved (issue 23)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_checkpoint import TEXT
from test_one_loop import TINY as TINY_RUNS
from test_train_command import TINY, assert_one_error_line, cli

import minitransformer.objectives.language_model as trainer_module

ROOT = Path(__file__).resolve().parent.parent
MODEL = TINY[:12]          # the model options alone (block size to d_ff)


def meta(directory):
    return json.loads((Path(directory) / "checkpoint.json").read_text(encoding="utf-8"))


def interrupt_at(monkeypatch, step):
    """Ctrl-C (a real SIGINT to this process) during training step `step` (1-based)."""
    real_step = trainer_module.Trainer.step_on_next_batch

    def step_on_next_batch(self):
        if self.step + 1 == step:
            signal.raise_signal(signal.SIGINT)      # this process's Ctrl-C (os.kill would end it on Windows)
        return real_step(self)
    monkeypatch.setattr(trainer_module.Trainer, "step_on_next_batch", step_on_next_batch)


@pytest.mark.parametrize("style", ["gpt2", "llama"])
def test_ctrl_c_saves_at_the_step_boundary_and_resume_continues_bit_for_bit(style, tmp_path, text_file, capsys,
                                                                             monkeypatch):
    options = ["train", "--text", str(text_file), "--max-steps", "8", "--eval-interval", "4", *MODEL,
               "--eval-batches", "1", "--no-progress", "--sample-tokens", "0", "--style", style]
    whole = tmp_path / "whole"
    assert cli(options + ["--out", str(whole)], capsys)[0] == 0
    parted = tmp_path / "parted"
    with monkeypatch.context() as patch:
        interrupt_at(patch, 3)
        code, out, err = cli(options + ["--out", str(parted)], capsys)
    assert code == 130, err
    assert err.strip() == (f"interrupted at step 3: checkpoint saved in {parted}; continue with: "
                           f"python -m minitransformer train --resume --out {parted}"), err
    assert meta(parted)["step"] == 3
    code, out, err = cli(["train", "--resume", "--out", str(parted)], capsys)      # no option given again
    assert code == 0 and "resuming at step 3" in out, err
    assert meta(parted)["step"] == 8 and meta(parted)["train_config"] == meta(whole)["train_config"]
    assert meta(parted)["train_config"]["style"] == style and meta(parted)["model_config"] == meta(whole)["model_config"]
    assert meta(parted)["history"]["loss"] == meta(whole)["history"]["loss"]            # bit for bit (floats in JSON)
    assert meta(parted)["history"]["eval"] == meta(whole)["history"]["eval"]
    for name in ("whole", "parted"):
        assert (tmp_path / name / "loss.png").is_file()
    with np.load(whole / meta(whole)["arrays_file"]) as a, np.load(parted / meta(parted)["arrays_file"]) as b:
        assert sorted(a.files) == sorted(b.files) and all(np.array_equal(a[k], b[k]) for k in a.files)


def test_resume_without_options_keeps_the_runs_length_evaluations_and_text(tmp_path, text_file, capsys, monkeypatch):
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        interrupt_at(patch, 3)
        assert cli(["train", "--text", str(text_file), "--out", str(out), "--max-steps", "12", *MODEL,
                    "--eval-interval", "5", "--eval-batches", "1", "--no-progress", "--sample-tokens", "0"],
                   capsys)[0] == 130
    monkeypatch.chdir(tmp_path)                          # the text is found by its stored absolute path
    code, printed, err = cli(["train", "--resume", "--out", str(out)], capsys)
    assert code == 0 and err == "", err
    assert meta(out)["step"] == 12 and meta(out)["train_config"]["max_steps"] == 12
    assert [row[0] for row in meta(out)["history"]["eval"]] == [0, 5, 10, 12]
    assert meta(out)["run"]["options"]["eval_interval"] == 5 and meta(out)["run"]["text"]["path"] == str(text_file)


def test_a_new_max_steps_is_applied_and_says_what_the_schedule_does(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    assert cli(["train", "--text", str(text_file), "--out", str(out), "--max-steps", "4", *TINY], capsys)[0] == 0
    code, printed, err = cli(["train", "--resume", "--out", str(out), "--max-steps", "7", "--eval-interval", "3"],
                             capsys)
    assert code == 0, err
    assert err.splitlines() == [
        "note: --eval-interval 3 (the run had 2): applied",
        "note: --max-steps 7 (the run was configured for 4): the cosine schedule keeps its horizon of 4 steps, "
        "so steps 5-7 run at its floor, --min-lr 0.0001"], err
    saved = meta(out)
    assert saved["train_config"]["lr_decay_steps"] == 4 and saved["train_config"]["max_steps"] == 7
    assert saved["history"]["lr"][4:] == [pytest.approx(1e-4)] * 3
    assert [row[0] for row in saved["history"]["eval"]] == [0, 2, 4, 6, 7]


@pytest.mark.parametrize("option", [["--d-model", "32"], ["--lr", "0.5"], ["--seed", "7"], ["--tokenizer", "bpe"]])
def test_an_option_that_defines_the_run_is_refused_in_one_line(tmp_path, text_file, capsys, option):
    out = tmp_path / "run"
    assert cli(["train", "--text", str(text_file), "--out", str(out), "--max-steps", "2", *TINY], capsys)[0] == 0
    before = (out / "checkpoint.json").read_bytes()
    code, _, err = cli(["train", "--resume", "--out", str(out), *option], capsys)
    assert code == 2
    assert_one_error_line(err, "different config", option[0], "start a new one")
    assert (out / "checkpoint.json").read_bytes() == before


def test_a_changed_text_is_refused_unless_given_again(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    assert cli(["train", "--text", str(text_file), "--out", str(out), "--max-steps", "2", *TINY], capsys)[0] == 0
    text_file.write_text(TEXT.upper().lower().replace("fox", "cat"), encoding="utf-8")
    code, _, err = cli(["train", "--resume", "--out", str(out), "--max-steps", "3"], capsys)
    assert code == 2
    assert_one_error_line(err, f"the training text {text_file} has changed", f"give --text {text_file}")
    code, _, err = cli(["train", "--resume", "--out", str(out), "--max-steps", "3", "--text", str(text_file)], capsys)
    assert code == 0, err
    assert f"note: --text {text_file} is not the text this run was trained on" in err


def test_a_hand_edited_option_in_the_checkpoint_is_one_error_line(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    assert cli(["train", "--text", str(text_file), "--out", str(out), "--max-steps", "2", *TINY], capsys)[0] == 0
    saved = meta(out)
    for key, value in (("temperature", -1.0), ("eval_interval", "2"), ("nonsense", 1), ("out", str(out)),
                       ("no_progress", 0)):                         # how to start a process; not JSON's false
        edited = json.loads(json.dumps(saved))
        edited["run"]["options"][key] = value
        (out / "checkpoint.json").write_text(json.dumps(edited), encoding="utf-8")
        code, _, err = cli(["train", "--resume", "--out", str(out), "--max-steps", "3"], capsys)
        assert code == 2, err
        assert_one_error_line(err, "run.options", str(out))


def test_nothing_saved_leaves_no_run_directory(tmp_path, text_file, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli(["train", "--text", str(text_file), "--max-steps", "2", *TINY], capsys)[0] == 0
    assert os.readlink("runs/latest") == "run-001"
    code, _, err = cli(["train", "--text", str(text_file), "--max-steps", "2", "--lr", "1e30", *TINY], capsys)
    assert code == 1 and "diverged" in err
    assert sorted(os.listdir("runs")) == ["latest", "run-001"] and os.readlink("runs/latest") == "run-001"
    code, _, err = cli(["train", "--text", str(text_file), "--out", "fresh", "--max-steps", "2", "--lr", "1e30", *TINY],
                       capsys)
    assert code == 1 and not os.path.exists("fresh")
    os.mkdir("mine")
    (Path("mine") / "notes.txt").write_text("the user's", encoding="utf-8")
    assert cli(["train", "--text", str(text_file), "--out", "mine", "--max-steps", "2", "--lr", "1e30", *TINY],
               capsys)[0] == 1
    assert os.listdir("mine") == ["notes.txt"]
    os.mkdir("made-by-hand")                                    # empty, but the user's: not this run's to remove
    assert cli(["train", "--text", str(text_file), "--out", "made-by-hand", "--max-steps", "2", "--lr", "1e30", *TINY],
               capsys)[0] == 1
    assert os.path.isdir("made-by-hand") and not os.listdir("made-by-hand")


def test_a_resumed_run_at_or_past_a_new_max_steps_says_nothing_is_left_to_do(tmp_path, text_file, capsys):
    """--resume with --max-steps 0 is a resumed run (its checkpoint already at step 2), not --max-steps 0's run that
    evaluates the untrained model and saves nothing."""
    out = tmp_path / "run"
    assert cli(["train", "--text", str(text_file), "--out", str(out), "--max-steps", "2", *TINY], capsys)[0] == 0
    code, printed, err = cli(["train", "--resume", "--out", str(out), "--max-steps", "0"], capsys)
    assert code == 0, err
    assert "nothing to do: the checkpoint is already at step 2 >= --max-steps 0" in printed, printed
    assert "nothing trained" not in printed and meta(out)["step"] == 2


@pytest.mark.parametrize("command", [["sample", "--checkpoint", "CHECKPOINT", "--prompt", "the"], ["gradcheck"], ["train"]])
def test_ctrl_c_ends_every_command_with_one_line(command, tmp_path, text_file, capsys, monkeypatch):
    def stop(*args, **kwargs):
        raise KeyboardInterrupt
    out = tmp_path / "run"
    assert cli(["train", "--text", str(text_file), "--out", str(out), "--max-steps", "2", *TINY], capsys)[0] == 0
    import minitransformer.gradcheck.checker
    import minitransformer.models.gpt
    monkeypatch.setattr(minitransformer.models.gpt.GPT, "forward", stop)
    monkeypatch.setattr(minitransformer.gradcheck.checker, "check_module", stop)
    monkeypatch.chdir(tmp_path)
    argv = [str(out) if word == "CHECKPOINT" else word for word in command]
    if command == ["train"]:
        argv += ["--text", str(text_file), *TINY]
    code, _, err = cli(argv, capsys)
    assert code == 130 and err.strip() == "interrupted (Ctrl-C)", err
    assert not os.path.exists(tmp_path / "runs" / "run-001")         # train: nothing saved, no run directory


@pytest.mark.skipif(sys.platform == "win32", reason="Ctrl-C to another process: Windows sends console events "
                    "(CTRL_C_EVENT to a whole console), not SIGINT")
def test_a_real_ctrl_c_under_a_pipe_is_one_line_and_progress_has_no_terminal_frames(tmp_path, text_file):
    """The command as a user runs it, its output piped: one line per evaluation, Ctrl-C one line and status 130."""
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "minitransformer", "train", "--text", str(text_file), "--out",
                                str(out), "--max-steps", "100000", *MODEL, "--eval-interval", "5",
                                "--eval-batches", "1", "--sample-tokens", "0"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8")
    lines = []
    deadline = time.monotonic() + 300
    while len([line for line in lines if line.startswith("step ")]) < 2 and time.monotonic() < deadline:
        lines.append(process.stdout.readline())
    process.send_signal(signal.SIGINT)
    rest, err = process.communicate(timeout=300)
    assert process.returncode == 130, err
    step = meta(out)["step"]
    assert step >= 10 and err.splitlines() == [f"interrupted at step {step}: checkpoint saved in {out}; continue "
                                               f"with: python -m minitransformer train --resume --out {out}"], err
    printed = "".join(lines) + rest
    assert "\r" not in printed + err and "Traceback" not in err
    steps = [line for line in printed.splitlines() if line.startswith("step ")]
    assert steps[0].startswith("step     5: train loss") and "tok/s)" in steps[0]


def test_resuming_with_another_style_is_refused(tmp_path, text_file, capsys):
    """--style defines the model: a resumed run given another one is refused in one line, the checkpoint kept."""
    out = tmp_path / "run"
    options = ["train", "--text", str(text_file), "--max-steps", "2", *MODEL, "--eval-batches", "1", "--no-progress",
               "--sample-tokens", "0", "--out", str(out)]
    assert cli(options + ["--style", "llama"], capsys)[0] == 0
    before = (out / "checkpoint.json").read_text(encoding="utf-8")
    code, _, err = cli(["train", "--resume", "--out", str(out), "--max-steps", "4", "--style", "gpt2"], capsys)
    assert code == 2
    assert_one_error_line(err, f"checkpoint {out} was trained with a different config: --style 'gpt2' "
                               "(checkpoint: 'llama')", "start a new one")
    assert (out / "checkpoint.json").read_text(encoding="utf-8") == before


# Each option train's rules let --resume change (training/resuming.py's RULES), its value in the first run (None:
# not given) and the value given anew; `workers` changes the number of MPI ranks: tests/test_distributed.py.
CHANGED = {"max_steps": ("2", "4"), "eval_interval": ("2", "3"), "eval_batches": ("1", "2"),
           "parallel": (None, "sharded"), "kernels": (None, "plain"), "worker_timeout": (None, "30"),
           "no_progress": (None, True), "threads_per_rank": (None, "1"), "prompt": (None, "the"),
           "sample_tokens": ("0", "3"), "temperature": (None, "0.5"), "top_k": (None, "3")}


def _argv(values):
    argv = []
    for dest, value in values.items():
        if value is not None:
            argv += ["--" + dest.replace("_", "-")] + ([] if value is True else [value])
    return argv


def test_every_option_resume_may_change_is_said_applied_and_kept(tmp_path, text_file, capsys):
    """Given anew, each changeable option is said in a `note:` line (--max-steps in the schedule's), and the run
    goes on with it: the new checkpoint stores it, and a TrainConfig field is the continued config's (so an
    evaluation of --eval-batches 2 uses 2 batches). Another --parallel is one of them (WATCHING)."""
    from minitransformer.training.config import TrainConfig
    from minitransformer.training.resuming import RULES

    assert set(RULES["train"].changeable) == set(CHANGED) | {"workers"}, "a changeable option this test leaves out"
    out = tmp_path / "run"
    first = ["train", "--text", str(text_file), "--out", str(out), *MODEL, "--seed", "3"]
    assert cli(first + _argv({dest: was for dest, (was, _) in CHANGED.items()}), capsys)[0] == 0
    code, printed, err = cli(["train", "--resume", "--out", str(out),
                              *_argv({dest: now for dest, (_, now) in CHANGED.items()})], capsys)
    assert code == 0, err
    for dest in CHANGED:
        option = "--" + dest.replace("_", "-")
        assert any(line.startswith(f"note: {option} ") for line in err.splitlines()), (option, err)
    saved = meta(out)
    stored = saved["run"]["options"]
    fields = {field for field in vars(TrainConfig())}
    for dest, (_, now) in CHANGED.items():
        assert str(stored[dest]) == str(now) or stored[dest] == float(now), (dest, stored[dest])
        if dest in fields:
            assert str(saved["train_config"][dest]) == str(now) or saved["train_config"][dest] == float(now), dest
    assert [row[0] for row in saved["history"]["eval"]] == [0, 2, 3, 4]
    assert "--- sample after training ---" in printed


def test_a_checkpoint_of_another_command_or_of_no_command_is_refused_in_one_line(tmp_path, text_file, capsys):
    from test_checkpoint import tiny_trainer

    trainer = tiny_trainer(out_dir=tmp_path / "script")                # a script's Trainer: no command's run
    trainer.fit(max_steps=3)
    code, _, err = cli(["seq2seq", "--resume", "--out", str(tmp_path / "script")], capsys)
    assert code == 2
    assert_one_error_line(err, "holds no command's run", "seq2seq --resume continues a run of seq2seq")
    code, printed, err = cli(["sample", "--checkpoint", str(tmp_path / "script"), "--prompt", "the",
                              "--max-new-tokens", "2"], capsys)
    assert code == 0, err                                              # sample reads a script's Trainer too
    seq2seq = TINY_RUNS["seq2seq"] + ["--no-progress", "--out", str(tmp_path / "seq2seq")]
    assert cli(seq2seq, capsys)[0] == 0
    for argv, phrases in ((["train", "--resume"], ["is a run of seq2seq, not of train"]),
                          (["sample", "--checkpoint"], ["holds no train_config", "(it is a run of seq2seq)"])):
        code, _, err = cli([*argv, str(tmp_path / "seq2seq")] if argv[0] == "sample"
                           else [*argv, "--out", str(tmp_path / "seq2seq")], capsys)
        assert code == 2
        assert_one_error_line(err, *phrases)


# What a run stores of its options: every option of `train` but those that say how to start this process (--out,
# --resume, --force; the command line itself) and --text, whose record is apart. Read off `train --help`.
STORED = {"tokenizer", "vocab_size", "max_steps", "eval_interval", "eval_batches", "seed", "no_progress", "workers",
          "parallel", "threads_per_rank", "worker_timeout", "block_size", "batch_size", "n_layers", "n_heads", "d_model",
          "style", "d_ff", "dropout", "dtype", "kernels", "lr", "min_lr", "warmup_steps", "schedule", "weight_decay",
          "grad_clip", "prompt", "sample_tokens", "temperature", "top_k"}


def test_a_run_stores_its_options_and_its_texts_absolute_path_hash_and_length(tmp_path, capsys, monkeypatch):
    """The text's record: its absolute path (a relative --text is found again from another directory), the SHA-256
    of its UTF-8 bytes and its length in characters (here 2 bytes each: é)."""
    import hashlib

    text = "le café était très près. " * 20 + "é" * 30
    (tmp_path / "text.txt").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert cli(["train", "--text", "text.txt", "--out", "run", "--max-steps", "2", *TINY, "--force"], capsys)[0] == 0
    run = meta(tmp_path / "run")["run"]
    assert set(run["options"]) == STORED
    assert run["text"] == {"path": str(tmp_path / "text.txt"), "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                           "characters": 530}


def test_a_text_given_again_at_another_path_is_the_one_the_run_continues_on(tmp_path, text_file, capsys):
    out, other = tmp_path / "run", tmp_path / "other.txt"
    assert cli(["train", "--text", str(text_file), "--out", str(out), "--max-steps", "2", *TINY], capsys)[0] == 0
    other.write_text(text_file.read_text(encoding="utf-8").replace("fox", "cat"), encoding="utf-8")
    code, _, err = cli(["train", "--resume", "--out", str(out), "--max-steps", "3", "--text", str(other)], capsys)
    assert code == 0, err
    assert f"note: --text {other} is not the text this run was trained on ({text_file}): continuing on it" in err
    assert meta(out)["run"]["text"]["path"] == str(other)


def test_the_options_given_are_those_that_differ_from_the_defaults_when_the_command_line_is_not_known():
    """A Namespace made by hand (no `given`, which __main__ records) gives again the options whose values are not
    the parser's defaults."""
    from minitransformer.commands.train import add_arguments
    from minitransformer.training.resuming import given_options, options_parser

    parser = options_parser(add_arguments)
    args = parser.parse_args(["--max-steps", "7", "--seed", "1337", "--no-progress"])     # 1337: the default seed
    assert given_options(args, parser) == {"max_steps", "no_progress"}
    args.given = ["seed"]
    assert given_options(args, parser) == {"seed"}


def test_a_run_resumed_on_another_number_of_ranks_takes_it_and_says_so(tmp_path, text_file, capsys):
    """resuming.resume on 2 ranks of a checkpoint of 1, and (its train_config edited) on 1 rank of one of 2: the
    continued config and the options take the job's ranks, with a note; on as many ranks, no note."""
    from minitransformer.commands.train import add_arguments
    from minitransformer.training.checkpoint import read_checkpoint
    from minitransformer.training.resuming import options_parser, resume

    out = tmp_path / "run"
    assert cli(["train", "--text", str(text_file), "--out", str(out), "--max-steps", "2", *TINY], capsys)[0] == 0
    parser = options_parser(add_arguments)

    def resumed(ranks):
        args = parser.parse_args(["--resume", "--out", str(out)])
        args.given = ["resume", "out"]
        return args, resume(read_checkpoint(out), out, "train", args, parser, ranks)
    args, run = resumed(1)
    assert (args.workers, run.config.workers) == (1, 1) and not [note for note in run.notes if "rank" in note]
    args, run = resumed(2)
    assert (args.workers, run.config.workers) == (2, 2)
    assert "note: the checkpoint was trained on 1 rank(s) and continues on 2: its numbers will no longer match an " \
           "uninterrupted run's bit for bit" in run.notes
    edited = meta(out)
    edited["train_config"]["workers"] = edited["run"]["options"]["workers"] = 2
    (out / "checkpoint.json").write_text(json.dumps(edited), encoding="utf-8")
    args, run = resumed(1)
    assert (args.workers, run.config.workers) == (1, 1)
    assert any(note.startswith("note: the checkpoint was trained on 2 rank(s) and continues on 1:") for note in run.notes)


def test_what_a_new_max_steps_does_to_the_rate_is_said_for_each_schedule_and_horizon():
    """horizon_note(old max_steps, the continued config), by hand: the cosine's horizon (lr_decay_steps, kept) is
    passed only by steps after it; a run that ends at it or before stops above the floor."""
    from minitransformer.training.config import TrainConfig
    from minitransformer.training.resuming import horizon_note

    def note(old, max_steps, schedule="cosine"):
        return horizon_note(old, TrainConfig(max_steps=max_steps, lr_decay_steps=4, schedule=schedule, min_lr=1e-4))
    head = "note: --max-steps {} (the run was configured for {}): "
    assert note(4, 4) is None
    assert note(4, 7) == head.format(7, 4) + ("the cosine schedule keeps its horizon of 4 steps, so steps 5-7 run at "
                                              "its floor, --min-lr 0.0001")
    for old, new in ((4, 3), (2, 4)):                                # shorter than before; exactly to the horizon
        assert note(old, new) == head.format(new, old) + ("the cosine schedule keeps its horizon of 4 steps, so the run "
                                                          "stops before the learning rate reaches its floor")
    for schedule in ("noam", "constant"):
        assert note(4, 7, schedule) == head.format(7, 4) + f"the {schedule} schedule is kept as it was"
