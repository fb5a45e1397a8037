"""The training loop, the data pipeline and the `train` / `sample` commands, on a tiny model."""

import doctest
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_checkpoint import TEXT, tiny_trainer

import minitransformer.training.checkpoint
import minitransformer.training.data
import minitransformer.training.harness
from minitransformer.__main__ import main
from minitransformer.tokenizers import CharTokenizer, make_tokenizer, tokenizer_from_config
from minitransformer.training.data import default_corpus, get_batch, train_val_split


def test_resumed_run_gives_the_same_losses_bit_for_bit(tmp_path):
    uninterrupted = tiny_trainer()
    uninterrupted.fit()
    first_half = tiny_trainer(out_dir=tmp_path)               # saves at step 3 (eval_interval)
    first_half.fit(max_steps=3)
    resumed = type(first_half).resume(tmp_path, first_half.train_data, first_half.val_data, progress=False)
    resumed.fit()
    assert resumed.history["loss"] == uninterrupted.history["loss"]          # exact float equality
    assert resumed.history["eval"] == uninterrupted.history["eval"]
    final = dict(uninterrupted.model.named_parameters())
    assert all(np.array_equal(p.data, final[n].data) for n, p in resumed.model.named_parameters())


@pytest.mark.parametrize("grad_clip", [0.05, 0.0])                    # 0.05: every step clips
def test_a_step_is_zero_grad_forward_backward_clip_and_adamw(grad_clip):
    """Trainer.step_on_next_batch runs the fast AdamW, which folds the clipping factor into its update; written out the
    plain way, with the gradients scaled in place and the plain AdamW, it must give the same weights to rounding."""
    from minitransformer.training.optim import clip_grad_norm

    trainer = tiny_trainer(dtype="float64", dropout=0.0, grad_clip=grad_clip)
    plain = tiny_trainer(dtype="float64", dropout=0.0, grad_clip=grad_clip, kernels="plain")
    assert type(trainer.optimizer).__name__ == "FastAdamW" and type(plain.optimizer).__name__ == "AdamW"
    data_rng = np.random.default_rng([plain.config.seed, 1])
    clipped = []
    for step in range(4):
        trainer.step_on_next_batch()
        plain.optimizer.lr = plain.config.learning_rate(step)
        x, y = get_batch(plain.train_data, 8, 4, data_rng)
        plain.optimizer.zero_grad()
        plain.loss_fn(plain.model(x), y)
        plain.model.backward(plain.loss_fn.backward())
        if grad_clip:
            clipped.append(clip_grad_norm(plain.model.parameters(), grad_clip) > grad_clip)
        plain.optimizer.step()
    assert all(clipped) if grad_clip else not clipped
    for (name, a), (_, b) in zip(trainer.model.named_parameters(), plain.model.named_parameters()):
        if name.endswith("attn.b_k"):        # softmax ignores a shift of a row's scores: d loss / d b_k is exactly 0,
            for side in (a, b):              # so both hold only rounding noise, whose bits depend on the BLAS kernel
                assert np.abs(side.data).max() < 1e-13, (name, np.abs(side.data).max())
            continue
        np.testing.assert_allclose(a.data, b.data, rtol=1e-12, atol=1e-15, err_msg=name)


