"""Checkpoints never lose work: no silent overwrite, no deleted user files, safe concurrent saves, no NaN saved,
and every malformed checkpoint.json refused with CheckpointError before anything is loaded.

(The names added with these rules are imported inside the tests, so that each test fails on its own, and
for its own reason, on the code from before them.)
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from test_checkpoint import _snapshot, tiny_trainer

from minitransformer.objectives.language_model import Trainer
from minitransformer.training.checkpoint import (
    CheckpointError,
    checkpoint_tokenizer,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from minitransformer.training.config import TrainConfig, build_model


def _files(directory):
    """{name: bytes} of every file in `directory`."""
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def _finite_weights(directory):
    _, arrays = read_checkpoint(directory)
    return all(np.isfinite(value).all() for name, value in arrays.items() if name.startswith("param."))


# ---------------------------------------------------------------- no silent overwrite
def test_a_fresh_trainer_refuses_an_out_dir_that_holds_a_checkpoint(tmp_path):
    first = tiny_trainer(out_dir=tmp_path)
    first.fit(max_steps=3)                                          # saves at step 3
    before = _files(tmp_path)
    with pytest.raises(CheckpointError, match=r"already holds a checkpoint.*Trainer\.resume.*overwrite=True"):
        tiny_trainer(out_dir=tmp_path)
    plain = tiny_trainer()
    plain.step_on_next_batch()
    with pytest.raises(CheckpointError, match="already holds a checkpoint that this run did not write"):
        plain.save(tmp_path)
    assert _files(tmp_path) == before                               # not a byte changed
    plain.save(tmp_path, overwrite=True)                            # told to: replaced
    assert read_checkpoint(tmp_path)[0]["step"] == 1


def test_overwrite_true_replaces_only_the_checkpoint(tmp_path):
    first = tiny_trainer(out_dir=tmp_path)
    first.fit(max_steps=3)
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    (tmp_path / "checkpoint-best.npz").write_bytes(b"my best weights")
    old_arrays = json.loads((tmp_path / "checkpoint.json").read_text(encoding="utf-8"))["arrays_file"]
    second = tiny_trainer(out_dir=tmp_path, overwrite=True, seed=4)
    second.fit(max_steps=3)
    assert read_checkpoint(tmp_path)[0]["train_config"]["seed"] == 4
    assert not (tmp_path / old_arrays).exists()                     # the replaced checkpoint's arrays
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert (tmp_path / "checkpoint-best.npz").read_bytes() == b"my best weights"


def test_a_resumed_run_saves_in_place_and_a_trainer_saves_again_where_it_saved(tmp_path):
    first = tiny_trainer(out_dir=tmp_path)
    first.fit(max_steps=3)
    first.save(tmp_path)                                            # its own checkpoint: allowed
    resumed = Trainer.resume(tmp_path, first.train_data, first.val_data, out_dir=tmp_path, progress=False)
    resumed.fit()
    assert read_checkpoint(tmp_path)[0]["step"] == 6
    elsewhere = tmp_path / "other"
    tiny_trainer(out_dir=elsewhere).save(elsewhere)
    with pytest.raises(CheckpointError, match="already holds a checkpoint"):
        Trainer.resume(tmp_path, first.train_data, first.val_data, out_dir=elsewhere, progress=False)


# ---------------------------------------------------------------- a save removes only what it replaced
def test_a_save_removes_only_the_arrays_file_the_replaced_checkpoint_named(tmp_path):
    model = build_model(TrainConfig(block_size=4, n_layers=1, n_heads=1, d_model=4, d_ff=8), 5)
    user_files = {"checkpoint-best.npz": b"best", "checkpoint-0123456789abcdef.npz.bak": b"backup",
                  "checkpoint-old.npz": b"old"}
    for name, data in user_files.items():
        (tmp_path / name).write_bytes(data)
    save_checkpoint(tmp_path, model, None, {"step": 0})
    first = json.loads((tmp_path / "checkpoint.json").read_text(encoding="utf-8"))["arrays_file"]
    model.token_embedding.weight.data += 1.0
    save_checkpoint(tmp_path, model, None, {"step": 1})
    second = json.loads((tmp_path / "checkpoint.json").read_text(encoding="utf-8"))["arrays_file"]
    assert second != first and not (tmp_path / first).exists()
    assert sorted(os.listdir(tmp_path)) == sorted([*user_files, "checkpoint.json", second])
    assert all((tmp_path / name).read_bytes() == data for name, data in user_files.items())


def test_a_checkpoint_naming_a_users_file_does_not_get_it_deleted(tmp_path):
    """Even a checkpoint.json that names checkpoint-best.npz (edited by hand) does not make a save delete it."""
    model = build_model(TrainConfig(block_size=4, n_layers=1, n_heads=1, d_model=4, d_ff=8), 5)
    save_checkpoint(tmp_path, model, None, {"step": 0})
    document = json.loads((tmp_path / "checkpoint.json").read_text(encoding="utf-8"))
    os.replace(tmp_path / document["arrays_file"], tmp_path / "checkpoint-best.npz")
    document["arrays_file"] = "checkpoint-best.npz"
    (tmp_path / "checkpoint.json").write_text(json.dumps(document), encoding="utf-8")
    save_checkpoint(tmp_path, model, None, {"step": 1})
    assert (tmp_path / "checkpoint-best.npz").exists()


# ---------------------------------------------------------------- concurrent saves
WRITER = """
import sys, time
from pathlib import Path
from minitransformer.training.checkpoint import save_checkpoint
from minitransformer.training.config import TrainConfig, build_model

