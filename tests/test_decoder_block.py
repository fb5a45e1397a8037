"""The decoder block of the encoder-decoder (layers/decoder_block.py): everything that pins it, in one file.

* definition: PyTorch's `nn.TransformerDecoderLayer` (masked self-attention, cross-attention to the
  memory, feed-forward), post- and pre-norm (parity, 1e-10, on the target and on the memory);
* gradients: the catalogue's DecoderBlock rows (post-, pre-norm, dropout, padding masks) against
  central differences (float64, 1e-7);
* bad input: an unknown norm; backward before forward.
"""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused
from _torch_parity import (
    assert_matches_torch,
    block_weights,
    functional_call,
    future_masked,
    requires_torch,
    shift_vectors,
    torch,
)

from minitransformer import DecoderBlock


# ---------------------------------------------------------------- definition
@requires_torch
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_block_is_torchs_decoder_layer(norm):
    rng = np.random.default_rng(15)
    block = shift_vectors(DecoderBlock(12, 3, 20, norm=norm, rng=rng), rng)
    reference = torch.nn.TransformerDecoderLayer(12, 3, dim_feedforward=20, dropout=0.0, layer_norm_eps=1e-5,
                                                 batch_first=True, norm_first=(norm == "pre"), dtype=torch.float64)

    def forward(t, leaves):
        params = block_weights(leaves, {"self_attn.": "self_attn.", "cross_attn.": "multihead_attn."},
                               {"ln1": "norm1", "ln2": "norm2", "ln3": "norm3"})
        return functional_call(reference, params, (t[0], t[1]), {"tgt_mask": future_masked(5)})
    assert_matches_torch(block, [rng.standard_normal((2, 5, 12)), rng.standard_normal((2, 7, 12))], forward)


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("DecoderBlock"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- bad input
def test_an_unknown_norm_is_refused():
    with pytest.raises(ValueError, match="DecoderBlock expected norm 'pre' or 'post', got 'sandwich'"):
        DecoderBlock(8, 2, 8, norm="sandwich")


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(DecoderBlock(4, 2, 8), dout=np.ones((1, 2, 4)))
