"""Sampling and the key/value cache: cached logits equal a full recomputation; greedy, top-k, cropping."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer import GPT, MultiHeadAttention
from minitransformer.generation.kv_cache import KVCache, LayerKVCache
from minitransformer.generation.sampling import generate, next_token, sample_text


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


# ---------------------------------------------------------------- non-finite logits and bad options (issue 18)
class FixedDraw(np.random.Generator):
    """A Generator whose uniform draws are all `value`: puts the inverse-CDF draw where a test wants it."""

    def __init__(self, value):
        super().__init__(np.random.PCG64(0))
        self.value = value

    def random(self, size=None):
        return np.full(size, self.value)


def test_a_nan_logit_is_an_error_naming_its_position():
    logits = np.zeros((2, 4))
    logits[1, 2] = np.nan
    for temperature in (0, 1.0):
        with pytest.raises(ValueError, match=r"NaN at position \[1, 2\]"):
            next_token(logits, temperature, rng=0)
    with pytest.raises(ValueError, match=r"NaN at position \[0, 0\]"):
        next_token(np.full((1, 3), np.nan), rng=0)                   # all NaN used to give token 0


def test_a_row_of_minus_infinity_is_an_error_naming_the_row():
    logits = np.array([[0.0, 1.0], [-np.inf, -np.inf]])
    with pytest.raises(ValueError, match=r"all -inf in row 1"):
        next_token(logits, 1.0, rng=0)
    with pytest.raises(ValueError, match=r"all -inf in row 1"):
        next_token(logits, 0)


def test_a_plus_infinity_logit_is_certain_and_several_share_the_certainty():
    one = np.array([[1.0, 2.0, np.inf]])
    for temperature, top_k in [(0, None), (1.0, None), (0.5, 2), (3.0, 1)]:
        draws = {int(next_token(one, temperature, top_k, rng=seed)[0]) for seed in range(20)}
        assert draws == {2}                                          # token 0 before (inf - inf = NaN)
    two = np.array([[np.inf, 5.0, np.inf, -np.inf]])
    draws = np.array([next_token(two, 1.0, rng=seed)[0] for seed in range(400)])
    assert set(draws) == {0, 2} and 0.4 < (draws == 0).mean() < 0.6
    assert next_token(two, 0)[0] == 0                                # greedy: the first certain token


def test_a_tiny_temperature_is_greedy_instead_of_nan():
    logits = np.array([[1.0, 3.0, 2.0], [5.0, 4.0, -np.inf]])
    np.testing.assert_array_equal(next_token(logits, 1e-320, rng=0), [1, 0])


def test_rounding_never_draws_a_token_of_probability_zero():
    """Seven equal logits sum to 0.9999999999999998: a draw above that used to pick the masked last token."""
    logits = np.array([[0.0] * 7 + [-np.inf]])
    assert next_token(logits, 1.0, rng=FixedDraw(1 - 2 ** -53))[0] == 6
    logits = np.array([[0.0] * 7 + [-5.0]])
    assert next_token(logits, 1.0, top_k=7, rng=FixedDraw(1 - 2 ** -53))[0] == 6


@pytest.mark.parametrize("temperature", [np.nan, np.inf, -np.inf, -1.0, "1", None, True])
def test_temperature_must_be_a_finite_number_at_least_zero(temperature):
    with pytest.raises(ValueError, match=r"next_token expected temperature a finite number >= 0 \(0 = greedy\)"):
        next_token(np.zeros((1, 3)), temperature, rng=0)
    with pytest.raises(ValueError, match=r"generate expected temperature"):
        generate(tiny_gpt(), np.array([1, 2]), 3, temperature=temperature, rng=0)


@pytest.mark.parametrize("top_k", [0, -2, 1.5, 2.0, True, "3"])
def test_top_k_must_be_an_integer_at_least_one(top_k):
    with pytest.raises(ValueError, match=r"next_token expected top_k None or an integer >= 1, got"):
        next_token(np.zeros((1, 3)), 1.0, top_k, rng=0)


@pytest.mark.parametrize("logits", [np.zeros((1, 3), dtype=complex), np.zeros((1, 3), dtype=object)],
                         ids=["complex", "object"])
def test_logits_must_be_real_numbers(logits):
    with pytest.raises(TypeError, match=r"next_token expected real logits \(float or integer\), got dtype"):
        next_token(logits, 1.0, rng=0)


@pytest.mark.parametrize("max_new_tokens", [-3, 2.0, True, None])
def test_max_new_tokens_must_be_an_integer_at_least_zero(max_new_tokens):
    with pytest.raises(ValueError, match=r"generate expected max_new_tokens an integer >= 0, got"):
        generate(tiny_gpt(), np.array([1, 2]), max_new_tokens, rng=0)


def test_zero_new_tokens_returns_the_cropped_prompt():
    prompt = np.arange(12) % 13
    np.testing.assert_array_equal(generate(tiny_gpt(), prompt, 0, rng=0), prompt[-10:])


@pytest.mark.parametrize("prompt, error, message", [
    (np.array([1, -1]), IndexError, r"generate \(prompt_ids\) expected token ids in \[0, 13\), got -1"),
    (np.array([[1, 13]]), IndexError, r"got 13"),
    (np.array([1.0, 2.0]), TypeError, r"generate \(prompt_ids\) expected integer token ids, got dtype float64"),
    (np.array([], dtype=np.int64), ValueError, r"generate expected prompt_ids \(T0,\) or \(B, T0\) with B >= 1"),
    ([], ValueError, r"got shape \(0,\)"),
    (np.zeros((0, 3), dtype=np.int64), ValueError, r"got shape \(0, 3\)"),
    (np.zeros((1, 2, 3), dtype=np.int64), ValueError, r"got shape \(1, 2, 3\)"),
])
def test_prompt_ids_are_checked(prompt, error, message):
    with pytest.raises(error, match=message):
        generate(tiny_gpt(), prompt, 2, rng=0)


def test_sample_text_checks_its_options_and_its_prompt():
    from minitransformer.tokenizers import CharTokenizer

    tokenizer = CharTokenizer("abcdefghijklm")
    with pytest.raises(ValueError, match=r"sample_text expected temperature"):
        sample_text(tiny_gpt(), tokenizer, "abc", 3, temperature=np.nan)
    with pytest.raises(TypeError, match=r"sample_text expected a str prompt, got list"):
        sample_text(tiny_gpt(), tokenizer, [1, 2], 3)
    assert sample_text(tiny_gpt(), tokenizer, "abc", 0) == "abc"


# ---------------------------------------------------------------- encoder-decoder decoding options
def _seq2seq():
    from minitransformer.models.seq2seq import Seq2SeqTransformer

    return Seq2SeqTransformer(11, 11, 8, 2, 1, 16, 8, pad_id=0, rng=0)


@pytest.mark.parametrize("options, error, message", [
    (dict(max_len=0), ValueError, r"expected max_len an integer >= 1, got 0"),
    (dict(max_len=-2), ValueError, r"expected max_len an integer >= 1, got -2"),
    (dict(max_len=2.5), ValueError, r"expected max_len an integer >= 1, got 2.5"),
    (dict(eos_id=11), IndexError, r"expected eos_id in \[0, 11\), got 11"),
    (dict(pad_id=-1), IndexError, r"expected pad_id in \[0, 11\), got -1"),
    (dict(bos_id=1.0), TypeError, r"expected bos_id an integer token id, got 1.0"),
    (dict(eos_id=0), ValueError, r"expected eos_id different from pad_id"),
])
@pytest.mark.parametrize("decoder", ["greedy_decode", "beam_search"])
def test_decoding_options_are_checked_before_the_model_runs(decoder, options, error, message):
    from minitransformer.generation import decoding

    arguments = dict(bos_id=1, eos_id=2, max_len=4, pad_id=0) | options
    with pytest.raises(error, match=rf"{decoder} {message}"):
        getattr(decoding, decoder)(_seq2seq(), np.array([[3, 4, 5]]), **arguments)


@pytest.mark.parametrize("options, message", [
    (dict(beam_size=0), r"expected beam_size an integer >= 1, got 0"),
    (dict(beam_size=2.0), r"expected beam_size an integer >= 1, got 2.0"),
    (dict(length_penalty=np.nan), r"expected length_penalty a finite number, got nan"),
])
def test_beam_search_options_are_checked(options, message):
    from minitransformer.generation.decoding import beam_search

    with pytest.raises(ValueError, match=rf"beam_search {message}"):
        beam_search(_seq2seq(), np.array([[3, 4, 5]]), 1, 2, 4, **options)


def test_a_sinusoidal_gpt_decodes_past_max_len_with_the_cache_and_generation_keeps_its_window():
    """Positions past max_len are computed on demand, so a cached forward may go on past the table (and equals
    the full recomputation); `generate` keeps to the trained window (max_len) all the same."""
    model = tiny_gpt("sinusoidal")                                         # max_len 10
    ids = np.random.default_rng(3).integers(0, 13, size=(2, 16))
    cache = KVCache(len(model.blocks))
    steps = [model.forward(ids[:, :4], cache=cache)[:, -1]]
    steps += [model.forward(ids[:, t:t + 1], cache=cache)[:, -1] for t in range(4, 16)]
    np.testing.assert_allclose(np.stack(steps, axis=1), model.forward(ids)[:, 3:], rtol=1e-10, atol=1e-12)
    assert cache.length == 16
    prompt = np.arange(13) % 13
    cached = generate(model, prompt, 15, temperature=1.0, rng=5)
    assert np.array_equal(cached, generate(model, prompt, 15, temperature=1.0, rng=5, use_cache=False))
    assert cached.shape == (10 + 15,) and np.array_equal(cached[:10], prompt[-10:])
