"""The Llama-style GPT (models/gpt.py with LLAMA_STYLE): rotary positions, RMSNorm, SwiGLU, no biases.

* gradients: the catalogue's "GPT (Llama-style)" rows (logits, and logits + loss) against central
  differences (float64, 1e-7); each layer's own definition is pinned in its file (test_rmsnorm.py,
  test_swiglu.py, test_rope.py, and the whole block in test_block.py);
* structure: no bias, no beta and no position table anywhere; the parameter count by hand;
* generation: a cached decode gives the logits of a full forward;
* checkpoints: a Llama-style model round-trips and rebuilds from its saved config; loading it into a
  GPT-2-style model is refused naming the options that differ; a checkpoint written before the options
  existed loads into the model every 0.3 GPT was;
* bad input: unknown norm_layer or activation names GPT.
"""

import json

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases

from minitransformer import GPT, LLAMA_STYLE, GPTConfig, KVCache
from minitransformer.training.checkpoint import CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint

SIZES = dict(vocab_size=13, d_model=8, n_heads=2, n_layers=2, d_ff=12, max_len=10)


def llama(rng=0, **changes):
    return GPT(**{**SIZES, **LLAMA_STYLE, **changes}, rng=rng)


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("GPT (Llama-style)", "GPT (Llama-style) + loss"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- structure
def test_llama_style_is_the_papers_four_changes():
    """Touvron et al. 2023, §2.2: rotary positions, RMSNorm (pre-normalisation, the GPT's default placement),
    SwiGLU, and no biases; nothing else differs from the GPT-2-style model."""
    assert LLAMA_STYLE == dict(positional="rope", norm_layer="rmsnorm", activation="swiglu", bias=False)
    model = llama(n_layers=1)
    assert model.config["norm"] == "pre" and model.config["positional"] == "rope"
    ids = np.array([[1, 2, 3, 4, 5]])
    swapped = ids[:, [1, 0, 2, 3, 4]]       # one layer without positions reads the prefix as a set: same last logits
    assert not np.allclose(model(ids)[:, -1], model(swapped)[:, -1])            # rotary positions tell them apart
    unordered = llama(n_layers=1, positional="none")
    np.testing.assert_allclose(unordered(ids)[:, -1], unordered(swapped)[:, -1], rtol=1e-12)


def test_no_bias_no_beta_no_position_table_and_the_count_by_hand():
    model = llama()
    names = [name for name, _ in model.named_parameters()]
    assert not [name for name in names if name.endswith(("bias", "beta")) or ".b_" in name or "position" in name]
    V, C, L, d_ff = 13, 8, 2, 12
    per_block = 4 * C * C + 3 * C * d_ff + 2 * C           # attention, SwiGLU's three matrices, two gains
    assert model.num_parameters() == V * C + L * per_block + C   # tied embedding, blocks, final RMSNorm
    assert type(model.ln_f).__name__ == "RMSNorm" and type(model.blocks[0].ff).__name__ == "SwiGLU"


def test_config_dataclass_builds_the_keyword_model():
    built = GPT.from_config(GPTConfig(**SIZES, **LLAMA_STYLE), rng=3)
    direct = llama(rng=3)
    for name, value in direct.state_dict().items():
        np.testing.assert_array_equal(built.state_dict()[name], value, err_msg=name)
    gpt2 = GPT.from_config(GPTConfig(**SIZES), rng=3)             # without them, the config is GPT-2's
    assert type(gpt2.ln_f).__name__ == "LayerNorm" and {"blocks.0.attn.b_q", "blocks.0.ln1.beta"} <= set(
        dict(gpt2.named_parameters()))


# ---------------------------------------------------------------- generation
def test_cached_decoding_gives_the_full_forwards_logits():
    model = llama(rng=5)
    ids = np.random.default_rng(0).integers(0, 13, size=(2, 7))
    full = model(ids)
    cache = KVCache(len(model.blocks))
    steps = [model(ids[:, :4], cache=cache)] + [model(ids[:, t:t + 1], cache=cache) for t in range(4, 7)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip_and_rebuild_from_the_saved_config(tmp_path):
    model = llama(rng=1)
    save_checkpoint(tmp_path, model, None, {"step": 0})
    meta, _ = read_checkpoint(tmp_path)
    assert meta["model_config"]["norm_layer"] == "rmsnorm" and meta["model_config"]["bias"] is False
    rebuilt = GPT(**meta["model_config"], rng=99)              # other initial weights, then the saved ones
    load_checkpoint(tmp_path, rebuilt)
    ids = np.array([[1, 2, 3, 4]])
    np.testing.assert_array_equal(rebuilt(ids), model(ids))


def test_a_llama_checkpoint_does_not_load_into_a_gpt2_style_model(tmp_path):
    save_checkpoint(tmp_path, llama(), None, {"step": 0})
    with pytest.raises(CheckpointError, match=r"different model: .*activation: checkpoint 'swiglu', now 'gelu'.*"
                                              r"bias: checkpoint False, now True.*norm_layer: checkpoint 'rmsnorm'"):
        load_checkpoint(tmp_path, GPT(**SIZES, positional="rope", rng=0))


def test_a_checkpoint_from_before_the_options_loads_as_layernorm_with_biases(tmp_path):
    model = GPT(**SIZES, rng=2)
    save_checkpoint(tmp_path, model, None, {"step": 0})
    json_path = tmp_path / "checkpoint.json"
    document = json.loads(json_path.read_text(encoding="utf-8"))
    del document["model_config"]["norm_layer"], document["model_config"]["bias"]     # as 0.3 wrote it
    json_path.write_text(json.dumps(document), encoding="utf-8")
    load_checkpoint(tmp_path, GPT(**SIZES, rng=7))
    with pytest.raises(CheckpointError, match="norm_layer: checkpoint 'layernorm', now 'rmsnorm'"):
        load_checkpoint(tmp_path, GPT(**SIZES, norm_layer="rmsnorm", rng=7))


# ---------------------------------------------------------------- bad input
def test_unknown_norm_layer_or_activation_names_gpt():
    with pytest.raises(ValueError, match=r"GPT expected norm_layer in \['layernorm', 'rmsnorm'\], got 'RMSNorm'"):
        GPT(**SIZES, norm_layer="RMSNorm")
    with pytest.raises(ValueError, match=r"GPT expected activation in \['relu', 'gelu', 'swiglu'\], got 'silu'"):
        GPT(**SIZES, activation="silu")
