"""Encoder-decoder: causality, cross-attention, cached decoding equal to recomputation (through the one
key/value cache protocol), beam search, a training smoke test."""

import numpy as np
import pytest

from minitransformer.generation.decoding import beam_search, greedy_decode
from minitransformer.generation.kv_cache import KVCache, LayerKVCache
from minitransformer.layers.decoder_block import DecoderBlock
from minitransformer.models.seq2seq import Seq2SeqTransformer
from minitransformer.objectives.seq2seq import train_seq2seq
from minitransformer.tasks.reverse import BOS, EOS, PAD, ReverseTask, exact_match

V = 9


def make_model(norm="post", shared=False, seed=0, eos_bias=0.0):
    model = Seq2SeqTransformer(V, V, 16, 2, 2, 24, 16, pad_id=PAD, norm=norm, share_embeddings=shared,
                               tie_output=shared, rng=seed)
    rng = np.random.default_rng(seed + 100)
    for _, param in model.named_parameters():          # sharper distributions than the initial near-uniform ones
        param.data[...] += rng.standard_normal(param.shape) * 0.3
    if not shared:
        model.head.bias.data[EOS] += eos_bias           # so that random models end their sentences now and then
    return model.eval()


def sources(rng):
    return np.array([[3, 4, 5, 6, 7], [8, 3, 3, PAD, PAD], [5, 6, 7, 8, PAD]])


def test_decoder_is_causal_and_attends_to_the_source():
    model = make_model()
    src = sources(None)
    tgt = np.array([[BOS, 3, 4, 5], [BOS, 6, 7, 8], [BOS, 5, 5, 5]])
    logits = model(src, tgt)
    changed_future = tgt.copy()
    changed_future[:, 2:] = 4
    np.testing.assert_allclose(model(src, changed_future)[:, :2], logits[:, :2], rtol=1e-12, atol=1e-12)
    changed_source = src.copy()
    changed_source[:, 0] = 6
    assert not np.allclose(model(changed_source, tgt)[:, 0], logits[:, 0])


@pytest.mark.parametrize("norm,shared", [("post", False), ("pre", True)])
def test_cached_steps_give_the_same_logits_as_recomputing_the_prefix(norm, shared):
    model = make_model(norm, shared)
    src = sources(None)
    tgt = np.array([[BOS, 3, 4, 5, 6], [BOS, 6, 7, 8, 3], [BOS, 5, 5, 5, 5]])
    full = model(src, tgt)                                                     # (B, T, V), teacher forced
    memory, memory_mask = model.encode(src)
    cache = KVCache(len(model.blocks), cross_attention=True)
    for t in range(tgt.shape[1]):
        logits = model.decode(tgt[:, t:t + 1], memory, memory_mask, cache=cache)[:, -1]
        np.testing.assert_allclose(logits, full[:, t], rtol=1e-10, atol=1e-12)
    assert cache.length == tgt.shape[1]
    assert cache[0].k.shape == (3, 2, tgt.shape[1], 8)                             # keys appended once per step
    assert cache.cross_attention[0].k.shape == (3, 2, src.shape[1], 8)            # the memory's, projected once


def test_a_prefix_fed_at_once_then_token_by_token_gives_the_teacher_forced_logits():
    model = make_model("pre")
    src, tgt = sources(None), np.array([[BOS, 3, 4, 5, 6], [BOS, 6, 7, 8, 3], [BOS, 5, 5, 5, 5]])
    full = model(src, tgt)                                                     # (B, T, V)
    memory, memory_mask = model.encode(src)
    cache = KVCache(len(model.blocks), cross_attention=True)
    pieces = [model.decode(tgt[:, :3], memory, memory_mask, cache=cache)]      # (B, 3, V): a prompt
    pieces += [model.decode(tgt[:, t:t + 1], memory, memory_mask, cache=cache) for t in (3, 4)]
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, rtol=1e-10, atol=1e-12)


