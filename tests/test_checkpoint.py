"""Checkpoints round-trip bit-exactly and refuse, loading nothing, when missing, truncated or mismatched."""

import json
import os

import numpy as np
import pytest

from minitransformer.objectives.language_model import Trainer
from minitransformer.tokenizers import CharTokenizer
from minitransformer.training.checkpoint import CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint
from minitransformer.training.config import TrainConfig, build_model

TEXT = "the quick brown fox jumps over the lazy dog. " * 20


def tiny_config(**changes):
    fields = dict(block_size=8, batch_size=4, n_layers=2, n_heads=2, d_model=16, d_ff=32, dropout=0.1,
                  max_steps=6, warmup_steps=2, lr_decay_steps=6, eval_interval=3, eval_batches=2, seed=3)
    fields.update(changes)
    return TrainConfig(**fields)


def tiny_trainer(out_dir=None, overwrite=False, **changes):
    tokenizer = CharTokenizer.train(TEXT)
    ids = np.array(tokenizer.encode(TEXT))
    return Trainer(tiny_config(**changes), ids[:800], ids[800:], tokenizer.vocab_size, out_dir=out_dir,
                   tokenizer_config=tokenizer.to_config(), progress=False, overwrite=overwrite)


def _snapshot(trainer):
    return ({n: p.data.copy() for n, p in trainer.model.named_parameters()},
            [{k: v.copy() for k, v in s.items()} for s in trainer.optimizer.state])


def test_round_trip_is_bit_exact(tmp_path):
    trainer = tiny_trainer()
    for _ in range(3):
        trainer.step_on_next_batch()
    trainer.save(tmp_path)
    other = Trainer.resume(tmp_path, trainer.train_data, trainer.val_data, progress=False)
    params, state = _snapshot(trainer)
    other_params, other_state = _snapshot(other)
    assert params.keys() == other_params.keys()
    assert all(np.array_equal(params[n], other_params[n]) and params[n].dtype == other_params[n].dtype for n in params)
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(state, other_state) for k in a)
    assert other.step == 3 and other.optimizer.step_count == 3 and other.history == trainer.history
    assert other.data_rng.bit_generator.state == trainer.data_rng.bit_generator.state
    assert other.model.dropout_rng.bit_generator.state == trainer.model.dropout_rng.bit_generator.state


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint.*missing"):
        read_checkpoint(tmp_path / "nowhere")


