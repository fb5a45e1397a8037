"""Layers refuse arrays of the wrong kind with one TypeError, in the plain and the fast form alike.

Layers that take activations want real floats: complex and object arrays used to pass silently
(LayerNorm of a complex array gave complex garbage), and integer or bool arrays made the fast forms,
which compute in the input's dtype, disagree with the plain ones (FastLayerNorm's row means of an
integer array were 0). Layers that take token ids want integers in range. The message names the
layer, what it expected and the dtype it was given.
"""

import re

import numpy as np
import pytest

from minitransformer import (
    GELU,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    FeedForward,
    LayerNorm,
    LearnedPositionalEmbedding,
    Linear,
    MultiHeadAttention,
    ReLU,
    ScaledDotProductAttention,
    SinusoidalPositionalEncoding,
    Softmax,
    TiedLMHead,
    TransformerBlock,
)
from minitransformer.fast import fast_forms, use_kernels
from minitransformer.variants.tiled_attention import TiledAttention

RNG = np.random.default_rng(0)
X3 = RNG.standard_normal((2, 4, 3))
X4 = RNG.standard_normal((2, 4, 4))
TARGETS = np.array([[0, 1, 2, 0], [1, 1, 2, 0]])

# name -> (build the layer, its float inputs, a function (layer, inputs) -> forward call)
LAYERS = {
    "Linear": (lambda: Linear(3, 2, rng=0), [X3], lambda layer, x: layer.forward(*x)),
    "LayerNorm": (lambda: LayerNorm(3), [X3], lambda layer, x: layer.forward(*x)),
    "Softmax": (lambda: Softmax(), [X3], lambda layer, x: layer.forward(*x)),
    "GELU": (lambda: GELU(), [X3], lambda layer, x: layer.forward(*x)),
    "ReLU": (lambda: ReLU(), [X3], lambda layer, x: layer.forward(*x)),
    "Dropout": (lambda: Dropout(0.5, rng=0), [X3], lambda layer, x: layer.forward(*x)),
    "TiedLMHead": (lambda: TiedLMHead(Embedding(5, 3, rng=0)), [X3], lambda layer, x: layer.forward(*x)),
    "SinusoidalPositionalEncoding": (lambda: SinusoidalPositionalEncoding(4, 8), [X4],
                                     lambda layer, x: layer.forward(*x)),
    "LearnedPositionalEmbedding": (lambda: LearnedPositionalEmbedding(8, 3, rng=0), [X3],
                                   lambda layer, x: layer.forward(*x)),
    "ScaledDotProductAttention": (lambda: ScaledDotProductAttention(causal=True), [X3, X3, X3],
                                  lambda layer, x: layer.forward(*x)),
    "TiledAttention": (lambda: TiledAttention(causal=True, block_size=2), [X3, X3, X3],
                       lambda layer, x: layer.forward(*x)),
    "MultiHeadAttention": (lambda: MultiHeadAttention(4, 2, rng=0), [X4], lambda layer, x: layer.forward(*x)),
    "MultiHeadAttention (cross)": (lambda: MultiHeadAttention(4, 2, rng=0), [X4, X4],
                                   lambda layer, x: layer.forward(x[0], context=x[1])),
    "CrossEntropyLoss (logits)": (lambda: CrossEntropyLoss(), [X3], lambda layer, x: layer.forward(x[0], TARGETS)),
}

BAD_DTYPES = {
    "complex": lambda x: x.astype(np.complex128),
    "object": lambda x: x.astype(object),
    "int": lambda x: np.round(x).astype(np.int64),
    "bool": lambda x: x > 0,
}


def _layer_name(layer):
    return re.escape(repr(layer))


@pytest.mark.parametrize("bad", BAD_DTYPES, ids=str)
@pytest.mark.parametrize("name", LAYERS, ids=str)
def test_a_float_layer_refuses_complex_object_int_and_bool_arrays_in_every_argument(name, bad):
    build, inputs, call = LAYERS[name]
    for position in range(len(inputs)):
        wrong = list(inputs)
        wrong[position] = BAD_DTYPES[bad](inputs[position])
        layer = build()
        message = (rf"{_layer_name(layer)} expected \w+ of a real floating-point dtype \(e\.g\. float32 or float64\), "
                   rf"got dtype {re.escape(str(wrong[position].dtype))}")
        with pytest.raises(TypeError, match=message):
            call(layer, wrong)
        call(build(), inputs)                                  # and the float inputs still go through


FAST_LAYERS = [name for name, (build, _, _) in LAYERS.items() if type(build()) in fast_forms()]


