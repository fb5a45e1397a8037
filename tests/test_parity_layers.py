"""Every layer against its PyTorch equivalent, float64, same weights, relative error <= 1e-10.

Finite differences prove that each backward matches its own forward; they
cannot prove that the forward is what the field calls "LayerNorm" or
"multi-head attention". PyTorch's layers are that definition. For each layer
the forward output and the gradients of sum(G * output), G random, with
respect to every float input and every parameter must agree.

PyTorch sees the project's parameters in the project's own layout: each one
becomes a leaf tensor, and the PyTorch module is called through
`torch.func.functional_call` with its weights written as expressions of those
leaves (a transpose for `nn.Linear`'s (out, in) weight, a concatenation for
`nn.MultiheadAttention`'s fused in_proj). The leaves' gradients are then
directly comparable with ours.

Skipped when PyTorch is missing; `pip install -e ".[parity]"` installs it.
"""

import numpy as np
import pytest

from minitransformer import (
    GELU,
    CrossEntropyLoss,
    Embedding,
    LayerNorm,
    Linear,
    MultiHeadAttention,
    ReLU,
    ScaledDotProductAttention,
    Softmax,
    TransformerBlock,
    rel_error,
)

TOLERANCE = 1e-10
# Attention's key bias b_k adds the same q . b_k to every score of a row, which the softmax ignores:
# its gradient is exactly zero, and both libraries return rounding noise (~1e-17). Gradients whose
# two sides are both below this floor are equal; rel_error between two noises would mean nothing.
ZERO_FLOOR = 1e-13

torch = pytest.importorskip("torch")
F = torch.nn.functional
functional_call = torch.func.functional_call


def _tensor(value):
    """A float array becomes a leaf that collects its gradient; ids and masks are passed as they are."""
    if isinstance(value, np.ndarray):
        tensor = torch.from_numpy(value.copy())
        return tensor.requires_grad_() if np.issubdtype(value.dtype, np.floating) else tensor
    return value


def assert_matches_torch(layer, inputs, reference, rng=0):
    """Compare layer(*inputs) with reference(tensors, leaves), and all gradients.

    Args:
        layer: a project Module, float64.
        inputs: forward's arguments (float arrays are differentiated).
        reference: callable(tensors, leaves) -> torch output; `tensors` mirror
            `inputs`, `leaves` maps each of the layer's parameter names to a
            leaf tensor holding the same numbers in the project's layout.
        rng: seed of the upstream gradient G.
    """
    rng = np.random.default_rng(rng)
    tensors = [_tensor(value) for value in inputs]
    leaves = {name: torch.from_numpy(param.data.copy()).requires_grad_() for name, param in layer.named_parameters()}
    out = layer(*inputs)
    expected = reference(tensors, leaves)
    assert rel_error(out, expected.detach().numpy()) <= TOLERANCE, "forward differs"

    upstream = rng.standard_normal(np.shape(out))
    layer.zero_grad()
    grads = layer.backward(float(upstream) if np.ndim(out) == 0 else upstream)
    expected.backward(torch.from_numpy(np.asarray(upstream)))
    grads = grads if isinstance(grads, tuple) else (grads,)
    float_tensors = [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad]
    float_grads = [g for g in grads if g is not None]
    assert len(float_grads) == len(float_tensors)
    for index, (ours, theirs) in enumerate(zip(float_grads, float_tensors)):
        _assert_same_gradient(ours, theirs.grad.numpy(), f"float input {index}")
    for name, param in layer.named_parameters():
        _assert_same_gradient(param.grad, leaves[name].grad.numpy(), f"parameter {name}")


def _assert_same_gradient(ours, theirs, what):
    if max(np.max(np.abs(ours)), np.max(np.abs(theirs))) < ZERO_FLOOR:
        return                                             # zero in exact arithmetic, on both sides
    error = rel_error(ours, theirs)
    assert error <= TOLERANCE, f"gradient of {what}: rel_error {error:.2e}"


def _linear_weights(leaves, prefix, theirs):
    """nn.Linear's {weight (out, in), bias} from our {weight (in, out), bias}."""
    params = {f"{theirs}weight": leaves[f"{prefix}weight"].T}
    if f"{prefix}bias" in leaves:
        params[f"{theirs}bias"] = leaves[f"{prefix}bias"]
    return params


