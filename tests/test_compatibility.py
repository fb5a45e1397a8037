"""Compatibility record: today's numbers (version 0.2.0), so that a refactor can prove it changed nothing.

What is recorded, in tests/fixtures/ (regenerate deliberately with
`PYTHONPATH=. python tests/fixtures/make_compatibility_fixtures.py [part ...]`; the tests never write them):

a. compat_state_dicts.json: the `state_dict` names, shapes and dtypes, in order, of tiny models
   (V 11, C 16, H 2, 2 layers, d_ff 32, max_len 12): GPT with each positional ("learned",
   "sinusoidal", "rope", "alibi", "none"), with n_kv_heads=1, window=4, tie_weights=False,
   norm="post", activation="relu", dropout 0.1; TransformerEncoder (two settings), BertMLM (with and
   without NSP), Seq2SeqTransformer (two settings) and GPTClassifier; each built in float64 and float32.
b. compat_weight_hashes.json: a SHA-256 of the initial weights of each of those models for seeds 0,
   1 and 1234 in float64 and float32 (name, dtype, shape and raw bytes of every parameter in
   state_dict order), plus each parameter's own hash (first 12 hex digits), so that a failure names
   the parameters that changed.
c. compat_train_losses.json: the first 20 training losses (and the final evaluation) of the trainer
   the `train` command builds (d_model 32, 2 layers, 2 heads, d_ff 128, block 16, batch 8, float32)
   on compat_corpus.txt, the first 12,000 characters of the default corpus (stored, because CPython's
   help topics differ between Python versions): one process and 2 data-parallel workers, each with
   dropout 0 (the command's default) and 0.1; the one-process run also through `train` itself.
d. checkpoint_0_2/: a checkpoint written by `Trainer.save` after 3 steps of a tiny GPT with a
   CharTokenizer; compat_checkpoint_outputs.json and compat_checkpoint_logits.npz: its parameters'
   hashes, its logits on a fixed batch, what greedy and seeded sampling produce, what the `sample`
   command prints, and the losses of 3 more steps after `Trainer.resume`.
e. compat_gpt2.npz: the logits of `from_gpt2_state_dict` (0.2: `GPT.from_gpt2_state_dict`) on a seeded random GPT-2-shaped
   state dict (no network, no torch); `to_gpt2_state_dict` must give the same dict back, exactly.
f. compat_forward_backward.npz (beyond a-e): for every model of (a) with seed 0, the outputs of one
   forward pass on fixed ids (float64 and float32) and, in float64, two numbers per parameter
   gradient of one backward pass (its sum of squares and its dot product with a fixed vector), so
   that a change to a hand-written forward or backward pass shows even when the weights do not.

Tolerances: hashes, names, shapes, dtypes, token ids and printed text exactly; float64 values to
1e-9 relative; float32 values to 1e-5 (forward outputs) or 1e-6 (losses, checkpoint logits), since
another BLAS, CPU or thread count rounds differently (see test_first_training_losses).

A deliberate change of any of these (e.g. the order in which weights are drawn, a new parameter
name, another split of the batch across workers) must regenerate the fixture and be listed in
CHANGELOG.md, with the reason.

The file imports top-level names of `minitransformer` only, apart from the few in `_internal()`
below, which is the one place to repoint if they move. (tests/fixtures/.gitignore re-includes the
.npz fixtures, which the top-level .gitignore would leave out of git.)
"""

import hashlib
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from minitransformer import (
    GPT,
    BertMLM,
    CharTokenizer,
    CrossEntropyLoss,
    FineTuningObjective,
    GPTClassifier,
    Seq2SeqTransformer,
    TrainConfig,
    Trainer,
    TransformerEncoder,
    from_gpt2_state_dict,
    generate,
    load_checkpoint,
    read_checkpoint,
    sample_text,
    to_gpt2_state_dict,
    train_val_split,
)


def _internal():
    """Names that are not exported at the top level today; repoint these imports if they move."""
    from minitransformer.__main__ import main  # the command line (`train`, `sample`)
    from minitransformer.tokenizers import tokenizer_from_config  # how `sample` rebuilds the tokenizer
    from minitransformer.training.config import build_model  # the model `train` / `sample` build
    return SimpleNamespace(main=main, tokenizer_from_config=tokenizer_from_config, build_model=build_model)