def test_reordering_the_cache_and_memory_follows_the_chosen_beams():
    """Beam search keeps some rows and repeats others; the cache (self- and cross-attention) must follow."""
    model = make_model("post")
    src, tgt = sources(None), np.array([[BOS, 3, 4, 5], [BOS, 6, 7, 8], [BOS, 5, 6, 7]])
    memory, memory_mask = model.encode(src)
    cache = KVCache(len(model.blocks), cross_attention=True)
    model.decode(tgt[:, :3], memory, memory_mask, cache=cache)
    rows = np.array([2, 2, 0])                    # rows 0 and 1 continue row 2, row 2 continues row 0
    cache.reorder(rows)
    logits = model.decode(tgt[rows, 3:4], memory[rows], memory_mask[rows], cache=cache)[:, -1]
    np.testing.assert_allclose(logits, model(src[rows], tgt[rows])[:, -1], rtol=1e-10, atol=1e-12)
    assert cache.cross_attention[1].k.shape[0] == 3 and cache.length == 4


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_greedy_and_beam_search_with_cache_equal_recomputation(norm):
    model = make_model(norm)
    src = sources(None)
    cached = greedy_decode(model, src, BOS, EOS, max_len=7)
    np.testing.assert_array_equal(cached, greedy_decode(model, src, BOS, EOS, max_len=7, use_cache=False))
    tokens, scores = beam_search(model, src, BOS, EOS, max_len=7, beam_size=3)
    tokens2, scores2 = beam_search(model, src, BOS, EOS, max_len=7, beam_size=3, use_cache=False)
    np.testing.assert_array_equal(tokens, tokens2)
    np.testing.assert_allclose(scores, scores2, rtol=1e-10)


def test_decoding_a_model_left_in_training_mode_turns_dropout_off_and_restores_the_mode():
    """With dropout active the cached and the recomputed paths would draw different masks and disagree."""
    model = Seq2SeqTransformer(V, V, 16, 2, 2, 24, 16, pad_id=PAD, dropout=0.5, rng=0)
    src = sources(None)
    expected = greedy_decode(model.eval(), src, BOS, EOS, max_len=7)
    expected_beam = beam_search(model, src, BOS, EOS, max_len=7, beam_size=3)
    model.train()
    for use_cache in (True, False):
        np.testing.assert_array_equal(greedy_decode(model, src, BOS, EOS, max_len=7, use_cache=use_cache), expected)
        tokens, scores = beam_search(model, src, BOS, EOS, max_len=7, beam_size=3, use_cache=use_cache)
        np.testing.assert_array_equal(tokens, expected_beam[0])
        np.testing.assert_allclose(scores, expected_beam[1], rtol=1e-10)
        assert model.training


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_untrained_greedy_never_emits_pad_before_eos_and_cached_equals_uncached(norm):
    """Untrained models put real mass on pad; a pad chosen mid-sentence used to split the two paths."""
    src = np.random.default_rng(0).integers(3, 13, (4, 7))
    src[1, 5:] = PAD
    for seed in range(5):
        model = Seq2SeqTransformer(13, 13, 16, 4, 2, 32, 12, pad_id=PAD, norm=norm, rng=seed).eval()
        cached = greedy_decode(model, src, BOS, EOS, max_len=10)
        np.testing.assert_array_equal(cached, greedy_decode(model, src, BOS, EOS, max_len=10, use_cache=False))
        before_eos = np.cumsum(cached == EOS, axis=1) - (cached == EOS) == 0
        assert not np.any((cached == PAD) & before_eos), f"seed {seed}: pad before EOS in {cached}"


def sequence_log_prob(model, src, tokens):
    """Total log-probability of each row of tokens (up to and including its EOS) under teacher forcing."""
    tgt_in = np.concatenate([np.full((len(src), 1), BOS), tokens[:, :-1]], axis=1)
    logits = model(src, np.where(tgt_in == EOS, PAD, tgt_in))
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    picked = np.take_along_axis(logp, tokens[..., None], axis=-1)[..., 0]
    after_eos = np.cumsum(tokens == EOS, axis=1) - (tokens == EOS) > 0
    return np.where(after_eos | (tokens == PAD), 0.0, picked).sum(axis=1)


def test_beam_scores_are_the_log_probabilities_of_the_returned_sequences():
    model = make_model("post", eos_bias=2.0)
    src = sources(None)
    tokens, scores = beam_search(model, src, BOS, EOS, max_len=8, beam_size=4)
    ended = (tokens == EOS).any(axis=1)
    assert ended.any()
    np.testing.assert_allclose(scores[ended], sequence_log_prob(model, src, tokens)[ended], rtol=1e-9)


