"""Parity with PyTorch: a layer against its PyTorch equivalent, float64, same weights, relative error <= 1e-10.

Finite differences prove that each backward matches its own forward; they cannot prove that the
forward is what the field calls "LayerNorm" or "multi-head attention". PyTorch's layers are that
definition. For each layer the forward output and the gradients of sum(G * output), G random, with
respect to every float input and every parameter must agree.

PyTorch sees the project's parameters in the project's own layout: each one becomes a leaf tensor,
and the PyTorch module is called through `torch.func.functional_call` with its weights written as
expressions of those leaves (a transpose for `nn.Linear`'s (out, in) weight, a concatenation for
`nn.MultiheadAttention`'s fused in_proj). The leaves' gradients are then directly comparable with ours.

PyTorch is optional (`pip install -e ".[parity]"` installs it). Without it `torch`, `F` and
`functional_call` are None and every test marked `@requires_torch` is skipped on its own, while the
other tests of the same file still run.
"""

import numpy as np
import pytest

from minitransformer import rel_error

try:
    import torch
except ImportError:                                        # the parity extra is not installed
    torch = None

F = torch.nn.functional if torch is not None else None
functional_call = torch.func.functional_call if torch is not None else None
requires_torch = pytest.mark.skipif(torch is None, reason='PyTorch is missing: pip install -e ".[parity]"')

TOLERANCE = 1e-10
# Attention's key bias b_k adds the same q . b_k to every score of a row, which the softmax ignores:
# its gradient is exactly zero, and both libraries return rounding noise (~1e-17). Gradients whose
# two sides are both below this floor are equal; rel_error between two noises would mean nothing.
ZERO_FLOOR = 1e-13


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


def linear_weights(leaves, prefix, theirs):
    """nn.Linear's {weight (out, in), bias} from our {weight (in, out), bias}."""
    params = {f"{theirs}weight": leaves[f"{prefix}weight"].T}
    if f"{prefix}bias" in leaves:
        params[f"{theirs}bias"] = leaves[f"{prefix}bias"]
    return params


def attention_weights(leaves, prefix, theirs):
    """nn.MultiheadAttention's fused in_proj (3C, C) and out_proj from our w_q, w_k, w_v, w_o (C, C) and biases."""
    leaf = {name: leaves[prefix + name] for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")}
    return {f"{theirs}in_proj_weight": torch.cat([leaf["w_q"].T, leaf["w_k"].T, leaf["w_v"].T]),
            f"{theirs}in_proj_bias": torch.cat([leaf["b_q"], leaf["b_k"], leaf["b_v"]]),
            f"{theirs}out_proj.weight": leaf["w_o"].T, f"{theirs}out_proj.bias": leaf["b_o"]}


def future_masked(T):
    """nn.MultiheadAttention's mask convention: True = may NOT attend (the opposite of ours)."""
    return torch.ones(T, T, dtype=torch.bool).triu(1)


def block_weights(leaves, attentions, norms):
    """The parameters of nn.TransformerEncoderLayer or nn.TransformerDecoderLayer from a block's leaves.

    Args:
        leaves: as given to a reference (our parameter names -> leaf tensors).
        attentions: {our attention prefix: theirs}, e.g. {"attn.": "self_attn."}.
        norms: {our LayerNorm: theirs}, e.g. {"ln1": "norm1"}.
    The feed-forward layer is always ours ff.fc1, ff.fc2 -> their linear1, linear2.
    """
    params = {}
    for ours, theirs in attentions.items():
        params.update(attention_weights(leaves, ours, theirs))
    params.update(linear_weights(leaves, "ff.fc1.", "linear1."))
    params.update(linear_weights(leaves, "ff.fc2.", "linear2."))
    for ours, theirs in norms.items():
        params.update({f"{theirs}.weight": leaves[f"{ours}.gamma"], f"{theirs}.bias": leaves[f"{ours}.beta"]})
    return params


def shift_vectors(module, rng, std=0.3):
    """Add N(0, std^2) to every 1-D parameter (biases, LayerNorm's gamma and beta): non-trivial values,
    so that a bias or gain in the wrong place cannot hide behind an initial 0 or 1."""
    for _, param in module.named_parameters():
        if param.data.ndim == 1:
            param.data += std * rng.standard_normal(param.shape)
    return module