@pytest.mark.parametrize("name", FAST_LAYERS, ids=str)
def test_the_fast_form_refuses_what_the_plain_form_refuses_with_the_same_message(name):
    build, inputs, call = LAYERS[name]
    plain, fast = build(), use_kernels(build(), "fast")
    assert type(fast) is not type(plain)                    # else this compares the plain form with itself
    for bad in BAD_DTYPES.values():
        wrong = [bad(inputs[0]), *inputs[1:]]
        with pytest.raises(TypeError) as plain_error:
            call(plain, wrong)
        with pytest.raises(TypeError) as fast_error:
            call(fast, wrong)
        assert str(fast_error.value) == str(plain_error.value)


def test_every_fast_form_is_covered_by_the_test_above():
    """A new fast form must join LAYERS, so that a dtype check it skips would be caught."""
    covered = {type(use_kernels(build(), "fast")) for build, _, _ in LAYERS.values()}
    missing = [fast.__name__ for plain, fast in fast_forms().items() if fast not in covered and plain is not Embedding]
    assert missing == []


def test_float32_and_float64_inputs_are_accepted_by_the_fast_forms_too():
    for build, inputs, call in LAYERS.values():
        for dtype in (np.float32, np.float64):
            call(use_kernels(build(), "fast"), [x.astype(dtype) for x in inputs])


def test_composite_layers_name_the_inner_layer_that_refused():
    with pytest.raises(TypeError, match=r"Linear\(4 -> 8\) expected input of a real floating-point dtype"):
        FeedForward(4, 8, rng=0).forward(X4.astype(np.complex128))
    with pytest.raises(TypeError, match=r"LayerNorm\(4\) expected input of a real floating-point dtype"):
        TransformerBlock(4, 2, 8, rng=0).forward(X4.astype(object))


@pytest.mark.parametrize("kernels", ["plain", "fast"])
@pytest.mark.parametrize("ids, error, message", [
    (np.array([[0, -1]]), IndexError, r"Embedding\(5, 3\) expected token ids in \[0, 5\), got -1"),
    (np.array([[0.0, 1.0]]), TypeError, r"Embedding\(5, 3\) expected integer token ids, got dtype float64"),
    (np.array([[1 + 0j, 2]]), TypeError, r"Embedding\(5, 3\) expected integer token ids, got dtype complex128"),
    (np.array([[1, 2]], dtype=object), TypeError, r"Embedding\(5, 3\) expected integer token ids, got dtype object"),
])
def test_embedding_wants_integer_ids_in_range_in_both_forms(kernels, ids, error, message):
    layer = use_kernels(Embedding(5, 3, rng=0), kernels)
    with pytest.raises(error, match=message):
        layer.forward(ids)


@pytest.mark.parametrize("targets, error, message", [
    (np.array([1, -1]), IndexError, r"CrossEntropyLoss\(\) \(targets\) expected token ids in \[0, 3\), got -1"),
    (np.array([1.0, 2.0]), TypeError, r"CrossEntropyLoss\(\) \(targets\) expected integer token ids, got dtype float64"),
    (np.array([True, False]), TypeError, r"expected integer token ids, got dtype bool"),
    (np.array([1, 2], dtype=object), TypeError, r"expected integer token ids, got dtype object"),
])
def test_the_loss_wants_integer_targets_in_range(targets, error, message):
    with pytest.raises(error, match=message):
        CrossEntropyLoss().forward(np.zeros((2, 3)), targets)


def test_relu_of_minus_infinity_is_zero_with_zero_gradient():
    relu = ReLU()
    np.testing.assert_array_equal(relu.forward(np.array([-np.inf, -1.0, 2.0, np.inf])), [0.0, 0.0, 2.0, np.inf])
    np.testing.assert_array_equal(relu.backward(np.ones(4)), [0.0, 0.0, 1.0, 1.0])


@pytest.mark.parametrize("dtype", [np.complex128, object, np.int64, bool])
@pytest.mark.parametrize("kernels", ["plain", "fast"])
def test_backward_refuses_an_upstream_gradient_that_is_not_real_floating_point(dtype, kernels):
    """A complex or object dout would flow into the parameter gradients (or fail inside NumPy's casting)."""
    from minitransformer import GELU, LayerNorm, Linear
    from minitransformer.fast import use_kernels

    rng = np.random.default_rng(0)
    for layer in (Linear(3, 2, rng=0), LayerNorm(3), GELU()):
        use_kernels(layer, kernels)
        out = layer.forward(rng.standard_normal((2, 3)))
        with pytest.raises(TypeError, match=rf"{type(layer).__name__.removeprefix('Fast')}.*expected dout of a real "
                                            r"floating-point dtype"):
            layer.backward(np.ones(out.shape, dtype=dtype))