FIXTURES = Path(__file__).parent / "fixtures"
SEEDS = (0, 1, 1234)
DTYPES = ("float64", "float32")

# ==================================================================== a, b, f: the models and their weights
V, C, H, N_LAYERS, D_FF, MAX_LEN = 11, 16, 2, 2, 32, 12
V_TGT = 13                                           # Seq2SeqTransformer's target vocabulary when not shared
N_CLASSES = 3


def _gpt(**options):
    return lambda seed, dtype: GPT(V, C, H, N_LAYERS, D_FF, MAX_LEN, dtype=dtype, rng=seed, **options)


MODELS = {
    "gpt_learned": _gpt(positional="learned"),
    "gpt_sinusoidal": _gpt(positional="sinusoidal"),
    "gpt_rope": _gpt(positional="rope"),
    "gpt_alibi": _gpt(positional="alibi"),
    "gpt_none": _gpt(positional="none"),
    "gpt_kv_heads_1": _gpt(n_kv_heads=1),
    "gpt_window_4": _gpt(window=4),
    "gpt_untied": _gpt(tie_weights=False),
    "gpt_post_norm": _gpt(norm="post"),
    "gpt_relu": _gpt(activation="relu"),
    "gpt_dropout": _gpt(dropout=0.1),
    "encoder": lambda seed, dtype: TransformerEncoder(V, C, H, N_LAYERS, D_FF, MAX_LEN, dtype=dtype, rng=seed),
    "encoder_pre_learned_pad_dropout": lambda seed, dtype: TransformerEncoder(
        V, C, H, N_LAYERS, D_FF, MAX_LEN, pad_id=0, norm="pre", positional="learned", dropout=0.1,
        activation="gelu", dtype=dtype, rng=seed),
    "bert": lambda seed, dtype: BertMLM(V, C, H, N_LAYERS, D_FF, MAX_LEN, dtype=dtype, rng=seed),
    "bert_nsp": lambda seed, dtype: BertMLM(V, C, H, N_LAYERS, D_FF, MAX_LEN, nsp=True, dtype=dtype, rng=seed),
    "seq2seq": lambda seed, dtype: Seq2SeqTransformer(V, V_TGT, C, H, N_LAYERS, D_FF, MAX_LEN, dtype=dtype, rng=seed),
    "seq2seq_pre_shared_tied_pad": lambda seed, dtype: Seq2SeqTransformer(
        V, V, C, H, N_LAYERS, D_FF, MAX_LEN, pad_id=0, norm="pre", share_embeddings=True, tie_output=True,
        dtype=dtype, rng=seed),
    # the classifier head's generator is seed + 1000, so that its draws are not the GPT's first ones again
    "gpt_classifier": lambda seed, dtype: GPTClassifier(GPT(V, C, H, N_LAYERS, D_FF, MAX_LEN, dtype=dtype, rng=seed),
                                                        N_CLASSES, dtype=dtype, rng=seed + 1000),
}

HASH_CASES = [f"{name}/{dtype}/seed{seed}" for name in MODELS for dtype in DTYPES for seed in SEEDS]


def build(case):
    """'gpt_rope/float32/seed1' -> the freshly initialised model."""
    name, dtype, seed = case.split("/")
    return MODELS[name](int(seed.removeprefix("seed")), np.dtype(dtype))


def _feed(digest, name, value):
    value = np.asarray(value)
    digest.update(f"{name}\0{value.dtype.name}\0{tuple(value.shape)}\0".encode())
    digest.update(np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes())


def parameter_hashes(state):
    """{"sha256": SHA-256 over every (name, dtype, shape, bytes) in state order,
    "parameters": [first 12 hex digits of each parameter's own SHA-256, in state order]}."""
    total = hashlib.sha256()
    each = []
    for name, value in state.items():
        _feed(total, name, value)
        one = hashlib.sha256()
        _feed(one, name, value)
        each.append(one.hexdigest()[:12])
    return {"sha256": total.hexdigest(), "parameters": each}