def _attention_weights(leaves, prefix, theirs):
    """nn.MultiheadAttention's fused in_proj (3C, C) and out_proj from our w_q, w_k, w_v, w_o (C, C) and biases."""
    leaf = {name: leaves[prefix + name] for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")}
    return {f"{theirs}in_proj_weight": torch.cat([leaf["w_q"].T, leaf["w_k"].T, leaf["w_v"].T]),
            f"{theirs}in_proj_bias": torch.cat([leaf["b_q"], leaf["b_k"], leaf["b_v"]]),
            f"{theirs}out_proj.weight": leaf["w_o"].T, f"{theirs}out_proj.bias": leaf["b_o"]}


def _future_masked(T):
    """nn.MultiheadAttention's mask convention: True = may NOT attend (the opposite of ours)."""
    return torch.ones(T, T, dtype=torch.bool).triu(1)


# ---------------------------------------------------------------- elementwise and normalisation
@pytest.mark.parametrize("shape", [(2, 5, 6), (7, 3)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(shape, bias):
    rng = np.random.default_rng(1)
    layer = Linear(shape[-1], 4, bias=bias, rng=rng)
    if bias:
        layer.bias.data[...] = rng.standard_normal(4)
    reference = torch.nn.Linear(shape[-1], 4, bias=bias, dtype=torch.float64)
    assert_matches_torch(layer, [rng.standard_normal(shape)],
                         lambda t, leaves: functional_call(reference, _linear_weights(leaves, "", ""), (t[0],)))


@pytest.mark.parametrize("eps, scale", [(1e-5, 1.0), (1e-3, 0.01)], ids=["gpt2-eps", "eps-dominates"])
def test_layernorm(eps, scale):
    """With inputs of variance 1e-4 and eps 1e-3 the placement of eps (inside the root) decides the output."""
    rng = np.random.default_rng(2)
    layer = LayerNorm(6, eps=eps)
    layer.gamma.data[...] = rng.standard_normal(6)
    layer.beta.data[...] = rng.standard_normal(6)
    reference = torch.nn.LayerNorm(6, eps=eps, dtype=torch.float64)
    assert_matches_torch(layer, [scale * rng.standard_normal((3, 4, 6))],
                         lambda t, leaves: functional_call(reference, {"weight": leaves["gamma"], "bias": leaves["beta"]},
                                                           (t[0],)))


def test_layernorm_of_the_slides_without_eps_is_a_different_function():
    """Si Wu's slides (001, "Layer Norm") divide by sigma = sqrt(var) with no eps; PyTorch, GPT-2 and this
    project use sqrt(var + eps). With small variance the two differ, and on a constant vector the
    slides' form is 0/0 while the layer gives beta."""
    rng = np.random.default_rng(14)
    x = 0.01 * rng.standard_normal((3, 6))
    slides = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
    expected = F.layer_norm(torch.from_numpy(x), (6,), eps=1e-5).numpy()
    assert rel_error(LayerNorm(6)(x), expected) <= TOLERANCE
    assert rel_error(slides, expected) > 1e-2
    constant = np.full((1, 6), 3.0)
    with np.errstate(invalid="ignore"):
        assert np.isnan((constant - constant.mean()) / constant.std()).all()
    np.testing.assert_array_equal(LayerNorm(6)(constant), F.layer_norm(torch.from_numpy(constant), (6,)).numpy())


def test_gelu_is_the_tanh_approximation():
    x = np.random.default_rng(3).standard_normal((4, 5, 6)) * 3
    assert_matches_torch(GELU(), [x], lambda t, leaves: F.gelu(t[0], approximate="tanh"))
    exact_erf = F.gelu(torch.from_numpy(x)).numpy()
    assert rel_error(GELU()(x), exact_erf) > 1e-5          # the erf form is a different function


def test_relu():
    x = np.random.default_rng(4).standard_normal((4, 6))
    x += np.sign(x) * 0.1                                  # away from the kink
    assert_matches_torch(ReLU(), [x], lambda t, leaves: F.relu(t[0]))


@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax(axis):
    x = np.random.default_rng(5).standard_normal((3, 4, 5)) * 4
    x[0, 1, 2] = x[2, 3, 0] = -np.inf                      # masked entries, never a whole row
    assert_matches_torch(Softmax(axis=axis), [x], lambda t, leaves: F.softmax(t[0], dim=axis))


# ---------------------------------------------------------------- lookups and the loss
def test_embedding_with_repeated_ids():
    rng = np.random.default_rng(6)
    layer = Embedding(9, 5, rng=rng)
    ids = rng.integers(0, 9, size=(3, 7))
    ids[0, :3] = 4                                         # a repeated id receives every contribution
    reference = torch.nn.Embedding(9, 5, dtype=torch.float64)
    assert_matches_torch(layer, [ids], lambda t, leaves: functional_call(reference, {"weight": leaves["weight"]}, (t[0],)))


@pytest.mark.parametrize("ignore_index", [None, -1])
def test_cross_entropy(ignore_index):
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((2, 5, 11)) * 3
    targets = rng.integers(0, 11, size=(2, 5))
    if ignore_index is not None:
        targets[0, :2] = ignore_index

    def reference(t, leaves):
        return F.cross_entropy(t[0].reshape(-1, 11), t[1].reshape(-1), ignore_index=-100 if ignore_index is None else ignore_index)
    assert_matches_torch(CrossEntropyLoss(ignore_index=ignore_index), [logits, targets], reference)


# ---------------------------------------------------------------- attention
@pytest.mark.parametrize("causal, Tq, Tk, scale", [(False, 5, 7, None), (True, 6, 6, None), (True, 3, 7, None),
                                                    (False, 4, 4, 1.0)])
def test_scaled_dot_product_attention(causal, Tq, Tk, scale):
    """Our causal rule aligns the queries to the end of the keys: torch's `causal_lower_right`."""
    from torch.nn.attention.bias import causal_lower_right
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((2, 3, T, 4)) for T in (Tq, Tk, Tk))

    def reference(t, leaves):
        mask = causal_lower_right(Tq, Tk) if causal else None
        return F.scaled_dot_product_attention(t[0], t[1], t[2], attn_mask=mask, scale=scale)
    assert_matches_torch(ScaledDotProductAttention(causal=causal, scale=scale), [q, k, v], reference)


def test_causal_attention_with_fewer_queries_is_not_torchs_top_left_is_causal():
    """torch's `is_causal=True` aligns query 0 with key 0; for Tq < Tk that is a different rule from ours."""
    rng = np.random.default_rng(9)
    q, k, v = rng.standard_normal((1, 3, 4)), rng.standard_normal((1, 6, 4)), rng.standard_normal((1, 6, 4))
    top_left = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)), is_causal=True).numpy()
    assert rel_error(ScaledDotProductAttention(causal=True)(q, k, v), top_left) > 1e-3


