"""RoPE: scores depend only on the offset between positions; rotations keep lengths."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import GPT, MultiHeadAttention, RotaryEmbedding, rotary_angles, rotate


def _at(x, position, head_size):
    """Rotate one vector x (hs,) as if it sat at `position`."""
    cos, sin = rotary_angles(np.array([position]), head_size)
    return rotate(x[None, :], cos, sin)[0]


@given(m=st.integers(0, 500), n=st.integers(0, 500), shift=st.integers(-200, 2000),
       seed=st.integers(0, 10_000), half=st.integers(1, 8))
def test_score_depends_only_on_the_offset(m, n, shift, seed, half):
    hs = 2 * half
    q, k = np.random.default_rng(seed).standard_normal((2, hs))
    shift = max(shift, -min(m, n))                                   # positions stay >= 0
    score = _at(q, m, hs) @ _at(k, n, hs)
    shifted = _at(q, m + shift, hs) @ _at(k, n + shift, hs)
    assert np.isclose(score, shifted, rtol=1e-9, atol=1e-9)


def test_scores_change_with_the_offset():
    q, k = np.random.default_rng(0).standard_normal((2, 8))
    assert not np.isclose(_at(q, 3, 8) @ _at(k, 1, 8), _at(q, 3, 8) @ _at(k, 2, 8))


def test_rotation_keeps_lengths_and_position_zero_is_identity():
    x = np.random.default_rng(1).standard_normal((3, 7, 6))
    layer = RotaryEmbedding(6)
    y = layer(x, offset=4)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1))
    np.testing.assert_array_equal(RotaryEmbedding(6)(x)[:, 0], x[:, 0])


def test_first_pair_turns_by_the_position_in_radians():
    """theta_0 = 1: the pair (1, 0) at position p becomes (cos p, sin p)."""
    x = np.zeros((3, 4))
    x[:, 0] = 1.0
    y = RotaryEmbedding(4)(x)
    np.testing.assert_allclose(y[:, :2], np.stack([np.cos([0, 1, 2]), np.sin([0, 1, 2])], axis=1))


def test_rope_queries_align_to_the_end_of_the_keys():
    """With fewer queries than keys, the queries sit at the last positions (rotated and masked as such):
    queries for the last 2 positions against all 5 keys give the last 2 rows of the full output.
    (Shift invariance itself is test_score_depends_only_on_the_offset.)"""
    layer = MultiHeadAttention(8, 2, causal=True, position=RotaryEmbedding(4), rng=0)
    x = np.random.default_rng(2).standard_normal((1, 5, 8))
    np.testing.assert_allclose(layer(x[:, 3:], x), layer(x)[:, 3:], atol=1e-12)


def test_cached_keys_rotated_at_their_positions_give_the_same_scores():
    """Rotating 3 keys at positions 0..2 and then 2 new ones with offset 3 equals rotating all 5 at once."""
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((2, 1, 1, 5, 4))
    rope = RotaryEmbedding(4)
    q_all, k_all = rope.transform(q, k)
    _, k_old = rope.transform(q[..., :3, :], k[..., :3, :])
    q_new, k_new = rope.transform(q[..., 3:, :], k[..., 3:, :], offset=3)
    np.testing.assert_allclose(np.concatenate([k_old, k_new], axis=-2), k_all, atol=1e-12)
    np.testing.assert_allclose(q_new, q_all[..., 3:, :], atol=1e-12)


def test_odd_head_size_is_refused():
    with pytest.raises(ValueError, match="even head size, got 3"):
        RotaryEmbedding(3)
    with pytest.raises(ValueError, match="even head size"):
        GPT(5, 6, 2, 1, 8, 4, positional="rope")


def test_wrong_width_is_named():
    with pytest.raises(ValueError, match=r"RotaryEmbedding\(head_size=4\) expected input \(\.\.\., 4\)"):
        RotaryEmbedding(4)(np.ones((2, 3, 5)))


def test_the_rotary_base_is_10000_as_in_the_paper():
    """Su et al. (2021), "RoFormer", §3.2.2: theta_i = 10000^(-2(i-1)/d). With hs = 8 the four pairs turn by
    p * 10000^(-0/8), p * 10000^(-2/8), p * 10000^(-4/8), p * 10000^(-6/8) radians: 1, 0.1, 0.01 and 0.001
    per position, written out here rather than computed from a base. A base of 1000 would give 1, 0.178, ..."""
    per_position = np.array([1.0, 0.1, 0.01, 0.001])                 # (hs/2,), by hand
    cos, sin = rotary_angles(np.array([0, 5, 300]), 8)
    for row, p in enumerate((0, 5, 300)):
        np.testing.assert_allclose(cos[row], np.cos(p * per_position), rtol=0, atol=1e-13)
        np.testing.assert_allclose(sin[row], np.sin(p * per_position), rtol=0, atol=1e-13)
    pairs = np.tile([1.0, 0.0], 4)                                   # every pair (1, 0)
    turned = RotaryEmbedding(8)(np.stack([pairs] * 6))               # positions 0 .. 5, the layer's default base
    np.testing.assert_allclose(turned[5, 0::2], np.cos(5 * per_position), rtol=0, atol=1e-13)
    np.testing.assert_allclose(turned[5, 1::2], np.sin(5 * per_position), rtol=0, atol=1e-13)