def changed_parameters(state, got, expected):
    """The names of the parameters whose hashes differ (state order), or None if the count differs."""
    if len(got["parameters"]) != len(expected["parameters"]):
        return None
    return [name for name, now, was in zip(state, got["parameters"], expected["parameters"]) if now != was]


def state_layout(model):
    """[[name, shape, dtype], ...] in state_dict order."""
    return [[name, list(value.shape), value.dtype.name] for name, value in model.state_dict().items()]


def record_state_dicts():
    """{model: {"parameters": [[name, shape], ...], "dtypes": {built as: the dtype of every parameter}}}."""
    record = {}
    for name in MODELS:
        layouts = {dtype: state_layout(MODELS[name](0, np.dtype(dtype))) for dtype in DTYPES}
        dtypes = {}
        for dtype, layout in layouts.items():
            assert [entry[:2] for entry in layout] == [entry[:2] for entry in layouts[DTYPES[0]]]
            found = sorted({entry[2] for entry in layout})
            dtypes[dtype] = found[0] if len(found) == 1 else [entry[2] for entry in layout]
        record[name] = {"parameters": [entry[:2] for entry in layouts[DTYPES[0]]], "dtypes": dtypes}
    return record


def record_weight_hashes():
    return {case: parameter_hashes(build(case).state_dict()) for case in HASH_CASES}


def _inputs():
    """Fixed ids (2, 7); the second row ends in two 0s, the pad id of the models that have one."""
    ids = np.random.default_rng(2024).integers(1, V, size=(2, 7))
    ids[1, -2:] = 0
    return ids


def _projection(size):
    return np.cos(0.7 * np.arange(size) + 0.3)            # a fixed vector, no generator needed


def exercise(name, model):
    """One forward pass on fixed inputs (training mode, as built), and in float64 one backward pass.

    Returns (outputs: list of arrays, gradient fingerprint (P, 2) [sum g^2, g . fixed vector] or None)."""
    ids = _inputs()
    rng = np.random.default_rng(7)
    if isinstance(model, GPTClassifier):
        objective = FineTuningObjective(model, lm_weight=0.5)
        objective(ids, rng.integers(0, N_CLASSES, size=len(ids)))
        outputs = list(model.forward(ids))             # the same forward again (no dropout): caches unchanged
        backward = objective.backward
    elif isinstance(model, GPT):
        loss = CrossEntropyLoss()
        outputs = [model(ids)]
        loss(outputs[0], rng.integers(0, V, size=ids.shape))
        backward = lambda: model.backward(loss.backward())
    elif isinstance(model, BertMLM):
        mlm, nsp = CrossEntropyLoss(ignore_index=-1), CrossEntropyLoss()
        out = model(ids)
        outputs = list(out) if isinstance(out, tuple) else [out]
        targets = np.where(rng.random(ids.shape) < 0.5, rng.integers(0, V, size=ids.shape), -1)
        targets[0, 0] = 3                                                                  # never all ignored
        mlm(outputs[0], targets)
        if len(outputs) == 2:
            nsp(outputs[1], rng.integers(0, 2, size=len(ids)))
            backward = lambda: model.backward((mlm.backward(), nsp.backward()))
        else:
            backward = lambda: model.backward(mlm.backward())
    elif isinstance(model, Seq2SeqTransformer):
        loss = CrossEntropyLoss()
        tgt = ids[::-1, 1:].copy()                                                          # (2, 6)
        outputs = [model(ids, tgt)]
        loss(outputs[0], rng.integers(0, model.tgt_vocab_size, size=tgt.shape))
        backward = lambda: model.backward(loss.backward())
    elif isinstance(model, TransformerEncoder):
        outputs = [model(ids)]
        upstream = np.sin(np.arange(outputs[0].size)).reshape(outputs[0].shape).astype(outputs[0].dtype)
        backward = lambda: model.backward(upstream)
    else:
        raise TypeError(f"exercise: no recipe for {name} ({type(model).__name__})")
    if outputs[0].dtype != np.float64:
        return outputs, None
    model.zero_grad()
    backward()
    fingerprint = [[float(np.vdot(p.grad, p.grad)), float(np.vdot(p.grad.ravel(), _projection(p.size)))]
                   for p in model.parameters()]
    return outputs, np.array(fingerprint)


