"""Checkpoints written by 0.2, 0.3 and 0.4 still load, sample and resume, as the CHANGELOG promises.

The checkpoints were written by those versions' own code (tests/fixtures/make_old_checkpoints.py, run once
against each version; the 0.2 one by test_compatibility.py's part d), with what that code then did: what
`sample` printed, and the history (every step's loss and rate, every evaluation) and generator states of the
checkpoint its `--resume` wrote. Today's commands must do the same with a copy: `sample` prints the same text,
`--resume` reaches the same step with the same history (losses to 1e-6 relative, float32 on another BLAS may
round differently: test_compatibility.py) and the same generator states, exactly.

What they hold (the format of 0.2 to 0.4, one `checkpoint.json` beside a content-named arrays file):
* 0.3's `train`: the train config, the tokenizer, the history without perplexities, no options;
* 0.4's `train`: also the command's options and the text's path and hash (`run`), perplexities, the style;
* 0.4's `seq2seq`: a loop's checkpoint naming its command (`objective`) and options, stopped by Ctrl-C;
* 0.4's `finetune`: its checkpoint.json alone (it names the phase the run was in; its arrays have seq2seq's
  format and the command's fixed model would weigh 240 kB), read as today's format reads it.

A copy of the 0.2 or 0.3 checkpoint changed in one field is refused naming it: each train_config field that 0.2
wrote, format 1's marks of a run's checkpoint, an evaluation's loss that is not a number.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_compatibility import CHECKPOINT, CHECKPOINT_STEPS, CHECKPOINT_TEXT, RESUMED_STEPS

from minitransformer.__main__ import main
from minitransformer.training.checkpoint import CheckpointError, checkpoint_train_config, read_checkpoint

FIXTURES = Path(__file__).parent / "fixtures"
TEXT = FIXTURES / "compat_corpus.txt"
RECORDS = {version: json.loads((FIXTURES / f"old_checkpoints_{version}.json").read_text(encoding="utf-8"))
           for version in ("0_3", "0_4")}
RUNS = [(version, name) for version, record in RECORDS.items() for name in record["runs"]]
RESUMABLE = [(version, name) for version, name in RUNS if RECORDS[version]["runs"][name]["resume"]]
SAMPLED = [(version, name) for version, name in RESUMABLE if "sample" in RECORDS[version]["runs"][name]]


def _copy(version, name, tmp_path):
    """The old checkpoint, copied so that nothing writes into the fixture."""
    target = tmp_path / name
    shutil.copytree(FIXTURES / f"checkpoints_{version}" / name, target)
    return target


def _command(argv, out, capsys):
    words = [str(TEXT) if word == "TEXT" else str(out) if word == "OUT" else word for word in argv]
    code = main(words)
    printed, err = capsys.readouterr()
    return code, printed, err


def assert_same_history(got, recorded, where):
    """Every list the old version recorded: steps exactly, losses and rates to 1e-6 relative."""
    for key, values in recorded.items():
        assert key in got, f"{where}: history.{key} is gone"
        assert len(got[key]) == len(values), f"{where}: history.{key} has {len(got[key])} entries, was {len(values)}"
        if key == "step" or not values:
            assert got[key] == values, f"{where}: history.{key}"
            continue
        now, was = np.array(got[key], dtype=float), np.array(values, dtype=float)
        if now.ndim == 2:                                   # evaluation rows: [step, *losses]
            assert now[:, 0].tolist() == was[:, 0].tolist(), f"{where}: history.{key}'s steps"
        np.testing.assert_allclose(now, was, rtol=1e-6, atol=0, err_msg=f"{where}: history.{key}")


@pytest.mark.parametrize("version, name", SAMPLED)
def test_an_old_checkpoint_samples_as_its_version_did(version, name, tmp_path, capsys):
    entry = RECORDS[version]["runs"][name]
    code, printed, err = _command(["sample", "--checkpoint", "OUT", *entry["sample"]], _copy(version, name, tmp_path),
                                  capsys)
    assert code == 0, err
    assert printed == entry["printed"], f"{version} {name}: `sample` printed {printed!r}, {version} {entry['printed']!r}"


@pytest.mark.parametrize("version, name", RESUMABLE)
def test_an_old_checkpoint_resumes_as_its_version_did(version, name, tmp_path, capsys):
    entry = RECORDS[version]["runs"][name]
    out = _copy(version, name, tmp_path)
    assert read_checkpoint(out)[0]["step"] == entry["step"]
    code, printed, err = _command(entry["resume"], out, capsys)
    assert code == 0, err
    assert f"at step {entry['step']}" in printed + err, printed + err        # it resumed, not started afresh
    meta = read_checkpoint(out)[0]
    assert meta["step"] == entry["resumed"]["step"]
    assert_same_history(meta["history"], entry["resumed"]["history"], f"{version} {name}")
    assert meta["rng"] == entry["resumed"]["rng"], f"{version} {name}: the generators' states differ"


def test_the_0_2_checkpoint_resumes_through_the_train_command(tmp_path, capsys):
    """test_compatibility.py resumes the 0.2 checkpoint with `Trainer.resume`; the command goes on the same way."""
    out = tmp_path / "checkpoint_0_2"
    shutil.copytree(CHECKPOINT, out)
    text = tmp_path / "text.txt"
    text.write_text(CHECKPOINT_TEXT, encoding="utf-8")
    recorded = json.loads((FIXTURES / "compat_checkpoint_outputs.json").read_text(encoding="utf-8"))
    code, printed, err = _command(["train", "--resume", "--out", "OUT", "--text", str(text), "--no-progress",
                                   "--sample-tokens", "0"], out, capsys)
    assert code == 0, err
    assert f"resuming at step {CHECKPOINT_STEPS}" in printed
    history = read_checkpoint(out)[0]["history"]
    assert history["loss"][:CHECKPOINT_STEPS] == recorded["trained_losses"]
    np.testing.assert_allclose(history["loss"][CHECKPOINT_STEPS:], recorded["resumed_losses"], rtol=1e-6, atol=0)
    assert len(history["loss"]) == CHECKPOINT_STEPS + RESUMED_STEPS


def test_a_0_4_finetune_checkpoint_is_read_with_its_command_and_phase_in_its_run(tmp_path):
    """0.4's checkpoint.json of `finetune`, stopped in its fine-tuning phase, beside an arrays file of our own
    (its own is not kept): read, it is today's format, its run naming the command, the phase and the options."""
    import hashlib

    written = json.loads((FIXTURES / "checkpoints_0_4" / "finetune" / "checkpoint.json").read_text(encoding="utf-8"))
    assert written["format_version"] == 1 and written["objective"] == "finetune" and written["phase"] == "fine-tune"
    with open(tmp_path / "arrays.npz", "wb") as file:
        np.savez(file, **{"param.w": np.zeros(2)})
    document = dict(written, arrays_file="arrays.npz",
                    arrays_sha256=hashlib.sha256((tmp_path / "arrays.npz").read_bytes()).hexdigest())
    (tmp_path / "checkpoint.json").write_text(json.dumps(document), encoding="utf-8")
    meta = read_checkpoint(tmp_path)[0]
    assert meta["run"] == {"command": "finetune", "options": written["run"]["options"], "phase": "fine-tune"}
    assert "objective" not in meta and "phase" not in meta
    assert meta["history"] == written["history"] and meta["step"] == written["step"] == 2


