"""Greedy decoding and beam search (generation/decoding.py) on a hand-made model whose answers are worked out
by hand. The encoder-decoder's own decoding (cache against recomputation, batches) is in test_seq2seq.py."""

import contextlib
import math

import numpy as np
import pytest

from minitransformer.generation.decoding import beam_search, greedy_decode

PAD, BOS, EOS, A, B = range(5)
# next-token probabilities given the tokens after BOS; any other prefix ends with EOS
NEXT = {(): {A: 0.6, B: 0.4},
        (A,): {EOS: 0.3, A: 0.36, B: 0.34},
        (B,): {EOS: 0.9, A: 0.05, B: 0.05}}


class HandMadeModel:
    """forward(src, tgt) -> logits (B, T, 5): log p(next | tgt[1:]) at every position, from NEXT."""

    tgt_vocab_size = 5

    def evaluating(self):
        return contextlib.nullcontext()

    def forward(self, src, tgt):
        logits = np.full((len(tgt), tgt.shape[1], 5), -np.inf)
        for row, prefix in enumerate(tgt):
            for t in range(len(prefix)):
                for token, p in NEXT.get(tuple(int(i) for i in prefix[1:t + 1]), {EOS: 1.0}).items():
                    logits[row, t, token] = math.log(p)
        return logits


SRC = np.zeros((1, 1), dtype=int)


def test_greedy_takes_the_likeliest_token_at_each_step():
    """a (0.6), then a (0.36), then EOS (1.0): a a EOS, probability 0.216."""
    tokens = greedy_decode(HandMadeModel(), SRC, BOS, EOS, max_len=5, pad_id=PAD, use_cache=False)
    assert tokens.tolist() == [[A, A, EOS]]


def test_beam_search_finds_the_likelier_sequence_greedy_misses():
    """Beams of 2. Step 1: a (0.6), b (0.4). Step 2's candidates: b EOS 0.4 * 0.9 = 0.36, a a 0.216,
    a b 0.204, a EOS 0.18, b a = b b 0.02; the two best are b EOS and a a. Step 3: a a EOS (0.216) cannot
    beat the finished b EOS, which keeps 0.36. Greedy's a a EOS has 0.216 < 0.36."""
    tokens, score = beam_search(HandMadeModel(), SRC, BOS, EOS, max_len=5, beam_size=2, pad_id=PAD, use_cache=False)
    assert tokens.tolist() == [[B, EOS, PAD]]
    assert score[0] == pytest.approx(math.log(0.36), rel=1e-14)
    one, score_one = beam_search(HandMadeModel(), SRC, BOS, EOS, max_len=5, beam_size=1, pad_id=PAD, use_cache=False)
    assert one.tolist() == [[A, A, EOS]] and score_one[0] == pytest.approx(math.log(0.216), rel=1e-14)


def test_a_length_penalty_divides_the_log_probability_by_length_to_the_alpha():
    """Ranked by logp / len^alpha: with alpha = 3, b EOS gives log(0.36) / 8 = -0.1277 and a a EOS
    log(0.216) / 27 = -0.0568, so the longer one wins; the score returned stays the total log-probability."""
    tokens, score = beam_search(HandMadeModel(), SRC, BOS, EOS, max_len=5, beam_size=2, pad_id=PAD,
                                length_penalty=3.0, use_cache=False)
    assert tokens.tolist() == [[A, A, EOS]]
    assert score[0] == pytest.approx(math.log(0.216), rel=1e-14)