def record_forward_backward():
    arrays = {}
    for name in MODELS:
        for dtype in DTYPES:
            outputs, fingerprint = exercise(name, MODELS[name](0, np.dtype(dtype)))
            for index, output in enumerate(outputs):
                arrays[f"{name}/{dtype}/out{index}"] = output
            if fingerprint is not None:
                arrays[f"{name}/{dtype}/grad"] = fingerprint
    return arrays


# ==================================================================== c: the `train` command's first 20 losses
TRAIN_STEPS = 20


def train_config(workers, dropout):
    """The TrainConfig `train --max-steps 20 --block-size 16 --batch-size 8 --n-layers 2 --n-heads 2
    --d-model 32 --d-ff 128 --eval-batches 2 [--dropout 0.1] [--workers 2]` builds (commands/train.py
    `_config_from_args`: a warmup as long as the run becomes max_steps // 10, the decay ends at max_steps)."""
    return TrainConfig(block_size=16, batch_size=8, n_layers=2, n_heads=2, d_model=32, d_ff=128, dropout=dropout,
                       max_steps=TRAIN_STEPS, warmup_steps=TRAIN_STEPS // 10, lr_decay_steps=TRAIN_STEPS,
                       eval_batches=2, workers=workers)


TRAIN_SETTINGS = {"workers1": dict(workers=1, dropout=0.0), "workers2": dict(workers=2, dropout=0.0),
                  "workers1_dropout": dict(workers=1, dropout=0.1), "workers2_dropout": dict(workers=2, dropout=0.1)}


def corpus_data():
    """As `train` does with --text: a CharTokenizer trained on the text, encoded, split 90 / 10."""
    text = (FIXTURES / "compat_corpus.txt").read_text(encoding="utf-8")
    tokenizer = CharTokenizer.train(text)
    return tokenizer, train_val_split(np.array(tokenizer.encode(text), dtype=np.int64))


def run_training(setting):
    """{"loss": the 20 training losses, "eval": the final evaluation [step, train, val]} of `fit()`."""
    tokenizer, (train_data, val_data) = corpus_data()
    with Trainer(train_config(**TRAIN_SETTINGS[setting]), train_data, val_data, tokenizer.vocab_size,
                 tokenizer_config=tokenizer.to_config(), progress=False) as trainer:
        trainer.fit()
    return {"loss": trainer.history["loss"], "eval": trainer.history["eval"]}


def machine():
    """Where the numbers come from: Python, NumPy and the BLAS (its kernels and threads change the rounding)."""
    import platform

    from threadpoolctl import threadpool_info
    return {"python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine(),
            "blas": [{key: info.get(key) for key in ("internal_api", "version", "architecture", "num_threads")}
                     for info in threadpool_info() if info.get("user_api") == "blas"]}


def record_train_losses():
    record = {setting: run_training(setting) for setting in TRAIN_SETTINGS}
    record["recorded_with"] = machine()
    return record


# ==================================================================== d: a checkpoint written by 0.2
CHECKPOINT = FIXTURES / "checkpoint_0_2"
CHECKPOINT_TEXT = ("It was the best of times, it was the worst of times,\nit was the age of wisdom, "
                   "it was the age of foolishness.\n") * 8
CHECKPOINT_PROMPT = "it was the "
CHECKPOINT_STEPS, RESUMED_STEPS, NEW_TOKENS = 3, 3, 10
CLI_SAMPLES = {"greedy": ["--temperature", "0"], "seeded": ["--temperature", "0.8", "--top-k", "5", "--seed", "3"]}


def checkpoint_config():
    return TrainConfig(block_size=8, batch_size=4, n_layers=2, n_heads=2, d_model=16, d_ff=32, dropout=0.1,
                       max_steps=6, warmup_steps=2, lr_decay_steps=6, eval_interval=3, eval_batches=2, seed=5)


def checkpoint_data():
    tokenizer = CharTokenizer.train(CHECKPOINT_TEXT)
    return tokenizer, train_val_split(np.array(tokenizer.encode(CHECKPOINT_TEXT), dtype=np.int64))