def test_the_0_3_checkpoint_resumes_with_its_commands_warmup_option_given_again(tmp_path, capsys):
    """0.3 stored no options: its train_config stands for them, but for the warm-up, which its short run derived
    (3 steps: a tenth, 0) from the option (--warmup-steps 100, the default): given again, the option is accepted,
    and stored as given."""
    entry = RECORDS["0_3"]["runs"]["train"]
    out = _copy("0_3", "train", tmp_path)
    assert read_checkpoint(out)[0]["train_config"]["warmup_steps"] == 0
    code, printed, err = _command([*entry["resume"], "--warmup-steps", "100"], out, capsys)
    assert code == 0, err
    assert read_checkpoint(out)[0]["run"]["options"]["warmup_steps"] == 100


def _format_1_copy(tmp_path, change, source=FIXTURES / "checkpoints_0_3" / "train"):
    """A copy of an old checkpoint (format 1) with `change(document)` made to its checkpoint.json."""
    target = tmp_path / "changed"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    document = json.loads((target / "checkpoint.json").read_text(encoding="utf-8"))
    change(document)
    (target / "checkpoint.json").write_text(json.dumps(document), encoding="utf-8")
    return target


def test_every_train_config_field_0_2_wrote_is_required_and_those_added_since_take_their_defaults(tmp_path):
    """The fields are those of the 0.2 checkpoint, which 0.2's own code wrote: each one missing is refused by name;
    0.3's kernels and worker_timeout (added after 0.2) missing are read."""
    written = json.loads((CHECKPOINT / "checkpoint.json").read_text(encoding="utf-8"))["train_config"]
    assert len(written) == 23 and {"dropout", "min_lr", "workers"} <= set(written)
    for name in written:
        copy = _format_1_copy(tmp_path, lambda document, name=name: document["train_config"].pop(name), source=CHECKPOINT)
        with pytest.raises(CheckpointError, match=f"train_config lacks {name}$"):
            read_checkpoint(copy)
    later = json.loads((FIXTURES / "checkpoints_0_3" / "train" / "checkpoint.json").read_text(encoding="utf-8"))
    assert set(later["train_config"]) - set(written) == {"kernels", "worker_timeout"}
    copy = _format_1_copy(tmp_path, lambda document: [document["train_config"].pop(name)
                                                      for name in ("kernels", "worker_timeout")])
    config = checkpoint_train_config(read_checkpoint(copy)[0], copy)
    assert (config.kernels, config.worker_timeout) == ("fast", 60.0)                  # TrainConfig's defaults


def test_a_format_1_checkpoint_marked_a_runs_by_its_history_alone_is_checked_as_a_runs(tmp_path):
    """0.2's trainer wrote history beside train_config, tokenizer and rng: with those three gone, the history
    still marks a run's checkpoint, whose missing generator states are then named."""
    copy = _format_1_copy(tmp_path, lambda document: [document.pop(key) for key in ("train_config", "tokenizer", "rng")])
    with pytest.raises(CheckpointError, match="'rng' must be an object, got None"):
        read_checkpoint(copy)


def test_a_format_1_history_with_a_null_for_a_loss_is_named_not_turned_into_perplexities(tmp_path):
    """0.3 stored no perplexities: they are computed from its evaluations' losses, only when every one is a
    number; else the evaluations are named as malformed (not a TypeError from float(None))."""
    def damage(document):
        assert "perplexity" not in document["history"] and document["history"]["eval"]
        document["history"]["eval"][0][1] = None
    with pytest.raises(CheckpointError, match=r"history.eval must be a list of \[step, train loss, validation loss\]"):
        read_checkpoint(_format_1_copy(tmp_path, damage))