directory, writer, saves = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model = build_model(TrainConfig(block_size=4, n_layers=1, n_heads=1, d_model=8, d_ff=16), 7)
go = Path(directory) / "go"
while not go.exists():                          # all writers start together
    time.sleep(0.005)
for index in range(saves):
    model.token_embedding.weight.data += 1.0
    save_checkpoint(directory, model, None, {"step": index, "writer": writer})
"""


def test_three_processes_saving_into_one_directory(tmp_path):
    """No save raises because another process saved, and at every moment checkpoint.json names a complete
    arrays file: a reader that finds the named file gone must find checkpoint.json changed since."""
    directory = tmp_path / "run"
    directory.mkdir()
    saves = 40
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(directory), str(rank), str(saves)],
                                stderr=subprocess.PIPE, text=True, encoding="utf-8") for rank in range(3)]
    time.sleep(0.5)
    (directory / "go").touch()
    json_path, seen, violations = directory / "checkpoint.json", 0, []
    while any(writer.poll() is None for writer in writers):
        try:
            text = json_path.read_bytes()
        except FileNotFoundError:                   # before the first save
            continue
        document = json.loads(text)                 # never a half-written JSON
        try:
            data = (directory / document["arrays_file"]).read_bytes()
        except FileNotFoundError:
            if json_path.read_bytes() == text:      # still the current checkpoint, and its arrays are gone
                violations.append(document["arrays_file"])
            continue
        if hashlib.sha256(data).hexdigest() != document["arrays_sha256"]:
            violations.append(f"{document['arrays_file']} incomplete")
        seen += 1
    errors = [writer.stderr.read() for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0, 0], errors
    assert not violations
    assert seen > 0
    meta, _ = read_checkpoint(directory)            # the last writer's checkpoint, complete
    assert meta["step"] == saves - 1
    model = build_model(TrainConfig(block_size=4, n_layers=1, n_heads=1, d_model=8, d_ff=16), 7)
    load_checkpoint(directory, model)
    assert not [name for name in os.listdir(directory) if name.endswith(".tmp")]


# ---------------------------------------------------------------- a NaN run keeps the last good checkpoint
def files_after_each_save(directory, kept):
    """An on_eval callback that leaves in `kept` exactly the files of `directory` after the latest save."""
    def keep(trainer, losses):
        kept.clear()                                    # each save replaced the one before: keep only the latest
        kept.update(_files(directory))
    return keep


def test_an_absurd_learning_rate_stops_training_and_keeps_the_checkpoint(tmp_path):
    """TrainingDiverged is a FloatingPointError; the test names the latter, which exists before the fix too."""
    trainer = tiny_trainer(out_dir=tmp_path, lr=1e6, warmup_steps=0, eval_interval=1, max_steps=50,
                           lr_decay_steps=50, dropout=0.0)
    kept = {}
    # Which check fires first depends on the tier's rounding (in a student copy every layer is plain): the
    # step's loss or gradient norm, or the evaluation right after it.
    with pytest.raises(FloatingPointError, match=r"training diverged at step (\d+): the ((training loss|gradient norm) "
                                               r"is (nan|inf)|evaluation losses are .*nan).*the last checkpoint "
                                               r"\(step \d+") as caught:
        trainer.fit(on_eval=files_after_each_save(tmp_path, kept))
    step = int(caught.value.args[0].split("step ")[1].split(":")[0])
    assert read_checkpoint(tmp_path)[0]["step"] == step - 1 and _files(tmp_path) == kept    # bytes unchanged
    assert _finite_weights(tmp_path)
    assert type(caught.value).__name__ == "TrainingDiverged"
    for refused in (trainer.step_on_next_batch, lambda: trainer.save(tmp_path)):
        with pytest.raises(FloatingPointError, match="this run stopped"):
            refused()
    assert _files(tmp_path) == kept


@pytest.mark.parametrize("where", ["loss", "gradient"])
def test_an_injected_nan_names_the_step(tmp_path, where):
    trainer = tiny_trainer(out_dir=tmp_path, eval_interval=2)
    trainer.fit(max_steps=2)
    kept = _files(tmp_path)
    if where == "loss":
        forward = trainer.objective.forward
        trainer.objective.forward = lambda *batch: forward(*batch) * np.nan
    else:
        backward = trainer.objective.backward
        trainer.objective.backward = lambda: (backward(), trainer.model.token_embedding.weight.grad.fill(np.inf))
    with pytest.raises(FloatingPointError, match=f"step 3: the {'training loss' if where == 'loss' else 'gradient norm'}"
                                               f" is (nan|inf).*the last checkpoint \\(step 2, in {re.escape(str(tmp_path))}\\)"):
        trainer.fit()
    assert trainer.step == 2 and _files(tmp_path) == kept and _finite_weights(tmp_path)


def test_weights_that_are_not_finite_are_never_saved(tmp_path):
    trainer = tiny_trainer(out_dir=tmp_path)
    trainer.save(tmp_path)
    kept = _files(tmp_path)
    trainer.model.token_embedding.weight.data[0, 0] = np.nan
    with pytest.raises(FloatingPointError, match="token_embedding.weight holds NaN or infinite values; not saved"):
        trainer.save(tmp_path)
    assert _files(tmp_path) == kept


# ---------------------------------------------------------------- malformed checkpoints
def _edit_json(change):
    def edit(directory):
        path = directory / "checkpoint.json"
        document = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(change(document)), encoding="utf-8")
    return edit


def _write_text(text):
    def edit(directory):
        (directory / "checkpoint.json").write_text(text, encoding="utf-8")
    return edit


def _set(path, value):
    """checkpoint.json with the value at `path` (keys, separated by dots) replaced, or deleted if value is ..."""
    def change(document):
        *parents, last = path.split(".")
        target = document
        for key in parents:
            target = target[key]
        if value is ...:
            del target[last]
        else:
            target[last] = value
        return document
    return _edit_json(change)


def _remove_arrays(directory):
    os.remove(directory / json.loads((directory / "checkpoint.json").read_text(encoding="utf-8"))["arrays_file"])


def _rewrite_arrays(change):
    """Rewrite the arrays file with `change(arrays)`, under a new name, with a correct checksum."""
    def edit(directory):
        path = directory / "checkpoint.json"
        document = json.loads(path.read_text(encoding="utf-8"))
        with np.load(directory / document["arrays_file"]) as archive:
            arrays = {name: archive[name] for name in archive.files}
        change(arrays)
        name = "checkpoint-0000000000000000-00000000.npz"
        with open(directory / name, "wb") as file:
            np.savez(file, **arrays)
        document["arrays_file"] = name
        document["arrays_sha256"] = hashlib.sha256((directory / name).read_bytes()).hexdigest()
        path.write_text(json.dumps(document), encoding="utf-8")
    return edit


MALFORMED = {
    "a list at the top": (_write_text("[1, 2, 3]"), "must hold a JSON object, got a list"),
    "a number at the top": (_write_text("3"), "must hold a JSON object, got a number"),
    "bad JSON": (_write_text('{"step": 3,'), "not valid JSON"),
    "empty": (_write_text(""), "not valid JSON"),
    "format_version a string": (_set("format_version", "1"), "has format '1'"),
    "format_version missing": (_set("format_version", ...), "has format None"),
    "arrays_file a number": (_set("arrays_file", 5), "'arrays_file' must be a file name, got 5"),
    "arrays_sha256 missing": (_set("arrays_sha256", ...), "'arrays_sha256' must be 64 hex digits, got None"),
    "arrays file missing": (_remove_arrays, r"no checkpoint at .*checkpoint-.*\.npz is missing"),
    "model_config a list": (_set("model_config", [16]), "'model_config' must be an object, got a list"),
    "model_config missing": (_set("model_config", ...), "'model_config' must be an object, got null"),
    "vocab_size a string": (_set("model_config.vocab_size", "21"), "model_config.vocab_size must be a whole"),
    "optimizer a string": (_set("optimizer", "AdamW"), "'optimizer' must be null or an object"),
    "step missing": (_set("step", ...), "'step' must be a whole number >= 0, got None"),
    "step a string": (_set("step", "3"), "'step' must be a whole number >= 0, got '3'"),
    "step negative": (_set("step", -1), "'step' must be a whole number >= 0, got -1"),
    "train_config missing": (_set("train_config", ...), "'train_config' must be an object, got None"),
    "train_config a list": (_set("train_config", [1]), "'train_config' must be an object"),
    "d_model a string": (_set("train_config.d_model", "16"), "train_config.d_model must be a whole number"),
    "a bool for an int": (_set("train_config.n_layers", True), "train_config.n_layers must be a whole number"),
    "lr not finite": (_set("train_config.lr", float("nan")), "train_config.lr must be a finite number"),
    "dtype a number": (_set("train_config.dtype", 32), "train_config.dtype must be a string"),
    "a field missing": (_set("train_config.block_size", ...), "train_config lacks block_size"),
    "an unknown field": (_set("train_config.colour", "red"), "fields this version does not know: colour"),
    "tokenizer a list": (_set("tokenizer", ["a"]), "'tokenizer' must be null or an object with a 'kind'"),
    "history missing": (_set("history", ...), "'history' must be an object"),
    "history.loss a dict": (_set("history.loss", {}), "history.loss must be a list of numbers"),
    "history.eval rows": (_set("history.eval", [[1, 2]]), "history.eval must be a list of \\[step"),
    "rng missing": (_set("rng", ...), "'rng' must be an object"),
    "rng.data garbage": (_set("rng.data", {"state": 1}), "rng.data is not the state of a PCG64"),
    "wrong parameter shape": (_rewrite_arrays(lambda a: a.update({"param.token_embedding.weight":
                                                                  a["param.token_embedding.weight"][:, :-1]})),
                              "parameter names, shapes or dtypes differ"),
    "wrong optimizer shape": (_rewrite_arrays(lambda a: a.update({name: a[name][:-1] for name in a
                                                                  if name.startswith("optim.") and a[name].ndim})),
                              "optimizer state does not fit"),
    "NaN weights": (_rewrite_arrays(lambda a: a["param.token_embedding.weight"].fill(np.nan)),
                    "token_embedding.weight holds NaN or infinite values"),
    "one weight infinite": (_rewrite_arrays(lambda a: a["param.token_embedding.weight"].__setitem__((0, 0), np.inf)),
                            "token_embedding.weight holds NaN or infinite values"),
    "a parameter in float64": (_rewrite_arrays(lambda a: a.update({"param.token_embedding.weight":
                                                                   a["param.token_embedding.weight"].astype(np.float64)})),
                               "parameter names, shapes or dtypes differ"),
    "format_version true": (_set("format_version", True), "has format True, this version reads formats 1 and 2"),
    "format_version 3": (_set("format_version", 3), "has format 3, this version reads formats 1 and 2"),
    "vocab_size 0": (_set("model_config.vocab_size", 0), "model_config.vocab_size must be a whole number >= 1, got 0"),
    "a 1 for a bool": (_set("train_config.decay_embeddings", 1), "train_config.decay_embeddings must be true or false"),
    "tokenizer without a kind": (_set("tokenizer", {"chars": "ab"}), "'tokenizer' must be null or an object with a 'kind'"),
    "run.text null": (_set("run", {"command": "train", "options": {}, "text": None}), "run.text must be an object, got None"),
    "history.lr a dict": (_set("history.lr", {}), "history.lr must be a list of numbers"),
    "history.perplexity rows": (_set("history.perplexity", [[1, 2]]),
                                "history.perplexity must be a list of \\[step, train perplexity, validation perplexity\\]"),
    "rng.data state negative": (_set("rng.data.state.state", -1), "rng.data is not the state of a PCG64"),
    "optimizer null": (_set("optimizer", None), "holds optimizer None, not AdamW"),
}


@pytest.fixture()
def saved_trainer(tmp_path):
    trainer = tiny_trainer()
    for _ in range(2):
        trainer.step_on_next_batch()
    trainer.save(tmp_path)
    return trainer


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_checkpoint_raises_checkpoint_error_and_loads_nothing(tmp_path, saved_trainer, case):
    damage, message = MALFORMED[case]
    damage(tmp_path)
    with pytest.raises(CheckpointError, match=message):
        Trainer.resume(tmp_path, saved_trainer.train_data, saved_trainer.val_data, progress=False)
    fresh = tiny_trainer()
    before = _snapshot(fresh)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path, fresh.model, fresh.optimizer)
    after = _snapshot(fresh)
    assert all(np.array_equal(before[0][name], after[0][name]) for name in before[0])
    assert all(np.array_equal(a[key], b[key]) for a, b in zip(before[1], after[1]) for key in a)


def test_a_checkpoint_without_the_state_of_one_of_the_runs_generators_is_refused(tmp_path, saved_trainer):
    _set("rng.dropout", ...)(tmp_path)
    with pytest.raises(CheckpointError, match=r"holds no state of the generator\(s\) \['dropout'\]"):
        Trainer.resume(tmp_path, saved_trainer.train_data, saved_trainer.val_data, progress=False)


def test_a_tokenizer_that_does_not_match_the_model_is_a_checkpoint_error():
    """Else `sample` would fail only when the model emits an id the tokenizer cannot decode (a traceback)."""
    meta = {"tokenizer": {"kind": "char", "chars": "ab"}, "model_config": {"vocab_size": 5}}
    with pytest.raises(CheckpointError, match="its tokenizer has 2 tokens but its model 5"):
        checkpoint_tokenizer(meta, "run-dir")
    meta["model_config"]["vocab_size"] = 1                                              # more tokens than the model
    with pytest.raises(CheckpointError, match="its tokenizer has 2 tokens but its model 1"):
        checkpoint_tokenizer(meta, "run-dir")
    meta["model_config"]["vocab_size"] = 2
    assert checkpoint_tokenizer(meta, "run-dir").vocab_size == 2