def test_beam_of_one_is_greedy_and_wider_beams_never_score_worse_than_greedy_on_finished_rows():
    model = make_model("pre", eos_bias=2.0)
    src = sources(None)
    greedy = greedy_decode(model, src, BOS, EOS, max_len=8)
    one, _ = beam_search(model, src, BOS, EOS, max_len=8, beam_size=1)
    np.testing.assert_array_equal(one, greedy)
    wide, wide_scores = beam_search(model, src, BOS, EOS, max_len=8, beam_size=5)
    greedy_scores = sequence_log_prob(model, src, greedy)
    both_ended = (greedy == EOS).any(axis=1) & (wide == EOS).any(axis=1)
    assert both_ended.any()
    assert np.all(wide_scores[both_ended] >= greedy_scores[both_ended] - 1e-9)


def test_bad_configurations_are_named():
    with pytest.raises(ValueError, match="share_embeddings needs equal vocabularies"):
        Seq2SeqTransformer(5, 6, 8, 2, 1, 8, 4, share_embeddings=True)
    with pytest.raises(ValueError, match="DecoderBlock expected norm"):
        DecoderBlock(8, 2, 8, norm="middle")
    with pytest.raises(IndexError, match=r"token ids in \[0, 9\)"):
        make_model()(np.array([[1, 2]]), np.array([[1, 9]]))
    model = make_model()
    memory, memory_mask = model.encode(np.array([[3, 4]]))
    with pytest.raises(ValueError, match=r"expected a KVCache of 2 layers with cross-attention, got KVCache\(layers=2"):
        model.decode(np.array([[BOS]]), memory, memory_mask, cache=KVCache(2))          # GPT's kind: no cross
    with pytest.raises(IndexError, match=r"Seq2SeqTransformer.*token ids in \[0, 9\), got -1"):
        model.decode(np.array([[-1]]), memory, memory_mask, cache=KVCache(2, cross_attention=True))


def test_reverse_task_keeps_the_test_set_out_of_training():
    task = ReverseTask(n_symbols=3, min_len=2, max_len=3, n_test=20, rng=0)      # only 36 strings exist
    held_out = set(task.test_sources)
    src, tgt_in, tgt_out = task.train_batch(200)
    seen = {tuple(int(t) for t in row if t != PAD) for row in src}
    assert not seen & held_out
    row = list(src[0][src[0] != PAD])
    assert list(tgt_out[0][:len(row) + 1]) == row[::-1] + [EOS] and tgt_in[0][0] == BOS


def test_training_smoke_loss_falls_and_short_strings_start_to_come_out_right():
    """The long run (>= 99% held-out exact match) is `python -m minitransformer seq2seq`; this is a fast check."""
    task = ReverseTask(n_symbols=4, min_len=2, max_len=3, n_test=10, rng=0)
    model = Seq2SeqTransformer(task.vocab_size, task.vocab_size, 32, 2, 1, 64, 5, pad_id=PAD, share_embeddings=True,
                               tie_output=True, dtype=np.float32, rng=1)
    losses = train_seq2seq(model, task, steps=150, batch_size=32, lr=3e-3, warmup=20)
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    src, _, _ = task.batch(task.test_sources)
    predicted = greedy_decode(model, src, BOS, EOS, max_len=5)
    assert exact_match(predicted, task.test_sources, task.target_of) >= 0.5


class ProtocolOnly:
    """A cache that offers a layer exactly what generation/kv_cache.py's protocol allows: length, append, k, v."""

    allowed = ("length", "append", "k", "v")

    def __init__(self):
        object.__setattr__(self, "inner", LayerKVCache())

    def __getattribute__(self, name):
        if name not in ProtocolOnly.allowed:
            raise AttributeError(f"a layer used cache.{name}, which the protocol does not offer")
        return getattr(object.__getattribute__(self, "inner"), name)


