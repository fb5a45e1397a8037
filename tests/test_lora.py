"""LoRA: starts as the base layer, trains only A and B, merges exactly, fine-tunes a GPT."""

import numpy as np
import pytest
from _variants_training import lm_loss, train

from minitransformer import GPT, Linear, LoRALinear, add_lora


def _lora(r=2, alpha=6, seed=0):
    rng = np.random.default_rng(seed)
    base = Linear(5, 4, rng=rng)
    base.bias.data[...] = rng.standard_normal(4)
    return LoRALinear(base, r, alpha=alpha, rng=rng), rng


def test_starts_as_the_base_layer_with_scale_alpha_over_r():
    layer, rng = _lora(r=2, alpha=6)
    assert layer.scale == 3.0
    assert layer.lora_a.shape == (5, 2) and layer.lora_b.shape == (2, 4)
    assert np.all(layer.lora_b.data == 0) and np.any(layer.lora_a.data != 0)
    x = rng.standard_normal((3, 5))
    np.testing.assert_allclose(layer(x), layer.base(x), atol=1e-15)


def test_only_a_and_b_receive_gradients():
    layer, rng = _lora()
    assert [name for name, _ in layer.named_parameters()] == ["lora_a", "lora_b"]
    assert set(layer.state_dict()) == {"lora_a", "lora_b"}
    x = rng.standard_normal((2, 3, 5))
    layer.backward(rng.standard_normal(layer(x).shape))
    assert np.all(layer.base.weight.grad == 0) and np.all(layer.base.bias.grad == 0)
    assert np.all(layer.lora_a.grad == 0)          # B = 0 at the start: A's gradient s x^T g B^T vanishes
    assert np.any(layer.lora_b.grad != 0)


def test_merging_gives_identical_outputs():
    layer, rng = _lora()
    layer.lora_b.data[...] = rng.standard_normal((2, 4))
    x = rng.standard_normal((2, 3, 5))
    merged = layer.merged()
    assert isinstance(merged, Linear)
    np.testing.assert_allclose(merged(x), layer(x), atol=1e-12)
    assert not np.allclose(layer(x), layer.base(x))


def test_reparametrised_form_matches_the_explicit_form():
    """add_lora around a Linear (W = W0 + s A B) and LoRALinear (x A B) agree in outputs and gradients."""
    layer, rng = _lora()
    layer.lora_b.data[...] = rng.standard_normal((2, 4))
    twin = Linear(5, 4)                                   # the same W0, b0 in a separate layer
    twin.load_state_dict(layer.base.state_dict())
    wrapped = add_lora(twin, r=2, alpha=6, targets=("weight",), rng=1)
    (adapter,) = wrapped.adapters
    adapter.lora_a.data[...] = layer.lora_a.data
    adapter.lora_b.data[...] = layer.lora_b.data
    x, dout = rng.standard_normal((6, 5)), rng.standard_normal((6, 4))
    np.testing.assert_allclose(wrapped(x), layer(x), atol=1e-12)
    np.testing.assert_allclose(wrapped.backward(dout), layer.backward(dout), atol=1e-12)
    np.testing.assert_allclose(adapter.lora_a.grad, layer.lora_a.grad, atol=1e-12)
    np.testing.assert_allclose(adapter.lora_b.grad, layer.lora_b.grad, atol=1e-12)
    assert np.all(layer.base.weight.grad == 0)


def test_bad_rank_and_base_are_named():
    with pytest.raises(ValueError, match=r"rank 1 <= r <= min\(5, 4\), got r=5"):
        LoRALinear(Linear(5, 4), 5)
    with pytest.raises(TypeError, match="expected a Linear to wrap, got GPT"):
        LoRALinear(GPT(5, 4, 2, 1, 8, 3), 1)
    with pytest.raises(ValueError, match="found no 2-D weight named one of"):
        add_lora(Linear(5, 4), 1, targets=("w_q",))


def _counting_batches(rng, steps, step_size, batch=16, length=8, vocab=6):
    """Sequences that count modulo V in steps of `step_size`: x[t+1] = x[t] + step_size mod V."""
    for _ in range(steps):
        start = rng.integers(0, vocab, size=(batch, 1))
        yield (start + step_size * np.arange(length + 1)) % vocab


def test_gpt_fine_tuned_with_lora_on_attention_projections():
    """Pre-train on counting by 1, then adapt w_q and w_v only to counting by 2.

    Measured (seeds as here): the pre-trained model scores 6.5 on the new task; 60 LoRA steps bring it to 0.03.
    """
    model = GPT(vocab_size=6, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=8, rng=0)
    train(model, _counting_batches(np.random.default_rng(1), 80, 1), lr=1e-2)
    model.zero_grad()
    before = model.state_dict()
    adapted = add_lora(model, r=2, alpha=4, targets=("w_q", "w_v"), rng=1)
    assert len(adapted.adapters) == 4                                   # w_q and w_v of 2 layers
    assert adapted.num_parameters() == 4 * 2 * (16 + 16)                # r (d_in + d_out) each
    rng = np.random.default_rng(2)
    losses = train(adapted, _counting_batches(rng, 60, 2), lr=3e-2)
    assert losses[0] > 3.0 and losses[-1] < 0.2
    # nothing but the adapters moved: the model's own weights are W0 + s A B only where adapted
    for adapter in adapted.adapters:
        np.testing.assert_array_equal(adapter.frozen, before[adapter.target])
    adapted_names = {adapter.target for adapter in adapted.adapters}
    for name, param in model.named_parameters():
        assert np.all(param.grad == 0)
        if name not in adapted_names:
            np.testing.assert_array_equal(param.data, before[name])
    ids = next(_counting_batches(rng, 1, 2))
    loss_adapted = lm_loss(adapted, ids)
    merged = adapted.merge()
    assert merged is model and lm_loss(merged, ids) == pytest.approx(loss_adapted, abs=1e-12)
