"""Bad ids and offsets in decoding and masking raise, naming the layer, instead of wrapping around."""

import re

import numpy as np
import pytest

from minitransformer.generation.decoding import greedy_decode
from minitransformer.models.bert import mask_tokens
from minitransformer.models.seq2seq import Seq2SeqTransformer

V = 11


def small_seq2seq():
    return Seq2SeqTransformer(V, V, 8, 2, 1, 16, 8, pad_id=0, rng=0).eval()


@pytest.mark.parametrize("bad", [-1, V])
def test_decode_refuses_ids_outside_the_vocabulary(bad):
    from minitransformer import KVCache

    model = small_seq2seq()
    memory, memory_mask = model.encode(np.array([[3, 4, 5], [6, 7, 0]]))
    with pytest.raises(IndexError, match=rf"Seq2SeqTransformer.*expected token ids in \[0, {V}\), got {bad}"):
        model.decode(np.array([[bad], [3]]), memory, memory_mask, cache=KVCache(1, cross_attention=True))


def test_greedy_decode_refuses_a_negative_bos():
    with pytest.raises(IndexError, match=r"got -1"):
        greedy_decode(small_seq2seq(), np.array([[3, 4, 5]]), bos_id=-1, eos_id=2, max_len=3)


def test_input_embedding_step_refuses_a_negative_start():
    with pytest.raises(ValueError, match=r"InputEmbedding.*expected start >= 0, got -1"):
        small_seq2seq().tgt_embed.step(np.array([[3]]), -1)


def test_mask_tokens_refuses_ids_outside_the_vocabulary():
    with pytest.raises(IndexError, match=r"mask_tokens expected token ids in \[0, 9\), got -3"):
        mask_tokens(np.array([[-3, 5, 6, 7]]), 0, mask_id=1, n_special=3, vocab_size=9)


def test_gpt_with_zero_heads_is_named():
    from minitransformer import GPT

    with pytest.raises(ValueError, match=r"GPT expected n_heads >= 1 .* got d_model=8, n_heads=0"):
        GPT(vocab_size=5, d_model=8, n_heads=0, n_layers=1, d_ff=8, max_len=4)


def test_gpt_with_a_cache_of_the_wrong_depth_is_named():
    from minitransformer import GPT, KVCache

    gpt = GPT(vocab_size=5, d_model=8, n_heads=2, n_layers=2, d_ff=8, max_len=4, rng=0)
    with pytest.raises(ValueError, match=r"GPT\(.*expected a KVCache of 2 layers, got 1"):
        gpt.forward(np.array([[1, 2]]), cache=KVCache(1))


@pytest.mark.parametrize("memory_shape", [(1, 3, 8), (3, 3, 16), (3, 16)])
def test_transformer_xl_memory_of_the_wrong_shape_names_the_block(memory_shape):
    from minitransformer.variants.transformer_xl import TransformerXL

    model = TransformerXL(7, 16, 2, 2, 24, mem_len=3, rng=0)
    with pytest.raises(ValueError, match=r"TransformerXLBlock.*expected memory \(1, M, 16\) .*got " +
                       re.escape(str(memory_shape))):
        model.forward(np.array([[1, 2, 3]]), memories=[np.zeros(memory_shape)] * 2)


def test_next_token_wants_a_batch_of_logits():
    from minitransformer.generation.sampling import next_token

    with pytest.raises(ValueError, match=r"next_token expected logits \(B, V\), got shape \(5,\)"):
        next_token(np.zeros(5), top_k=2)


def test_multihead_refuses_a_two_dimensional_padding_mask_even_when_batch_equals_time():
    """A (B, S) mask would broadcast as (T, S) when B == T and hide the wrong keys; only 4-D masks are taken."""
    import numpy as np
    import pytest

    from minitransformer import MultiHeadAttention, key_padding_mask

    layer = MultiHeadAttention(8, 2, rng=0)
    x = np.random.default_rng(0).standard_normal((4, 4, 8))
    ids = np.array([[5, 6, 0, 0], [5, 6, 7, 0], [5, 0, 0, 0], [5, 6, 7, 8]])
    with pytest.raises(ValueError, match=r"expected mask \(B or 1, H or 1, T or 1, S\).*got \(4, 4\)"):
        layer.forward(x, mask=ids != 0)
    assert layer.forward(x, mask=key_padding_mask(ids, 0)).shape == (4, 4, 8)