def checkpoint_ids(vocab_size):
    return np.random.default_rng(11).integers(0, vocab_size, size=(2, 8))


def checkpoint_observations(model, tokenizer):
    """What a loaded checkpoint's model is compared on: logits, parameter hashes, generated ids and text."""
    with model.evaluating():
        logits = model(checkpoint_ids(tokenizer.vocab_size))
    prompt = np.array(tokenizer.encode(CHECKPOINT_PROMPT))
    return {"logits": logits,
            "parameters": parameter_hashes(model.state_dict()),
            "greedy_ids": generate(model, prompt, NEW_TOKENS, temperature=0).tolist(),
            "sampled_ids": generate(model, prompt, NEW_TOKENS, temperature=0.8, top_k=5, rng=3).tolist(),
            "greedy_text": sample_text(model, tokenizer, CHECKPOINT_PROMPT, NEW_TOKENS, temperature=0)}


def cli_sample(directory, which):
    """The `sample` command line for the checkpoint in `directory` (greedy or seeded)."""
    return ["sample", "--checkpoint", str(directory), "--prompt", CHECKPOINT_PROMPT,
            "--max-new-tokens", str(NEW_TOKENS)] + CLI_SAMPLES[which]


def write_checkpoint_fixture(directory):
    """Train 3 steps, save with `Trainer.save`; return the observations of that model, and the losses of the
    3 steps the same trainer takes after saving (what a resumed run must give, bit for bit)."""
    tokenizer, (train_data, val_data) = checkpoint_data()
    trainer = Trainer(checkpoint_config(), train_data, val_data, tokenizer.vocab_size,
                      tokenizer_config=tokenizer.to_config(), progress=False)
    for _ in range(CHECKPOINT_STEPS):
        trainer.step_on_next_batch()
    trainer.save(directory)
    observed = checkpoint_observations(trainer.model, tokenizer)
    observed["trained_losses"] = list(trainer.history["loss"])
    observed["resumed_losses"] = [trainer.step_on_next_batch() for _ in range(RESUMED_STEPS)]
    return observed


# ==================================================================== e: GPT-2 import
GPT2 = dict(V=11, C=16, n_heads=2, n_layers=2, d_ff=64, max_len=12)


def gpt2_state():
    """A Hugging Face GPT-2 state dict of NumPy arrays (names and shapes), seeded, weights scaled by 0.3."""
    rng = np.random.default_rng(20190214)
    V_, C_, F_, T_ = GPT2["V"], GPT2["C"], GPT2["d_ff"], GPT2["max_len"]
    state = {"transformer.wte.weight": (V_, C_), "transformer.wpe.weight": (T_, C_),
             "transformer.ln_f.weight": (C_,), "transformer.ln_f.bias": (C_,)}
    shapes = {"ln_1.weight": (C_,), "ln_1.bias": (C_,), "attn.c_attn.weight": (C_, 3 * C_),
              "attn.c_attn.bias": (3 * C_,), "attn.c_proj.weight": (C_, C_), "attn.c_proj.bias": (C_,),
              "ln_2.weight": (C_,), "ln_2.bias": (C_,), "mlp.c_fc.weight": (C_, F_), "mlp.c_fc.bias": (F_,),
              "mlp.c_proj.weight": (F_, C_), "mlp.c_proj.bias": (C_,)}
    for i in range(GPT2["n_layers"]):
        state.update({f"transformer.h.{i}.{suffix}": shape for suffix, shape in shapes.items()})
    state = {name: 0.3 * rng.standard_normal(shape) for name, shape in state.items()}
    state["lm_head.weight"] = state["transformer.wte.weight"]
    return state


def gpt2_ids():
    return np.random.default_rng(5).integers(0, GPT2["V"], size=(2, GPT2["max_len"]))


def gpt2_logits():
    return from_gpt2_state_dict(gpt2_state(), n_heads=GPT2["n_heads"])(gpt2_ids())


# ==================================================================== the tests
def _load_json(name):
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def _load_npz(name):
    with np.load(FIXTURES / name, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


@pytest.fixture(scope="module")
def recorded_layouts():
    return _load_json("compat_state_dicts.json")


@pytest.fixture(scope="module")
def recorded_hashes():
    return _load_json("compat_weight_hashes.json")


@pytest.fixture(scope="module")
def recorded_forward_backward():
    return _load_npz("compat_forward_backward.npz")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MODELS))
