"""Padding masks: what sits in the padding changes neither the outputs nor the gradients at real positions."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import CrossEntropyLoss, MultiHeadAttention, key_padding_mask, lengths_to_mask, pad_sequences
from minitransformer.models.encoder import TransformerEncoder
from minitransformer.models.seq2seq import Seq2SeqTransformer

PAD, V = 0, 9


def make_encoder(norm="post", seed=0):
    return TransformerEncoder(V, 8, 2, 2, 16, 12, pad_id=PAD, norm=norm, rng=seed)


def test_pad_sequences_and_masks():
    ids = pad_sequences([[5, 6, 7], [8]], pad_id=PAD)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert key_padding_mask(ids, PAD).shape == (2, 1, 1, 3)
    assert np.array_equal(key_padding_mask(ids, PAD), lengths_to_mask([3, 1], 3))
    assert pad_sequences([[1, 2]], pad_id=PAD, length=4).tolist() == [[1, 2, 0, 0]]


def test_bad_padding_inputs_are_named():
    with pytest.raises(ValueError, match="at most length=2"):
        pad_sequences([[1, 2, 3]], pad_id=PAD, length=2)
    with pytest.raises(ValueError, match=r"key_padding_mask expected token ids \(B, T\)"):
        key_padding_mask(np.zeros(3, dtype=int), PAD)
    with pytest.raises(ValueError, match=r"lengths \(B,\) in \[1, 3\]"):
        lengths_to_mask([0, 2], 3)
    with pytest.raises(ValueError, match="broadcastable"):
        MultiHeadAttention(4, 2, rng=0)(np.zeros((2, 3, 4)), mask=np.ones((2, 1, 1, 5), dtype=bool))


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_real_positions_ignore_padding_and_match_unpadded_runs(norm):
    rng = np.random.default_rng(1)
    encoder = make_encoder(norm)
    lengths = [6, 3, 1]
    ids = pad_sequences([rng.integers(1, V, size=n) for n in lengths], pad_id=PAD)
    reference = encoder(ids)
    garbage_ids = np.where(ids == PAD, rng.integers(1, V, size=ids.shape), ids)
    mask = key_padding_mask(ids, PAD)
    x = encoder.embed(garbage_ids)                              # run the blocks on garbage, hidden by the mask
    for block in encoder.blocks:
        x = block(x, mask=mask)
    if encoder.ln_f is not None:
        x = encoder.ln_f(x)
    for row, n in enumerate(lengths):
        np.testing.assert_allclose(x[row, :n], reference[row, :n], rtol=1e-12, atol=1e-12)
        alone = encoder(ids[row:row + 1, :n])                   # the sequence on its own, no padding at all
        np.testing.assert_allclose(alone[0], reference[row, :n], rtol=1e-10, atol=1e-12)


def test_without_the_mask_padding_would_leak():
    rng = np.random.default_rng(2)
    encoder = make_encoder()
    ids = pad_sequences([rng.integers(1, V, size=5), rng.integers(1, V, size=2)], pad_id=PAD)
    encoder.pad_id = None                                       # no mask: padded keys are attended
    assert not np.allclose(encoder(ids)[1, :2], encoder(ids[1:2, :2])[0])


def loss_and_grads(model, src, tgt_in, targets):
    model.zero_grad()
    loss_fn = CrossEntropyLoss(ignore_index=PAD)
    loss = loss_fn(model(src, tgt_in), targets)
    model.backward(loss_fn.backward())
    return loss, {name: param.grad.copy() for name, param in model.named_parameters()}


@given(seed=st.integers(0, 10_000), extra_src=st.integers(0, 3), extra_tgt=st.integers(0, 2),
       norm=st.sampled_from(["post", "pre"]), shared=st.booleans())
def test_seq2seq_loss_and_gradients_do_not_see_the_padding(seed, extra_src, extra_tgt, norm, shared):
    """Refill the padding (a new vector for the pad token) and make it longer: loss and every gradient stay put."""
    rng = np.random.default_rng(seed)
    model = Seq2SeqTransformer(V, V, 8, 2, 1, 12, 12, pad_id=PAD, norm=norm, share_embeddings=shared,
                               tie_output=shared, rng=0)
    src = pad_sequences([rng.integers(1, V, size=n) for n in (5, 2)], pad_id=PAD)
    tgt = pad_sequences([rng.integers(1, V, size=n) for n in (4, 1)], pad_id=PAD)
    targets = np.where(tgt == PAD, PAD, rng.integers(1, V, size=tgt.shape))
    loss, grads = loss_and_grads(model, src, tgt, targets)

    if not shared:                    # (tied, the PAD row is also the output weight of the PAD logit at real positions)
        for table in (model.encoder.embed.token_embedding.weight, model.tgt_embed.token_embedding.weight):
            table.data[PAD] = rng.standard_normal(8) * 5            # what the padding looks like changes
    widen = lambda ids, extra: np.concatenate([ids, np.full((ids.shape[0], extra), PAD)], axis=1)
    loss2, grads2 = loss_and_grads(model, widen(src, extra_src), widen(tgt, extra_tgt), widen(targets, extra_tgt))
    assert loss2 == pytest.approx(loss, rel=1e-12)
    for name in grads:
        np.testing.assert_allclose(grads2[name], grads[name], rtol=1e-9, atol=1e-13, err_msg=name)
        if "token_embedding" in name and not shared:
            assert not grads2[name][PAD].any(), f"{name}: the pad row received a gradient"
