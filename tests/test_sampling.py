"""Sampling and the key/value cache: cached logits equal a full recomputation; greedy, top-k, cropping."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer import GPT, MultiHeadAttention
from minitransformer.generation.kv_cache import KVCache, LayerKVCache
from minitransformer.generation.sampling import generate, next_token


def tiny_gpt(positional="learned", norm="pre", dtype=np.float64):
    return GPT(13, 16, 2, 2, 32, 10, norm=norm, positional=positional, dtype=dtype, rng=0)


@settings(max_examples=15)
@given(st.integers(1, 6), st.integers(0, 2**32 - 1), st.sampled_from(["learned", "sinusoidal"]),
       st.sampled_from(["pre", "post"]))
def test_cached_logits_equal_full_recomputation(prompt_length, seed, positional, norm):
    model = tiny_gpt(positional, norm)
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 13, size=(2, 10))
    cache = KVCache(len(model.blocks))
    steps = [model.forward(ids[:, :prompt_length], cache=cache)[:, -1]]
    for position in range(prompt_length, 10):
        steps.append(model.forward(ids[:, position:position + 1], cache=cache)[:, -1])
    full = model.forward(ids)                                                   # (2, 10, V)
    for offset, logits in enumerate(steps):
        np.testing.assert_allclose(logits, full[:, prompt_length - 1 + offset], rtol=1e-10, atol=1e-12)
    assert cache.length == 10


@pytest.mark.parametrize("options", [dict(positional="rope"), dict(positional="alibi"), dict(n_kv_heads=1),
                                     dict(positional="rope", n_kv_heads=2, window=3), dict(positional="none")],
                         ids=["rope", "alibi", "multi-query", "rope+gqa+window", "no-positions"])
def test_cached_logits_equal_full_recomputation_for_attention_variants(options):
    model = GPT(13, 16, 4, 2, 32, 10, rng=1, **options)
    ids = np.random.default_rng(2).integers(0, 13, size=(2, 9))
    cache = KVCache(len(model.blocks))
    steps = [model.forward(ids[:, :3], cache=cache)[:, -1]]
    steps += [model.forward(ids[:, t:t + 1], cache=cache)[:, -1] for t in range(3, 9)]
    full = model.forward(ids)
    np.testing.assert_allclose(np.stack(steps, axis=1), full[:, 2:], rtol=1e-10, atol=1e-12)


def test_cache_beyond_max_len_is_refused():
    model = tiny_gpt()
    cache = KVCache(2)
    model.forward(np.zeros((1, 10), dtype=int), cache=cache)
    with pytest.raises(ValueError, match="max_len=10.*after 10 cached"):
        model.forward(np.zeros((1, 1), dtype=int), cache=cache)


def test_cross_attention_cache_reuses_the_context():
    rng = np.random.default_rng(0)
    layer = MultiHeadAttention(8, 2, rng=0)
    x, context = rng.standard_normal((1, 4, 8)), rng.standard_normal((1, 5, 8))
    full = layer.forward(x, context)
    cache = LayerKVCache()
    pieces = [layer.forward(x[:, t:t + 1], context, cache=cache) for t in range(4)]
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, rtol=1e-12)
    assert cache.length == 5


def test_backward_after_a_cached_forward_is_refused():
    layer = MultiHeadAttention(8, 2, causal=True, rng=0)
    out = layer.forward(np.ones((1, 2, 8)), cache=LayerKVCache())
    with pytest.raises(RuntimeError, match="key/value cache"):
        layer.backward(np.ones_like(out))


def test_generate_with_and_without_cache_agree_and_crop_long_prompts():
    model = tiny_gpt()
    prompt = np.arange(13) % 13                                   # 13 tokens > max_len 10
    cached = generate(model, prompt, 15, temperature=1.0, rng=5)
    plain = generate(model, prompt, 15, temperature=1.0, rng=5, use_cache=False)
    assert np.array_equal(cached, plain)
    assert cached.shape == (10 + 15,) and np.array_equal(cached[:10], prompt[-10:])


def test_greedy_takes_the_argmax_and_top_1_is_greedy():
    model = tiny_gpt()
    prompt = np.array([[1, 2, 3]])
    greedy = generate(model, prompt, 4, temperature=0)
    expected = prompt
    for _ in range(4):
        expected = np.concatenate([expected, model.forward(expected)[:, -1].argmax(-1)[:, None]], axis=1)
    assert np.array_equal(greedy, expected)
    assert np.array_equal(generate(model, prompt, 4, temperature=1.3, top_k=1, rng=0), greedy)
    assert model.training                                         # generate restores the mode


def test_next_token_distribution_follows_temperature_and_top_k():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    rng = np.random.default_rng(0)
    draws = np.array([next_token(logits, 1.0, None, rng)[0] for _ in range(4000)])
    np.testing.assert_allclose(np.bincount(draws, minlength=4) / 4000, [0.5, 0.3, 0.15, 0.05], atol=0.03)
    top2 = np.array([next_token(logits, 1.0, 2, rng)[0] for _ in range(2000)])
    assert set(top2) == {0, 1} and abs((top2 == 0).mean() - 0.625) < 0.04
    cold = np.array([next_token(logits, 0.1, None, rng)[0] for _ in range(500)])
    assert (cold == 0).mean() > 0.99
    with pytest.raises(ValueError, match="temperature"):
        next_token(logits, -1.0)


def test_float32_model_stays_float32_when_sampling():
    model = tiny_gpt(dtype=np.float32)
    assert model.forward(np.array([[1, 2]])).dtype == np.float32
    assert generate(model, np.array([1, 2]), 3, rng=0).shape == (5,)


def test_reordering_the_cache_follows_the_chosen_rows():
    model = tiny_gpt()
    ids = np.random.default_rng(3).integers(0, 13, size=(3, 6))
    cache = KVCache(len(model.blocks))
    model.forward(ids[:, :4], cache=cache)
    cache.reorder(np.array([2, 2, 0]))                       # beams 0 and 1 continue beam 2, beam 2 continues 0
    reordered = ids[[2, 2, 0]]
    logits = model.forward(reordered[:, 4:5], cache=cache)[:, -1]
    np.testing.assert_allclose(logits, model.forward(reordered[:, :5])[:, -1], rtol=1e-10)


def test_kv_cache_counts_target_positions_and_reorders_every_layer():
    """An encoder-decoder's cache: the cross-attention caches hold the memory's S positions but do not count."""
    cache = KVCache(2, cross_attention=True)
    keys = np.arange(3 * 1 * 5 * 2, dtype=float).reshape(3, 1, 5, 2)         # (B, Hkv, S, hs)
    for layer in cache.self_attention:
        layer.append(keys[:, :, :2], keys[:, :, :2])                          # two target positions
    for layer in cache.cross_attention:
        layer.append(keys, keys)                                              # the memory's five
    assert cache.length == 2 and len(cache) == 2 and cache[1] is cache.self_attention[1]
    assert repr(cache) == "KVCache(layers=2, length=2, cross_attention=True)"
    cache.reorder(np.array([2, 2]))
    for layer in cache.self_attention + cache.cross_attention:
        np.testing.assert_array_equal(layer.k, keys[[2, 2], :, :layer.length])
    assert KVCache(2).cross_attention == [] and KVCache(2).length == 0
    with pytest.raises(ValueError, match=r"LayerKVCache holds keys \(2, 1, 2, 2\), cannot append keys \(3, 1, 1, 2\)"):
        cache[0].append(keys[:, :, :1], keys[:, :, :1])