class _MaskedAttention(ScaledDotProductAttention):
    """Attention with a fixed user mask, so that forward takes q, k, v only."""

    def __init__(self, mask):
        super().__init__()
        self.mask = mask

    def forward(self, q, k, v):
        return super().forward(q, k, v, mask=self.mask)


def test_attention_with_a_user_mask():
    """A bool mask means the same in both libraries: True = may attend."""
    rng = np.random.default_rng(10)
    q, k, v = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 6, 3)), rng.standard_normal((2, 6, 3))
    mask = rng.random((2, 5, 6)) < 0.6
    mask[..., 0] = True                                    # no query is left with nothing to see

    assert_matches_torch(_MaskedAttention(mask), [q, k, v],
                         lambda t, leaves: F.scaled_dot_product_attention(t[0], t[1], t[2], attn_mask=torch.from_numpy(mask)))


@pytest.mark.parametrize("causal", [False, True])
def test_multihead_self_attention(causal):
    rng = np.random.default_rng(11)
    layer = MultiHeadAttention(12, 3, causal=causal, rng=rng)
    for bias in (layer.b_q, layer.b_k, layer.b_v, layer.b_o):
        bias.data[...] = rng.standard_normal(12)
    reference = torch.nn.MultiheadAttention(12, 3, batch_first=True, dtype=torch.float64)

    def forward(t, leaves):
        mask = _future_masked(5) if causal else None
        out, _ = functional_call(reference, _attention_weights(leaves, "", ""), (t[0], t[0], t[0]),
                                 {"attn_mask": mask, "need_weights": False})
        return out
    assert_matches_torch(layer, [rng.standard_normal((2, 5, 12))], forward)


def test_multihead_cross_attention():
    rng = np.random.default_rng(12)
    layer = MultiHeadAttention(8, 2, rng=rng)
    reference = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)

    def forward(t, leaves):
        out, _ = functional_call(reference, _attention_weights(leaves, "", ""), (t[0], t[1], t[1]),
                                 {"need_weights": False})
        return out
    assert_matches_torch(layer, [rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 6, 8))], forward)


# ---------------------------------------------------------------- a whole block
@pytest.mark.parametrize("norm, activation", [("pre", "gelu"), ("pre", "relu"), ("post", "relu")])
def test_transformer_block_is_torchs_encoder_layer_with_a_causal_mask(norm, activation):
    rng = np.random.default_rng(13)
    block = TransformerBlock(12, 3, 20, norm=norm, causal=True, activation=activation, rng=rng)
    for name, param in block.named_parameters():           # non-trivial LayerNorm and bias values
        if param.data.ndim == 1:
            param.data += 0.3 * rng.standard_normal(param.shape)
    act = (lambda x: F.gelu(x, approximate="tanh")) if activation == "gelu" else F.relu
    reference = torch.nn.TransformerEncoderLayer(12, 3, dim_feedforward=20, dropout=0.0, activation=act,
                                                 layer_norm_eps=1e-5, batch_first=True, norm_first=(norm == "pre"),
                                                 dtype=torch.float64)

    def forward(t, leaves):
        params = _attention_weights(leaves, "attn.", "self_attn.")
        params.update(_linear_weights(leaves, "ff.fc1.", "linear1."))
        params.update(_linear_weights(leaves, "ff.fc2.", "linear2."))
        for ours, theirs in (("ln1", "norm1"), ("ln2", "norm2")):
            params.update({f"{theirs}.weight": leaves[f"{ours}.gamma"], f"{theirs}.bias": leaves[f"{ours}.beta"]})
        return functional_call(reference, params, (t[0],), {"src_mask": _future_masked(6)})
    assert_matches_torch(block, [rng.standard_normal((2, 6, 12))], forward)
