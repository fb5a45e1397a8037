"""GPT constructor options for the attention variants."""

import numpy as np
import pytest

from minitransformer import GPT


def _gpt(**options):
    return GPT(vocab_size=11, d_model=8, n_heads=4, n_layers=2, d_ff=16, max_len=6, rng=0, **options)


@pytest.mark.parametrize("positional", ["rope", "alibi", "none"])
def test_table_free_positions_have_no_table_and_any_length(positional):
    model = _gpt(positional=positional)
    assert model.position is None
    assert not any("position" in name for name, _ in model.named_parameters())
    ids = np.random.default_rng(0).integers(0, 11, size=(2, 15))               # longer than max_len
    logits = model(ids)
    assert logits.shape == (2, 15, 11) and np.all(np.isfinite(logits))
    assert model.backward(np.ones_like(logits)) is None


def test_attention_layers_receive_the_options():
    model = _gpt(positional="rope", n_kv_heads=2, window=3)
    for block in model.blocks:
        assert block.attn.n_kv_heads == 2 and block.attn.window == 3
        assert type(block.attn.position).__name__ == "RotaryEmbedding"
    assert type(_gpt(positional="alibi").blocks[0].attn.position).__name__ == "ALiBi"
    assert _gpt(positional="none").blocks[0].attn.position is None
    assert _gpt().blocks[0].attn.position is None                             # learned: added to the embeddings


def test_grouped_query_attention_saves_key_and_value_weights():
    saved_per_layer = 2 * (8 * 8 + 8) - 2 * (8 * 2 + 2)                         # w_k, w_v, b_k, b_v: 4 heads -> 1
    assert _gpt().num_parameters() - _gpt(n_kv_heads=1).num_parameters() == 2 * saved_per_layer


def test_default_model_is_unchanged_by_the_new_options():
    ids = np.random.default_rng(1).integers(0, 11, size=(2, 5))
    np.testing.assert_array_equal(_gpt()(ids), _gpt(n_kv_heads=4, window=None)(ids))
    np.testing.assert_array_equal(_gpt()(ids), _gpt(window=6)(ids))           # a window as wide as the text


def test_config_records_the_options():
    config = _gpt(positional="alibi", n_kv_heads=2, window=4).config
    assert (config["positional"], config["n_kv_heads"], config["window"]) == ("alibi", 2, 4)


def test_bad_positional_is_named():
    with pytest.raises(ValueError, match=r"positional in \('learned', 'sinusoidal', 'rope', 'alibi', 'none'\)"):
        _gpt(positional="relative")