@pytest.mark.parametrize("variant", ["plain", "rope", "alibi", "window"])
def test_cached_forward_matches_forward_with_grouped_query_heads_using_only_the_protocol(variant):
    """The layers never import generation/: any object with length, append, k and v serves as a cache."""
    from minitransformer import ALiBi, MultiHeadAttention, RotaryEmbedding

    options = {"plain": {}, "rope": {"position": RotaryEmbedding(4)}, "alibi": {"position": ALiBi(4)},
               "window": {"window": 2}}[variant]
    block = DecoderBlock(16, 4, 24, norm="pre", rng=0)
    block.self_attn = MultiHeadAttention(16, 4, causal=True, n_kv_heads=2, rng=1, **options)
    block.cross_attn = MultiHeadAttention(16, 4, n_kv_heads=1, rng=2)
    rng = np.random.default_rng(3)
    x, memory = rng.standard_normal((2, 5, 16)), rng.standard_normal((2, 4, 16))
    full = block(x, memory)
    self_cache, cross_cache = ProtocolOnly(), ProtocolOnly()
    steps = [block(x[:, t:t + 1], memory, self_cache=self_cache, cross_cache=cross_cache) for t in range(5)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-10, atol=1e-12)
    assert self_cache.k.shape == (2, 2, 5, 4)                      # the cache keeps the 2 shared heads
    assert cross_cache.k.shape == (2, 1, 4, 4)                     # one shared head, the memory's 4 positions


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_float32_model_agrees_with_float64_and_keeps_its_dtype(norm):
    models = {dtype: Seq2SeqTransformer(V, V, 16, 2, 2, 24, 8, pad_id=PAD, norm=norm, share_embeddings=True,
                                        tie_output=True, dtype=dtype, rng=0) for dtype in (np.float32, np.float64)}
    src, tgt = sources(None), np.array([[BOS, 3, 4], [BOS, 5, PAD], [BOS, 6, 7]])
    logits = {dtype: model(src, tgt) for dtype, model in models.items()}
    assert logits[np.float32].dtype == np.float32
    np.testing.assert_allclose(logits[np.float32], logits[np.float64], atol=1e-4)
    model = models[np.float32]
    model.backward(np.ones_like(logits[np.float32]))
    assert all(param.grad.dtype == np.float32 for param in model.parameters())
    cache = KVCache(len(model.blocks), cross_attention=True)
    assert model.decode(tgt[:, :1], *model.encode(src), cache=cache).dtype == np.float32
    assert cache[0].k.dtype == cache.cross_attention[0].v.dtype == np.float32


def test_held_out_loss_is_the_mean_nll_per_target_token_and_its_perplexity_by_hand():
    """evaluate_loss weights each chunk by its target tokens: the same as summing -log p over every target token
    (EOS included, padding not) by hand and dividing by their number; the perplexity is exp of that."""
    import math

    from minitransformer.objectives.seq2seq import evaluate_loss

    task = ReverseTask(n_symbols=4, min_len=2, max_len=3, n_test=7, rng=0)
    model = Seq2SeqTransformer(task.vocab_size, task.vocab_size, 16, 2, 1, 32, 5, pad_id=PAD, rng=1)
    total, count = 0.0, 0
    for source in task.test_sources:                       # one sentence at a time: no padding at all
        src, tgt_in, tgt_out = task.batch([source])
        logits = model(src, tgt_in)[0]                     # (T, V)
        log_p = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
        total -= log_p[np.arange(len(tgt_out[0])), tgt_out[0]].sum()
        count += len(tgt_out[0])
    loss, ppl = evaluate_loss(model, task, task.test_sources, batch_size=3)   # chunks of 3, 3, 1: padded
    assert loss == pytest.approx(total / count, rel=1e-12)
    assert ppl == pytest.approx(math.exp(total / count), rel=1e-12)


def test_the_training_log_prints_perplexity_beside_the_loss():
    import math
    import re

    task = ReverseTask(n_symbols=4, min_len=2, max_len=3, n_test=4, rng=0)
    model = Seq2SeqTransformer(task.vocab_size, task.vocab_size, 16, 2, 1, 32, 5, pad_id=PAD, rng=1)
    lines = []
    losses = train_seq2seq(model, task, steps=4, batch_size=4, log_every=2, log=lines.append)
    for line, window in zip(lines, (losses[:2], losses[2:]), strict=True):
        loss, ppl = map(float, re.search(r"loss ([\d.]+) \(perplexity ([\d.]+)\)", line).groups())
        assert loss == pytest.approx(np.mean(window), abs=5e-5)
        assert ppl == pytest.approx(math.exp(np.mean(window)), abs=5e-3)        # printed to 2 decimals