@pytest.mark.parametrize("damage", ["truncate arrays", "alter arrays", "truncate json"])
def test_damaged_checkpoint_loads_nothing(tmp_path, damage):
    trainer = tiny_trainer()
    trainer.step_on_next_batch()
    trainer.save(tmp_path)
    document = tmp_path / "checkpoint.json"
    arrays = tmp_path / json.loads(document.read_text(encoding="utf-8"))["arrays_file"]
    if damage == "truncate arrays":
        arrays.write_bytes(arrays.read_bytes()[: os.path.getsize(arrays) // 2])
    elif damage == "alter arrays":
        data = bytearray(arrays.read_bytes())
        data[len(data) // 2] ^= 0xFF
        arrays.write_bytes(bytes(data))
    else:
        document.write_text(document.read_text(encoding="utf-8")[:100], encoding="utf-8")
    fresh = tiny_trainer()
    before = _snapshot(fresh)
    with pytest.raises(CheckpointError, match="truncated|altered|not valid JSON"):
        load_checkpoint(tmp_path, fresh.model, fresh.optimizer)
    after = _snapshot(fresh)
    assert all(np.array_equal(before[0][n], after[0][n]) for n in before[0])


def test_checkpoint_of_a_different_model_loads_nothing(tmp_path):
    trainer = tiny_trainer()
    trainer.step_on_next_batch()
    trainer.save(tmp_path)
    other = build_model(tiny_config(d_model=24), trainer.model.vocab_size)
    before = {n: p.data.copy() for n, p in other.named_parameters()}
    with pytest.raises(CheckpointError, match="different model.*d_model: checkpoint 16, now 24"):
        load_checkpoint(tmp_path, other)
    assert all(np.array_equal(before[n], p.data) for n, p in other.named_parameters())


def test_a_model_without_biases_and_with_rmsnorm_is_not_loaded_into_one_with_them(tmp_path):
    """The options added since format 1 (norm_layer, bias) take their old values only where a checkpoint lacks
    them: a checkpoint that states them is compared as it states them."""
    llama = build_model(tiny_config(style="llama"), 10)
    assert llama.config["norm_layer"] == "rmsnorm" and llama.config["bias"] is False
    save_checkpoint(tmp_path, llama, None, {"step": 0})
    with pytest.raises(CheckpointError, match=r"different model: .*bias: checkpoint False, now True; .*"
                                              r"norm_layer: checkpoint 'rmsnorm', now 'layernorm'"):
        load_checkpoint(tmp_path, build_model(tiny_config(), 10))


def test_a_save_writes_format_2_and_reads_formats_1_and_2_only(tmp_path):
    """The number in the file, by hand: format 2 (checkpoint.json beside its content-named arrays; 1 was 0.2 to 0.4)."""
    trainer = tiny_trainer()
    trainer.save(tmp_path)
    document = json.loads((tmp_path / "checkpoint.json").read_text(encoding="utf-8"))
    assert document["format_version"] == 2
    assert read_checkpoint(tmp_path)[0]["format_version"] == 2
    for version in (0, 3):
        (tmp_path / "checkpoint.json").write_text(json.dumps(dict(document, format_version=version)), encoding="utf-8")
        with pytest.raises(CheckpointError, match=f"has format {version}, this version reads formats 1 and 2"):
            read_checkpoint(tmp_path)


def test_resume_with_a_different_training_config_is_refused(tmp_path):
    trainer = tiny_trainer()
    trainer.save(tmp_path)
    with pytest.raises(CheckpointError, match="different config: lr: checkpoint 0.001, now 0.01"):
        Trainer.resume(tmp_path, trainer.train_data, trainer.val_data, config=tiny_config(lr=0.01))
    resumed = Trainer.resume(tmp_path, trainer.train_data, trainer.val_data, config=tiny_config(max_steps=9),
                             progress=False)
    assert resumed.config.max_steps == 9


def test_optimizer_state_that_does_not_fit_loads_nothing(tmp_path):
    trainer = tiny_trainer()
    trainer.step_on_next_batch()
    trainer.save(tmp_path)
    meta = json.loads((tmp_path / "checkpoint.json").read_text(encoding="utf-8"))
    assert meta["optimizer"]["type"] == "AdamW"
    fresh = tiny_trainer()
    from minitransformer.training.optim import SGD
    sgd = SGD(fresh.model.parameters(), lr=0.1)
    before = {n: p.data.copy() for n, p in fresh.model.named_parameters()}
    with pytest.raises(CheckpointError, match="holds optimizer AdamW, not SGD"):
        load_checkpoint(tmp_path, fresh.model, sgd)
    assert all(np.array_equal(before[n], p.data) for n, p in fresh.model.named_parameters())


def test_save_writes_both_files_and_no_leftovers(tmp_path):
    model = build_model(tiny_config(), 5)
    save_checkpoint(tmp_path / "run", model, None, {"step": 0})
    def arrays_file():
        return json.loads((tmp_path / "run" / "checkpoint.json").read_text(encoding="utf-8"))["arrays_file"]

    first = arrays_file()
    assert sorted(os.listdir(tmp_path / "run")) == sorted(["checkpoint.json", first])
    model.token_embedding.weight.data += 1.0
    save_checkpoint(tmp_path / "run", model, None, {"step": 1})
    assert arrays_file() != first                                               # content-named
    assert sorted(os.listdir(tmp_path / "run")) == sorted(["checkpoint.json", arrays_file()])   # old one removed


def test_an_interrupted_save_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch):
    model = build_model(tiny_config(), 5)
    save_checkpoint(tmp_path, model, None, {"step": 0})
    saved = {name: value.copy() for name, value in model.state_dict().items()}
    model.token_embedding.weight.data += 1.0
    real_replace, calls = os.replace, []

    def replace_then_die(source, target):
        calls.append(target)
        if len(calls) > 1:
            raise KeyboardInterrupt("killed during save")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace_then_die)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, model, None, {"step": 1})
    monkeypatch.setattr(os, "replace", real_replace)
    fresh = build_model(tiny_config(), 5)
    assert load_checkpoint(tmp_path, fresh)["step"] == 0
    assert all(np.array_equal(fresh.state_dict()[name], value) for name, value in saved.items())