def test_state_dict_names_shapes_and_dtypes(name, dtype, recorded_layouts):
    recorded = recorded_layouts[name]
    dtypes = recorded["dtypes"][dtype]
    expected = [[*entry, dtypes if isinstance(dtypes, str) else dtypes[index]]
                for index, entry in enumerate(recorded["parameters"])]
    got = state_layout(MODELS[name](0, np.dtype(dtype)))
    if got != expected:
        lines = [f"{name}/{dtype}: state_dict layout changed (recorded {len(expected)} entries, now {len(got)})"]
        for index in range(max(len(got), len(expected))):
            was = expected[index] if index < len(expected) else None
            now = got[index] if index < len(got) else None
            if was != now:
                lines.append(f"  first difference at entry {index}: recorded {was}, now {now}")
                break
        missing = sorted({e[0] for e in expected} - {g[0] for g in got})
        added = sorted({g[0] for g in got} - {e[0] for e in expected})
        lines.append(f"  names missing now: {missing}; names new now: {added}")
        pytest.fail("\n".join(lines))


@pytest.mark.parametrize("case", HASH_CASES)
def test_initial_weights_are_bit_identical(case, recorded_hashes):
    expected = recorded_hashes[case]
    state = build(case).state_dict()
    got = parameter_hashes(state)
    if got["sha256"] == expected["sha256"]:
        return
    changed = changed_parameters(state, got, expected)
    if changed is None:
        pytest.fail(f"{case}: the initial weights changed: {len(state)} parameters, recorded "
                    f"{len(expected['parameters'])} (see test_state_dict_names_shapes_and_dtypes)")
    pytest.fail(f"{case}: the initial weights changed; first differing parameter: {changed[0]} "
                f"({len(changed)} of {len(state)} differ: {changed})" if changed else
                f"{case}: the initial weights changed, though each parameter's hash is as recorded: "
                "parameter names or their order changed")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MODELS))
def test_forward_and_backward_on_fixed_inputs(name, dtype, recorded_forward_backward):
    """float64: outputs to 1e-9 relative, gradient fingerprints likewise; float32: outputs to 1e-5
    (faster code may round differently) and the output dtype exactly."""
    recorded = recorded_forward_backward
    outputs, fingerprint = exercise(name, MODELS[name](0, np.dtype(dtype)))
    n_outputs = sum(1 for key in recorded if key.startswith(f"{name}/{dtype}/out"))
    assert len(outputs) == n_outputs, f"{name}/{dtype}: {len(outputs)} outputs, recorded {n_outputs}"
    rtol = 1e-9 if dtype == "float64" else 1e-5
    for index, output in enumerate(outputs):
        expected = recorded[f"{name}/{dtype}/out{index}"]
        assert output.dtype == expected.dtype, f"{name}/{dtype}: output {index} is {output.dtype}, was {expected.dtype}"
        np.testing.assert_allclose(output, expected, rtol=rtol, atol=rtol * np.abs(expected).max(),
                                   err_msg=f"{name}/{dtype}: forward output {index} changed")
    if fingerprint is None:
        return
    expected = recorded[f"{name}/{dtype}/grad"]
    parameters = MODELS[name](0, np.dtype(dtype)).named_parameters()
    assert fingerprint.shape == expected.shape, \
        f"{name}/{dtype}: {len(fingerprint)} gradients, recorded {len(expected)}"
    noise = 1e-20 * expected[:, 0].max()       # a gradient zero in exact arithmetic (attention's b_k) is rounding noise
    for (parameter_name, parameter), (squares, dot), (was_squares, was_dot) in zip(parameters, fingerprint, expected):
        if was_squares <= noise:
            assert squares <= noise, f"{name}/{dtype}: the gradient of {parameter_name} was zero up to rounding, " \
                                     f"now its sum of squares is {float(squares)!r}"
            continue
        scale = np.sqrt(was_squares) * np.linalg.norm(_projection(parameter.size))    # >= |g . v| (Cauchy-Schwarz)
        if abs(squares - was_squares) > 1e-9 * was_squares or abs(dot - was_dot) > 1e-9 * scale:
            pytest.fail(f"{name}/{dtype}: the gradient of {parameter_name} changed: sum of squares {float(squares)!r} "
                        f"(recorded {float(was_squares)!r}), projection {float(dot)!r} (recorded {float(was_dot)!r})")


