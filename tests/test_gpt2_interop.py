"""GPT-2 interop: Hugging Face's GPT-2 and the project's GPT compute the same function.

A small randomly initialised `transformers` GPT-2 is built from a config (no
download); its weights are loaded into the NumPy GPT, and the logits and the
gradient of the loss with respect to every parameter must agree in float64 to
1e-9 relative. The name mapping itself is tested without PyTorch.
Skipped when PyTorch or transformers is missing (`pip install -e ".[parity]"`).
"""

import numpy as np
import pytest

from minitransformer import GPT, CrossEntropyLoss, from_gpt2_state_dict, rel_error, to_gpt2_state_dict
from minitransformer.interop.gpt2 import gpt2_to_project, project_to_gpt2

TOLERANCE = 1e-9


def _hf_shaped_state(rng, V=11, C=8, n_layers=2, d_ff=32, max_len=7):
    """A GPT-2 state dict of NumPy arrays with the Hugging Face names and shapes (no torch needed)."""
    state = {"transformer.wte.weight": rng.standard_normal((V, C)),
             "transformer.wpe.weight": rng.standard_normal((max_len, C)),
             "transformer.ln_f.weight": rng.standard_normal(C), "transformer.ln_f.bias": rng.standard_normal(C)}
    shapes = {"ln_1.weight": (C,), "ln_1.bias": (C,), "attn.c_attn.weight": (C, 3 * C), "attn.c_attn.bias": (3 * C,),
              "attn.c_proj.weight": (C, C), "attn.c_proj.bias": (C,), "ln_2.weight": (C,), "ln_2.bias": (C,),
              "mlp.c_fc.weight": (C, d_ff), "mlp.c_fc.bias": (d_ff,), "mlp.c_proj.weight": (d_ff, C),
              "mlp.c_proj.bias": (C,)}
    for i in range(n_layers):
        for suffix, shape in shapes.items():
            state[f"transformer.h.{i}.{suffix}"] = rng.standard_normal(shape)
    state["lm_head.weight"] = state["transformer.wte.weight"]
    return state


# ---------------------------------------------------------------- the mapping alone (always runs)
def test_round_trip_through_the_project_names_is_exact():
    state = _hf_shaped_state(np.random.default_rng(0))
    model = from_gpt2_state_dict(state, n_heads=2)
    back = to_gpt2_state_dict(model)
    assert sorted(back) == sorted(state)
    for name, value in state.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)


def test_fused_c_attn_splits_into_query_key_value_column_blocks():
    state = _hf_shaped_state(np.random.default_rng(1), C=6)
    c_attn = state["transformer.h.1.attn.c_attn.weight"]
    project = gpt2_to_project(state)
    np.testing.assert_array_equal(project["blocks.1.attn.w_q"], c_attn[:, :6])
    np.testing.assert_array_equal(project["blocks.1.attn.w_k"], c_attn[:, 6:12])
    np.testing.assert_array_equal(project["blocks.1.attn.w_v"], c_attn[:, 12:])
    np.testing.assert_array_equal(project["blocks.1.attn.b_v"], state["transformer.h.1.attn.c_attn.bias"][12:])


def test_sizes_come_from_the_weights():
    model = from_gpt2_state_dict(_hf_shaped_state(np.random.default_rng(2), V=13, C=8, n_layers=3, d_ff=20,
                                                      max_len=9), n_heads=4)
    assert (model.config["vocab_size"], model.config["d_model"], model.config["n_layers"], model.config["d_ff"],
            model.config["max_len"], model.config["n_heads"]) == (13, 8, 3, 20, 9, 4)


def test_old_checkpoint_names_and_mask_buffers_are_accepted():
    state = {name.removeprefix("transformer."): value for name, value in _hf_shaped_state(np.random.default_rng(3)).items()
             if name != "lm_head.weight"}
    state["h.0.attn.bias"] = np.tril(np.ones((1, 1, 7, 7)))          # the causal-mask buffer of older checkpoints
    state["h.0.attn.masked_bias"] = np.array(-1e4)
    model = from_gpt2_state_dict(state, n_heads=2)
    np.testing.assert_array_equal(model.token_embedding.weight.data, state["wte.weight"])


def test_bad_state_dicts_are_named():
    state = _hf_shaped_state(np.random.default_rng(4))
    with pytest.raises(KeyError, match="missing.*h.1.mlp.c_fc.bias"):
        gpt2_to_project({k: v for k, v in state.items() if k != "transformer.h.1.mlp.c_fc.bias"})
    with pytest.raises(ValueError, match="lm_head.weight differs"):
        gpt2_to_project(state | {"lm_head.weight": state["lm_head.weight"] + 1})
    with pytest.raises(ValueError, match="needs n_heads"):
        from_gpt2_state_dict(state)
    with pytest.raises(ValueError, match="activation_function"):
        from_gpt2_state_dict(state, config={"n_head": 2, "activation_function": "relu"})
    with pytest.raises(ValueError, match="tied output heads"):
        from_gpt2_state_dict(state, config={"n_head": 2, "tie_word_embeddings": False})
    with pytest.raises(ValueError, match="tie_weights"):
        to_gpt2_state_dict(GPT(11, 8, 2, 1, 32, 7, tie_weights=False, rng=0))


