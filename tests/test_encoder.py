"""The encoder's input embedding (models/encoder.py): its definition, pinned by hand.

The encoder's blocks, padding masks and gradients are tested with the layers they are made of
(test_block.py, test_padding.py, test_gradients.py) and through BERT and the encoder-decoder
(test_mlm.py, test_seq2seq.py); this file pins what the encoder itself defines.
"""

import numpy as np

from minitransformer import sinusoidal_table
from minitransformer.models.encoder import InputEmbedding


def test_token_vectors_are_multiplied_by_sqrt_d_model_before_the_positions_are_added():
    """Vaswani et al. (2017) §3.4: "we multiply those weights by sqrt(d_model)". C = 16, so the factor is 4;
    the positions are the sinusoidal rows 0 .. T-1, added unscaled."""
    layer = InputEmbedding(10, 16, max_len=8, rng=0)
    ids = np.array([[3, 1, 4, 1, 5]])
    expected = 4.0 * layer.token_embedding.weight.data[ids] + sinusoidal_table(5, 16)
    np.testing.assert_allclose(layer(ids), expected, rtol=1e-14, atol=1e-15)