def _first_difference(got, expected, rtol):
    for step, (a, b) in enumerate(zip(got, expected), start=1):
        if not np.isclose(a, b, rtol=rtol, atol=0):
            return f"first differing step: {step} (now {a!r}, recorded {b!r})"
    return "lengths differ" if len(got) != len(expected) else "none"


@pytest.mark.parametrize("setting", list(TRAIN_SETTINGS))
def test_first_training_losses(setting):
    """rtol 1e-6, float32. On the machine that recorded them the losses repeat bit for bit, run after run
    and under load; but the rounding depends on the BLAS: on that machine OpenBLAS with 1 thread instead
    of its default 2 already moves the one-process losses by ~6e-8 relative (the workers always use 1
    thread), and another CPU, BLAS build or NumPy can do the same. A real change of behaviour moves them
    far more (a 1 % change of the learning rate from step 6 on: 8e-5 at step 7)."""
    if TRAIN_SETTINGS[setting]["workers"] > 1:
        pytest.skip("data parallelism runs under mpiexec: tests/test_distributed.py compares 2 ranks with this record")
    recorded = _load_json("compat_train_losses.json")
    expected = recorded[setting]
    got = run_training(setting)
    where = f"(recorded with {recorded.get('recorded_with')}, now {machine()})"
    assert len(got["loss"]) == TRAIN_STEPS
    np.testing.assert_allclose(got["loss"], expected["loss"], rtol=1e-6, atol=0,
                               err_msg=f"{setting}: {_first_difference(got['loss'], expected['loss'], 1e-6)} {where}")
    assert [row[0] for row in got["eval"]] == [row[0] for row in expected["eval"]]
    np.testing.assert_allclose(np.array(got["eval"])[:, 1:], np.array(expected["eval"])[:, 1:], rtol=1e-6, atol=0,
                               err_msg=f"{setting}: the final evaluation losses changed {where}")


def test_train_command_gives_the_recorded_losses(tmp_path, capsys):
    """The `train` command itself (it also evaluates and samples before training, which must not disturb
    the batches); its checkpoint's history holds the losses."""
    expected = _load_json("compat_train_losses.json")["workers1"]
    out = tmp_path / "run"
    argv = ["train", "--text", str(FIXTURES / "compat_corpus.txt"), "--max-steps", str(TRAIN_STEPS),
            "--block-size", "16", "--batch-size", "8", "--n-layers", "2", "--n-heads", "2", "--d-model", "32",
            "--d-ff", "128", "--eval-batches", "2", "--sample-tokens", "5", "--no-progress", "--out", str(out)]
    assert _internal().main(argv) == 0
    capsys.readouterr()
    history = read_checkpoint(out)[0]["history"]
    np.testing.assert_allclose(history["loss"], expected["loss"], rtol=1e-6, atol=0,
                               err_msg=f"train: {_first_difference(history['loss'], expected['loss'], 1e-6)}")
    np.testing.assert_allclose(history["eval"][-1], expected["eval"][-1], rtol=1e-6, atol=0)


@pytest.fixture()
def checkpoint_copy(tmp_path):
    """The 0.2 checkpoint, copied so that no loader can write into the fixture."""
    target = tmp_path / "checkpoint_0_2"
    shutil.copytree(CHECKPOINT, target)
    return target


@pytest.fixture(scope="module")
def recorded_checkpoint():
    recorded = _load_json("compat_checkpoint_outputs.json")
    recorded["logits"] = _load_npz("compat_checkpoint_logits.npz")["logits"]
    return recorded