def test_training_lowers_the_loss_and_draws_the_curve(tmp_path):
    trainer = tiny_trainer(out_dir=tmp_path, max_steps=40, lr_decay_steps=40, eval_interval=40, lr=1e-2, dropout=0.0)
    before = trainer.evaluate()["val"]
    after = trainer.fit()["val"]
    assert after < before - 0.5
    png = (tmp_path / "loss.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (700, 400)                 # IHDR: 7 x 4 inches at 100 dots per inch
    assert trainer.history["lr"][0] < trainer.history["lr"][2]               # warming up


def test_dropout_is_active_in_training_and_off_in_evaluation():
    trainer = tiny_trainer(dropout=0.1)
    x, _ = get_batch(trainer.train_data, 8, 2, 0)
    model = trainer.model
    train_a, train_b = model(x), model(x)
    assert not np.array_equal(train_a, train_b)                             # fresh masks each call
    model.eval()
    assert np.array_equal(model(x), model(x))
    model.train()
    evaluated = trainer.evaluate()
    assert model.training and set(evaluated) == {"train", "val"}


def test_evaluation_does_not_disturb_the_training_batches():
    a, b = tiny_trainer(), tiny_trainer()
    a.evaluate()
    assert a.step_on_next_batch() == b.step_on_next_batch()


def test_get_batch_windows_are_shifted_by_one_and_reproducible():
    data = np.arange(100)
    x, y = get_batch(data, 8, 5, np.random.default_rng(0))
    assert x.shape == y.shape == (5, 8)
    assert np.array_equal(y[:, :-1], x[:, 1:]) and np.array_equal(y[:, -1], x[:, -1] + 1)
    assert np.array_equal(x, get_batch(data, 8, 5, 0)[0])
    assert y.max() <= 99
    with pytest.raises(ValueError, match="at least block_size \\+ 1"):
        get_batch(np.arange(8), 8, 1, 0)


def test_split_is_90_10_in_order():
    train, val = train_val_split(np.arange(1000))
    assert len(train) == 900 and len(val) == 100 and train[-1] + 1 == val[0]


@given(st.text(min_size=1, max_size=50))
def test_char_tokenizer_round_trips(text):
    tokenizer = CharTokenizer.train(text)
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.vocab_size == len(set(text))


def test_char_tokenizer_errors_and_docstring():
    with pytest.raises(ValueError, match="'z' is not in the vocabulary"):
        CharTokenizer.train("abc").encode("abz")
    assert doctest.testmod(minitransformer.training.data).failed == 0


def test_default_corpus_is_cpython_help_text():
    text = default_corpus()
    assert len(text) > 300_000 and "assert" in text


def test_bpe_tokenizer_trains_round_trips_and_rebuilds_from_its_config():
    tokenizer = make_tokenizer("bpe", TEXT, 280)
    assert tokenizer.decode(tokenizer.encode(TEXT)) == TEXT
    again = tokenizer_from_config(tokenizer.to_config())                   # as checkpoints store it
    assert again.encode(TEXT) == tokenizer.encode(TEXT)


def test_train_and_sample_commands(tmp_path, capsys, monkeypatch):
    text_file = tmp_path / "text.txt"
    text_file.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "run"
    common = ["--text", str(text_file), "--out", str(out), "--block-size", "8", "--batch-size", "4", "--n-layers", "1",
              "--d-model", "16", "--d-ff", "32", "--eval-interval", "2", "--eval-batches", "1", "--no-progress",
              "--sample-tokens", "20", "--prompt", "the"]
    assert main(["train", "--max-steps", "4"] + common) == 0
    printed = capsys.readouterr().out
    assert "sample before training" in printed and "sample after training" in printed and "val loss" in printed
    hashed = []
    hash_file = minitransformer.training.checkpoint._sha256
    monkeypatch.setattr(minitransformer.training.checkpoint, "_sha256", lambda path: hashed.append(path) or hash_file(path))
    assert main(["train", "--max-steps", "6", "--resume"] + common + ["--eval-interval", "6"]) == 0   # last flag wins
    assert "resuming at step 4" in capsys.readouterr().out
    assert len(hashed) == 2                  # the checkpoint read once to resume, then hashed once to save at step 6
    assert main(["train", "--max-steps", "6", "--resume"] + common + ["--d-model", "32"]) == 2
    assert "different config: --d-model 32 (checkpoint: 16)" in capsys.readouterr().err
    assert main(["sample", "--checkpoint", str(out), "--prompt", "the quick", "--max-new-tokens", "12"]) == 0
    sample = capsys.readouterr().out
    assert sample.startswith("he quick") and len(sample.rstrip("\n")) == 8 + 12     # cropped to block_size 8
    assert main(["sample", "--checkpoint", str(tmp_path / "missing")]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_the_progress_bar_shows_the_loss_from_the_first_step(monkeypatch):
    import io

    import tqdm

    printed = io.StringIO()
    monkeypatch.setattr(tqdm, "tqdm", lambda *args, **kwargs: tqdm.std.tqdm(*args, file=printed, **kwargs))
    monkeypatch.setattr(minitransformer.training.harness, "is_terminal", lambda stream: True)   # as on a terminal
    trainer = tiny_trainer(eval_interval=100)
    trainer.options.progress = True
    trainer.fit(max_steps=3)
    frames = printed.getvalue().replace("\n", "\r").split("\r")
    first = [frame for frame in frames if " 1/3 " in frame]
    assert first and all("loss " in frame for frame in first), frames


def test_the_progress_bars_tokens_per_second_is_smoothed(monkeypatch):
    """Steps alternately taking 0.1 s and 0.8 s (a clock that the steps advance): the raw rate would jump
    8-fold from one step to the next; the bar shows tokens per second over the last steps instead."""
    import types

    import tqdm

    import minitransformer.training.harness as trainer_module

    shown = []

    class Recording(tqdm.std.tqdm):
        def set_postfix_str(self, s="", refresh=True):
            shown.append(s)
            super().set_postfix_str(s, refresh)

    now = [0.0]
    monkeypatch.setattr(tqdm, "tqdm", Recording)
    monkeypatch.setattr(trainer_module, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    trainer = tiny_trainer(eval_interval=100)                   # B x T = 4 x 8 = 32 tokens a step
    step = trainer.step_on_next_batch

    def timed_step():
        loss = step()
        now[0] += 0.1 if trainer.step % 2 else 0.8
        return loss
    trainer.step_on_next_batch = timed_step
    trainer.fit(max_steps=40)
    rates = [float(text.split("  ")[-1].replace(" tok/s", "").replace(",", "")) for text in shown]
    assert len(rates) == 40
    steady = rates[20:]                                         # once the window of 20 steps is full
    assert max(steady) / min(steady) < 1.05
    assert steady[-1] == pytest.approx(32 * 20 / (10 * 0.1 + 10 * 0.8), rel=0.02)   # 71 tok/s
    assert trainer_module.RATE_WINDOW == 20


def test_the_loss_plot_draws_evaluations_only_where_they_were_measured(tmp_path, monkeypatch):
    """Batch losses (every step) are a line; evaluations (every eval_interval steps) are markers alone: a line
    from the untrained evaluation at step 0 to the first one would draw losses never measured."""
    from matplotlib.axes import Axes

    drawn, plot = [], Axes.plot
    monkeypatch.setattr(Axes, "plot", lambda axes, *args, **kwargs: drawn.append((args, kwargs)) or plot(axes, *args,
                                                                                                          **kwargs))
    trainer = tiny_trainer(eval_interval=3)
    first = trainer.evaluate()
    trainer.history["eval"].append([0, first["train"], first["val"]])    # as the train command records it
    trainer.fit()
    trainer.plot(tmp_path / "loss.png")
    by_label = {kwargs["label"]: (args, kwargs) for args, kwargs in drawn}
    assert by_label["batch loss"][0][0] == list(range(1, 7))
    for label in ("validation", "train (2 batches)"):
        args, kwargs = by_label[label]
        assert list(args[0]) == [0, 3, 6]                               # the measured steps only
        fmt = args[2] if len(args) > 2 else ""
        assert "-" not in fmt and kwargs.get("linestyle", kwargs.get("ls")) in ("none", "None", "", " "), (
            f"{label} is drawn with a line between its measurements: {args[2:]}, {kwargs}")
    values = dict(zip(*by_label["validation"][0][:2]))
    assert values[0] == first["val"] and values[6] == trainer.history["eval"][-1][2]


@pytest.mark.parametrize("changes, message", [
    (dict(eval_interval=0), "TrainConfig.eval_interval must be a whole number >= 1, got 0"),
    (dict(eval_batches=0), "TrainConfig.eval_batches must be a whole number >= 1, got 0"),
    (dict(batch_size=0), "TrainConfig.batch_size must be a whole number >= 1, got 0"),
    (dict(max_steps=-1), "TrainConfig.max_steps must be a whole number >= 0, got -1"),
    (dict(block_size=100), "val_data has 100 tokens, fewer than one window of block_size \\+ 1 = 101"),
])
def test_a_trainer_refuses_a_config_it_cannot_run(changes, message, monkeypatch):
    """Found before the model is built (0.2: a ZeroDivisionError after the first step, NaN losses, ...)."""
    import minitransformer.objectives.language_model as trainer_module

    monkeypatch.setattr(trainer_module, "build_model", lambda *args: pytest.fail("a model was built"))
    with pytest.raises(ValueError, match=message):
        tiny_trainer(**changes)


# ---------------------------------------------------------------- perplexity beside the loss (issue 24)
def test_each_evaluation_prints_and_keeps_its_perplexity_in_the_history_and_the_checkpoint(tmp_path, capsys):
    """Perplexity = exp(mean NLL per token): every evaluation's row [step, train, val] of perplexities sits beside
    its row of losses, is written into the checkpoint, and is printed beside the loss."""
    import json
    import math
    import re

    trainer = tiny_trainer(out_dir=tmp_path)                           # evaluates at steps 3 and 6
    trainer.fit()
    assert [row[0] for row in trainer.history["perplexity"]] == [3, 6]
    for (step, train, val), row in zip(trainer.history["eval"], trainer.history["perplexity"], strict=True):
        assert row == [step, pytest.approx(math.exp(train), rel=1e-12), pytest.approx(math.exp(val), rel=1e-12)]
    assert json.loads((tmp_path / "checkpoint.json").read_text(encoding="utf-8"))["history"]["perplexity"] == \
        trainer.history["perplexity"]
    printed = re.findall(r"(train|val) loss ([\d.]+) \(perplexity ([\d.]+)\)", capsys.readouterr().out)
    assert len(printed) == 4
    for _, loss, ppl in printed:
        assert float(ppl) == pytest.approx(math.exp(float(loss)), abs=0.006)


def test_a_checkpoint_from_before_perplexity_resumes_with_its_perplexities_filled_in(tmp_path):
    import json
    import math

    trainer = tiny_trainer(out_dir=tmp_path)
    trainer.fit(max_steps=3)
    path = tmp_path / "checkpoint.json"
    meta = json.loads(path.read_text(encoding="utf-8"))
    del meta["history"]["perplexity"], meta["run"]                     # as 0.3 wrote it: format 1, no options
    meta["format_version"] = 1
    path.write_text(json.dumps(meta), encoding="utf-8")
    resumed = type(trainer).resume(tmp_path, trainer.train_data, trainer.val_data, out_dir=tmp_path, progress=False)
    [(step, train, val)] = resumed.history["eval"]
    assert resumed.history["perplexity"] == [[step, math.exp(train), math.exp(val)]]
    resumed.fit()
    assert [row[0] for row in resumed.history["perplexity"]] == [3, 6]