def test_config_sets_heads_and_layer_norm_eps():
    model = from_gpt2_state_dict(_hf_shaped_state(np.random.default_rng(5)),
                                     config={"n_head": 4, "layer_norm_epsilon": 1e-6})
    assert model.config["n_heads"] == 4
    assert {ln.eps for ln in [model.ln_f, model.blocks[1].ln2]} == {1e-6}


def test_float32_load_matches_float64_to_single_precision():
    state = {name: 0.3 * value for name, value in _hf_shaped_state(np.random.default_rng(7)).items()}
    ids = np.arange(14).reshape(2, 7) % 11
    exact = from_gpt2_state_dict(state, n_heads=2)(ids)
    single = from_gpt2_state_dict(state, n_heads=2, dtype=np.float32)(ids)
    assert single.dtype == np.float32          # GELU's float64 constant used to promote the whole model to float64
    assert rel_error(single, exact) < 1e-5


# ---------------------------------------------------------------- against transformers (optional)
def _hf_model(**overrides):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    settings = dict(vocab_size=37, n_positions=12, n_embd=16, n_layer=3, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                    attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    config = transformers.GPT2Config(**(settings | overrides))
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).double().eval()
    with torch.no_grad():                   # GPT-2 initialises biases and LayerNorms to 0 / 1: randomise them too
        for name, param in model.named_parameters():
            if param.ndim == 1:
                param.add_(0.1 * torch.randn_like(param))
    return torch, config, model


@pytest.mark.parametrize("overrides", [{}, {"n_inner": 24, "layer_norm_epsilon": 1e-3}], ids=["gpt2", "n_inner"])
def test_logits_and_every_gradient_match_transformers(overrides):
    torch, config, hf = _hf_model(**overrides)
    ours = from_gpt2_state_dict(hf.state_dict(), config=config)
    rng = np.random.default_rng(6)
    ids = rng.integers(0, config.vocab_size, size=(3, config.n_positions))
    targets = rng.integers(0, config.vocab_size, size=ids.shape)

    hf_logits = hf(torch.from_numpy(ids)).logits                        # (B, T, V)
    loss = torch.nn.functional.cross_entropy(hf_logits.reshape(-1, config.vocab_size), torch.from_numpy(targets).reshape(-1))
    loss.backward()

    criterion = CrossEntropyLoss()
    logits = ours(ids)
    assert rel_error(logits, hf_logits.detach().numpy()) < TOLERANCE
    assert abs(criterion(logits, targets) - loss.item()) < TOLERANCE * abs(loss.item())
    ours.zero_grad()
    ours.backward(criterion.backward())

    our_grads = project_to_gpt2({name: param.grad for name, param in ours.named_parameters()})
    hf_params = dict(hf.named_parameters())                             # lm_head.weight is wte: listed once
    assert len(hf_params) == len(our_grads) - 1
    for name, param in hf_params.items():
        error = rel_error(our_grads[name], param.grad.numpy())
        assert error < TOLERANCE, f"gradient of {name}: rel_error {error:.2e}"


def test_weights_written_back_load_into_transformers():
    torch, config, hf = _hf_model()
    ours = from_gpt2_state_dict(hf.state_dict(), config=config)
    for param in ours.parameters():
        param.data *= 1.5                                              # new weights, as after training
    _, _, fresh = _hf_model()
    fresh.load_state_dict({name: torch.from_numpy(value) for name, value in to_gpt2_state_dict(ours).items()})
    ids = np.arange(10).reshape(2, 5)
    assert rel_error(ours(ids), fresh(torch.from_numpy(ids)).logits.detach().numpy()) < TOLERANCE


def test_a_checkpoint_saved_on_disk_loads_as_the_readme_shows(tmp_path):
    """save_pretrained writes model.safetensors (without the tied lm_head) and config.json; load them back."""
    import json
    torch, _, hf = _hf_model()
    safetensors_numpy = pytest.importorskip("safetensors.numpy")      # installed with transformers
    hf.save_pretrained(tmp_path)
    model = from_gpt2_state_dict(safetensors_numpy.load_file(tmp_path / "model.safetensors"),
                                     config=json.loads((tmp_path / "config.json").read_text(encoding="utf-8")))
    ids = np.array([[3, 1, 4, 1, 5, 9, 2, 6]])
    logits = model(ids)                                                # (1, T, V)
    expected = hf(torch.from_numpy(ids)).logits.detach().numpy()
    assert rel_error(logits, expected) < TOLERANCE
    assert logits[0, -1].argmax() == expected[0, -1].argmax()          # the same greedy next token


def test_0_2_methods_are_gone_in_0_4():
    """0.2 spelled these GPT.from_gpt2_state_dict / model.to_gpt2_state_dict(); 0.3 kept them for one version."""
    assert not hasattr(GPT, "from_gpt2_state_dict") and not hasattr(GPT, "to_gpt2_state_dict")