def _compare_observations(model, got, expected, how):
    changed = changed_parameters(model.state_dict(), got["parameters"], expected["parameters"])
    assert got["parameters"]["sha256"] == expected["parameters"]["sha256"], (
        f"{how}: the loaded parameters differ from the saved ones: {changed}")
    assert got["logits"].dtype == expected["logits"].dtype, f"{how}: logits are {got['logits'].dtype}"
    np.testing.assert_allclose(got["logits"], expected["logits"], rtol=1e-6,
                               atol=1e-6 * np.abs(expected["logits"]).max(), err_msg=f"{how}: logits changed")
    for key in ("greedy_ids", "sampled_ids", "greedy_text"):
        assert got[key] == expected[key], f"{how}: {key} changed: now {got[key]!r}, recorded {expected[key]!r}"


def test_checkpoint_0_2_loads_as_sample_loads_it(checkpoint_copy, recorded_checkpoint):
    """commands/sample.py: read_checkpoint, the tokenizer from its config, build_model from the train
    config, load_checkpoint without an optimizer."""
    internal = _internal()
    meta, _ = read_checkpoint(checkpoint_copy)
    tokenizer = internal.tokenizer_from_config(meta["tokenizer"])
    assert isinstance(tokenizer, CharTokenizer)
    model = internal.build_model(TrainConfig(**meta["train_config"]), meta["model_config"]["vocab_size"])
    load_checkpoint(checkpoint_copy, model)
    _compare_observations(model, checkpoint_observations(model, tokenizer), recorded_checkpoint, "load_checkpoint")


def test_checkpoint_0_2_resumes_and_trains_on_exactly(checkpoint_copy, recorded_checkpoint):
    tokenizer, (train_data, val_data) = checkpoint_data()
    trainer = Trainer.resume(checkpoint_copy, train_data, val_data, progress=False)
    assert trainer.step == CHECKPOINT_STEPS
    assert trainer.history["loss"] == recorded_checkpoint["trained_losses"]
    assert trainer.tokenizer_config == tokenizer.to_config()
    _compare_observations(trainer.model, checkpoint_observations(trainer.model, tokenizer), recorded_checkpoint,
                          "Trainer.resume")
    losses = [trainer.step_on_next_batch() for _ in range(RESUMED_STEPS)]
    expected = recorded_checkpoint["resumed_losses"]
    np.testing.assert_allclose(losses, expected, rtol=1e-6, atol=0,
                               err_msg=f"resumed training: {_first_difference(losses, expected, 1e-6)}")


@pytest.mark.parametrize("which", list(CLI_SAMPLES))
def test_checkpoint_0_2_sample_command(which, checkpoint_copy, recorded_checkpoint, capsys):
    assert _internal().main(cli_sample(checkpoint_copy, which)) == 0
    printed = capsys.readouterr().out
    assert printed == recorded_checkpoint["cli"][which], (
        f"`sample` ({which}) printed {printed!r}, recorded {recorded_checkpoint['cli'][which]!r}")


def test_gpt2_import_logits_and_round_trip():
    recorded = _load_npz("compat_gpt2.npz")
    state = gpt2_state()
    model = from_gpt2_state_dict(state, n_heads=GPT2["n_heads"])
    assert {key: model.config[key] for key in ("vocab_size", "d_model", "n_layers", "d_ff", "max_len", "n_heads")} == \
        dict(vocab_size=GPT2["V"], d_model=GPT2["C"], n_layers=GPT2["n_layers"], d_ff=GPT2["d_ff"],
             max_len=GPT2["max_len"], n_heads=GPT2["n_heads"])
    np.testing.assert_array_equal(gpt2_ids(), recorded["ids"], err_msg="the seeded ids changed (NumPy?)")
    logits = model(gpt2_ids())
    assert logits.dtype == np.float64
    np.testing.assert_allclose(logits, recorded["logits"], rtol=1e-9, atol=1e-9 * np.abs(recorded["logits"]).max(),
                               err_msg="GPT-2 import: logits changed")
    back = to_gpt2_state_dict(model)
    assert list(back) == list(recorded["round_trip_names"]), "to_gpt2_state_dict: names or their order changed"
    assert sorted(back) == sorted(state)
    for name, value in state.items():
        np.testing.assert_array_equal(back[name], value, err_msg=f"to_gpt2_state_dict: {name} does not round-trip")
        assert back[name].dtype == value.dtype, name
