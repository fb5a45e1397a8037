"""Bad ids and offsets in decoding and masking raise, naming the layer, instead of wrapping around."""

import numpy as np
import pytest

from minitransformer.decoding import greedy_decode
from minitransformer.models.bert import mask_tokens
from minitransformer.models.seq2seq import Seq2SeqTransformer

V = 11


def small_seq2seq():
    return Seq2SeqTransformer(V, V, 8, 2, 1, 16, 8, pad_id=0, rng=0).eval()


@pytest.mark.parametrize("bad", [-1, V])
def test_decode_step_refuses_ids_outside_the_vocabulary(bad):
    model = small_seq2seq()
    cache = model.start_cache(*model.encode(np.array([[3, 4, 5], [6, 7, 0]])))
    with pytest.raises(IndexError, match=rf"InputEmbedding.*expected token ids in \[0, {V}\), got {bad}"):
        model.decode_step(np.array([bad, 3]), cache)


def test_greedy_decode_refuses_a_negative_bos():
    with pytest.raises(IndexError, match=r"got -1"):
        greedy_decode(small_seq2seq(), np.array([[3, 4, 5]]), bos_id=-1, eos_id=2, max_len=3)


def test_input_embedding_step_refuses_a_negative_start():
    with pytest.raises(ValueError, match=r"InputEmbedding.*expected start >= 0, got -1"):
        small_seq2seq().tgt_embed.step(np.array([[3]]), -1)


def test_mask_tokens_refuses_ids_outside_the_vocabulary():
    with pytest.raises(IndexError, match=r"mask_tokens expected token ids in \[0, 9\), got -3"):
        mask_tokens(np.array([[-3, 5, 6, 7]]), 0, mask_id=1, n_special=3, vocab_size=9)
