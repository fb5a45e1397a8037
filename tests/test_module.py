"""The module contract: parameter discovery, names, tying, accumulation, train/eval, state, seeds."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer import GPT, Linear, Module, Parameter


def tiny_gpt(**overrides):
    config = dict(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16, max_len=6, rng=0)
    config.update(overrides)
    return GPT(**config)


def test_parameter_grad_matches_data_and_zero_grad_clears_in_place():
    param = Parameter(np.ones((2, 3), dtype=np.float32))
    assert param.grad.shape == (2, 3) and param.grad.dtype == np.float32
    grad_array = param.grad
    param.grad += 5
    param.zero_grad()
    assert param.grad is grad_array and not param.grad.any()
    with pytest.raises(TypeError, match="floating-point"):
        Parameter(np.arange(3))


def test_modules_meets_every_module_once_itself_first_in_attribute_order():
    model = tiny_gpt(n_layers=1)
    modules = list(model.modules())
    assert modules[0] is model and len(modules) == len({id(module) for module in modules})
    assert [type(module).__name__ for module in modules[:5]] == [
        "GPT", "Embedding", "LearnedPositionalEmbedding", "Dropout", "TransformerBlock"]
    assert model.lm_head in modules and model.blocks[0].attn.attention in modules
    shared = Linear(2, 2, rng=0)
    pair = Pair(shared, shared)
    assert list(pair.modules()) == [pair, shared]


class Pair(Module):
    def __init__(self, first, second):
        self.first, self.second = first, second


def test_the_contract_is_in_its_own_file_and_its_names_are_still_found_in_module():
    """core/contract.py holds the backward contract's machinery; what was imported from core/module.py in 0.4
    is found there still, the very same objects, and `class Module` opens the file (after the docstring and
    imports: within its first 60 lines)."""
    from pathlib import Path

    from minitransformer.core import contract, module
    for name in ("InputChangedError", "fingerprint", "sample_positions", "WHOLE_ARRAY_ELEMENTS", "NOT_RUN"):
        assert getattr(module, name) is getattr(contract, name), name
    lines = Path(module.__file__).read_text(encoding="utf-8").splitlines()
    assert "class Module:" in lines[:60], "class Module no longer opens core/module.py"


def test_named_parameters_are_dotted_stable_and_list_the_tied_matrix_once():
    model = tiny_gpt()
    names = [name for name, _ in model.named_parameters()]
    assert "blocks.0.attn.w_q" in names and "blocks.1.ff.fc2.bias" in names and "ln_f.gamma" in names
    assert names == [name for name, _ in tiny_gpt().named_parameters()]
    assert len(names) == len(set(names))
    assert "lm_head.weight" not in names                      # tied: it *is* token_embedding.weight
    assert model.lm_head.weight is model.token_embedding.weight
    assert len(model.parameters()) == len({id(p) for p in model.parameters()})
    untied = tiny_gpt(tie_weights=False)
    assert "lm_head.weight" in [name for name, _ in untied.named_parameters()]
    assert untied.num_parameters() == model.num_parameters() + 11 * 8


def test_backward_accumulates_gradients_with_plus_equals():
    layer = Linear(3, 2, rng=0)
    x = np.random.default_rng(1).standard_normal((4, 3))
    dout = np.ones((4, 2))
    layer.forward(x)
    layer.backward(dout)
    once = layer.weight.grad.copy()
    layer.forward(x)
    layer.backward(dout)
    np.testing.assert_allclose(layer.weight.grad, 2 * once)
    layer.zero_grad()
    assert not layer.weight.grad.any() and not layer.bias.grad.any()


def test_tied_embedding_receives_both_contributions():
    """Tied gradient = lookup gradient + output-projection gradient of an untied twin with equal weights."""
    tied, untied = tiny_gpt(rng=4), tiny_gpt(rng=4, tie_weights=False)
    state = tied.state_dict()
    state["lm_head.weight"] = tied.token_embedding.weight.data.T.copy()
    untied.load_state_dict(state)
    ids = np.array([[1, 2, 3], [3, 3, 0]])
    dlogits = np.random.default_rng(0).standard_normal((2, 3, 11))
    np.testing.assert_allclose(tied.forward(ids), untied.forward(ids))
    tied.backward(dlogits)
    untied.backward(dlogits)
    expected = untied.token_embedding.weight.grad + untied.lm_head.weight.grad.T
    np.testing.assert_allclose(tied.token_embedding.weight.grad, expected, rtol=1e-12, atol=1e-15)
    assert not untied.token_embedding.weight.grad[4].any()       # id 4 never looked up ...
    assert tied.token_embedding.weight.grad[4].any()             # ... yet its tied row learns from the head


def test_train_and_eval_switch_every_dropout():
    model = tiny_gpt(dropout=0.5)
    ids = np.array([[1, 2, 3, 4]])
    model.eval()
    assert all(not block.drop1.training for block in model.blocks)
    np.testing.assert_array_equal(model.forward(ids), model.forward(ids))
    model.train()
    assert model.blocks[1].drop2.training
    assert not np.allclose(model.forward(ids), model.forward(ids))


@pytest.mark.parametrize("training", [True, False])
def test_evaluating_turns_dropout_off_and_restores_the_mode_even_after_an_error(training):
    model = tiny_gpt(dropout=0.5).train(training)
    with model.evaluating():
        assert not model.training and not model.blocks[0].drop1.training
    assert model.training == training and model.blocks[0].drop1.training == training
    with pytest.raises(ZeroDivisionError), model.evaluating():
        1 / 0
    assert model.blocks[1].drop2.training == training


def test_same_seed_same_numbers_and_different_seed_different_numbers():
    a, b, c = tiny_gpt(rng=5), tiny_gpt(rng=5), tiny_gpt(rng=6)
    for (name, pa), (_, pb), (_, pc) in zip(a.named_parameters(), b.named_parameters(), c.named_parameters()):
        np.testing.assert_array_equal(pa.data, pb.data, err_msg=name)
    assert not np.array_equal(a.blocks[0].attn.w_q.data, c.blocks[0].attn.w_q.data)
    generator = np.random.default_rng(9)
    assert not np.array_equal(Linear(3, 3, rng=generator).weight.data, Linear(3, 3, rng=generator).weight.data)


def test_state_dict_round_trips_and_a_bad_state_loads_nothing():
    source, target = tiny_gpt(rng=1), tiny_gpt(rng=2)
    target.load_state_dict(source.state_dict())
    ids = np.array([[1, 2, 3]])
    np.testing.assert_array_equal(source.forward(ids), target.forward(ids))
    state = source.state_dict()
    state["ln_f.gamma"] = np.ones(9)
    before = tiny_gpt(rng=3)
    snapshot = before.state_dict()
    with pytest.raises(ValueError, match="ln_f.gamma"):
        before.load_state_dict(state)
    for name, value in before.state_dict().items():
        np.testing.assert_array_equal(value, snapshot[name], err_msg=name)
    del state["ln_f.gamma"]
    with pytest.raises(KeyError, match="missing"):
        before.load_state_dict(state)


def test_load_state_dict_refuses_another_dtype_naming_the_parameter():
    source = tiny_gpt(rng=1)
    target = GPT(**dict(source.config, dtype=np.float32), rng=2)
    snapshot = target.state_dict()
    with pytest.raises(ValueError, match=r"parameter \S+ expected dtype float32, got float64"):
        target.load_state_dict(source.state_dict())
    for name, value in target.state_dict().items():
        np.testing.assert_array_equal(value, snapshot[name], err_msg=name)
    target.load_state_dict({name: value.astype(np.float32) for name, value in source.state_dict().items()})
    state = source.state_dict()
    state["ln_f.gamma"] = np.ones(state["ln_f.gamma"].shape, dtype=np.int64)
    with pytest.raises(ValueError, match=r"ln_f.gamma expected dtype float64, got int64"):
        source.load_state_dict(state)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_reaches_every_parameter_and_gradient(dtype):
    model = tiny_gpt(dtype=dtype)
    logits = model.forward(np.array([[1, 2, 3]]))
    assert logits.dtype == dtype
    model.backward(np.ones_like(logits))
    for name, param in model.named_parameters():
        assert param.data.dtype == dtype and param.grad.dtype == dtype, name
    with pytest.raises(TypeError, match="float32 or float64"):
        Linear(2, 2, dtype=np.float16)


def test_the_dtype_check_lives_with_the_other_checks_and_is_found_at_its_0_4_place():
    from minitransformer.core import checks, random
    assert random.check_float_dtype is checks.check_float_dtype
    assert checks.check_float_dtype("float32", "Here") == np.float32
    with pytest.raises(TypeError, match=r"^Here: dtype must be float32 or float64, got int64$"):
        checks.check_float_dtype(np.int64, "Here")


# ---------------------------------------------------------------- an input changed in place between forward and backward

def _layers_that_cache_their_input():
    from minitransformer import GELU, FeedForward, MultiHeadAttention, ScaledDotProductAttention, TransformerBlock
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 8))
    return {
        "Linear": (Linear(8, 4, rng=1), [x], (2, 5, 4)),
        "GELU": (GELU(), [x], (2, 5, 8)),
        "ScaledDotProductAttention": (ScaledDotProductAttention(causal=True), [x, x.copy(), x.copy()], (2, 5, 8)),
        "MultiHeadAttention": (MultiHeadAttention(8, 2, causal=True, rng=1), [x], (2, 5, 8)),
        "FeedForward": (FeedForward(8, 16, rng=1), [x], (2, 5, 8)),
        "TransformerBlock(post-norm)": (TransformerBlock(8, 2, 16, norm="post", rng=1), [x], (2, 5, 8)),
    }


@pytest.mark.parametrize("name", list(_layers_that_cache_their_input()))
def test_an_input_changed_in_place_before_backward_is_refused_naming_the_layer(name):
    from minitransformer.core.module import InputChangedError
    layer, inputs, out_shape = _layers_that_cache_their_input()[name]
    dout = np.ones(out_shape)
    layer(*inputs)
    layer.backward(dout)                                    # unchanged: fine
    layer(*inputs)
    inputs[0] += 1                                          # the caller's `x += 1`
    with pytest.raises(InputChangedError, match=rf"{type(layer).__name__}.*input 0 of forward .*changed in place"):
        layer.backward(dout)
    layer(*inputs)                                          # a new forward sees the new values: fine again
    layer.backward(dout)


def test_a_buffer_reused_for_the_next_batch_is_refused_and_a_copy_is_not():
    from minitransformer.core.module import InputChangedError
    layer = Linear(8, 4, rng=1)
    buffer = np.random.default_rng(0).normal(size=(3, 8))
    layer(buffer)
    buffer[...] = np.random.default_rng(1).normal(size=(3, 8))     # the next batch, read into the same array
    with pytest.raises(InputChangedError, match=r"Linear\(8 -> 4\)"):
        layer.backward(np.ones((3, 4)))
    layer(buffer.copy())
    buffer[...] = 0
    layer.backward(np.ones((3, 4)))


def test_the_check_is_in_the_base_class_not_in_each_layer():
    """A layer written by a student, with no line for it, gets the check too."""
    from minitransformer.core.module import InputChangedError, Module

    class Double(Module):
        def forward(self, x):
            self.x = x
            return 2 * x

        def backward(self, dout):
            return 2 * dout

    layer, x = Double(), np.arange(6.0)
    layer(x)
    x[::2] = -1
    with pytest.raises(InputChangedError):
        layer.backward(np.ones(6))


# ---------------------------------------------------------------- backward before forward, and a dout not shaped like the output

def test_backward_needs_a_forward_that_returned_and_a_dout_shaped_like_its_output():
    """A layer written by a student, with no line for it: the base class refuses what would be silently wrong."""
    from minitransformer.core.module import Module

    class Double(Module):
        def forward(self, x):
            if np.any(x < 0):
                raise ValueError("Double expected x >= 0")
            self.x = x
            return 2 * x

        def backward(self, dout):
            return 2 * dout

    layer = Double()
    with pytest.raises(RuntimeError, match=r"Double\(\): backward\(\) called before forward\(\)"):
        layer.backward(np.ones(3))
    layer(np.ones(3))
    np.testing.assert_array_equal(layer.backward(np.ones(3)), [2.0, 2.0, 2.0])
    for broadcast in (np.ones(1), np.ones((2, 3)), 1.0):                 # NumPy would broadcast each of them
        with pytest.raises(ValueError, match=r"Double\(\).backward expected dout of shape \(3,\), got"):
            layer.backward(broadcast)
    with pytest.raises(TypeError, match=r"Double\(\) expected dout of a real floating-point dtype"):
        layer.backward(np.ones(3, dtype=complex))
    with pytest.raises(ValueError, match="x >= 0"):
        layer(-np.ones(3))
    with pytest.raises(RuntimeError, match=r"called before forward\(\) \(or after a forward that raised\)"):
        layer.backward(np.ones(3))                                        # the caches are the earlier forward's


def test_dout_given_by_keyword_is_checked_as_dout_given_by_position():
    """0.4 checked only a positional dout: LayerNorm(5) after a (4, 5) forward took `dout=` of shape (1, 5),
    broadcast it, and beta.grad came out 4 times too small."""
    from minitransformer import LayerNorm

    layer = LayerNorm(5)
    x = np.random.default_rng(0).standard_normal((4, 5))
    layer(x)
    for dout in (np.ones((1, 5)), np.ones(5), 1.0, np.ones((5, 4))):     # the last of the output's size, transposed
        with pytest.raises(ValueError, match=r"LayerNorm\(5\).backward expected dout of shape \(4, 5\), got"):
            layer.backward(dout=dout)
        with pytest.raises(ValueError, match=r"LayerNorm\(5\).backward expected dout of shape \(4, 5\), got"):
            layer.backward(dout)
    with pytest.raises(TypeError, match=r"LayerNorm\(5\) expected dout of a real floating-point dtype"):
        layer.backward(dout=np.ones((4, 5), dtype=int))
    dx = layer.backward(dout=np.ones((4, 5)))
    assert dx.shape == (4, 5) and np.array_equal(layer.beta.grad, np.full(5, 4.0))

def test_a_forward_that_returns_no_array_leaves_the_gradient_to_its_backward_and_super_calls_are_the_subclass_own():
    """A loss returns a scalar and takes a multiplier; a subclass may hand its parent's backward another dout."""
    from minitransformer.core.module import Module

    class Total(Module):
        def forward(self, x):
            self.shape = np.shape(x)
            return float(np.sum(x))

        def backward(self, grad=1.0):
            return np.full(self.shape, grad)

    class Widened(Linear):                              # its parent's output has 2 more columns than its own
        def forward(self, x):
            return super().forward(x)[..., :2]

        def backward(self, dout):
            return super().backward(np.concatenate([dout, np.zeros((*dout.shape[:-1], 2))], axis=-1))

    total = Total()
    with pytest.raises(RuntimeError, match="before forward"):
        total.backward()
    total(np.ones((2, 3)))
    np.testing.assert_array_equal(total.backward(3.0), np.full((2, 3), 3.0))
    layer = Widened(3, 4, rng=0)
    x = np.random.default_rng(0).normal(size=(5, 3))
    y = layer(x)
    assert y.shape == (5, 2)
    np.testing.assert_allclose(layer.backward(np.ones((5, 2))), np.ones((5, 2)) @ layer.weight.data[:, :2].T)
    with pytest.raises(ValueError, match=r"expected dout of shape \(5, 2\), got \(5, 4\)"):
        layer.backward(np.ones((5, 4)))


@pytest.mark.parametrize("kernels", ["plain", "fast"])
def test_a_large_block_trains_although_numpy_reuses_what_dropout_handed_back(kernels):
    """Dropout at p = 0 hands its input back; in `h + drop(ff(h))` NumPy computes the sum into that temporary's
    buffer once it is over 256 KiB (temporary elision). That array is the caller's: no InputChangedError (0.4's
    `train --kernels plain` raised it on the default model, whose (12, 64, 128) float32 activations are 384 KiB)."""
    from minitransformer.layers.block import TransformerBlock

    rng = np.random.default_rng(0)
    block = TransformerBlock(128, 4, 512, dropout=0.0, dtype=np.float32, rng=rng)
    if kernels == "fast":
        from minitransformer.fast import use_kernels
        use_kernels(block, "fast")
    x = rng.standard_normal((12, 64, 128)).astype(np.float32)            # 384 KiB: above NumPy's 256 KiB threshold
    out = block(x)
    dx = block.backward(np.ones_like(out))
    assert dx.shape == x.shape and np.isfinite(dx).all()


def test_a_layer_that_hands_an_input_back_stops_watching_it():
    from minitransformer.layers.dropout import Dropout

    drop = Dropout(0.0)
    x = np.ones((2, 3))
    y = drop(x)
    y += 1                                                    # the caller's array: allowed
    assert y is x and np.array_equal(drop.backward(np.ones((2, 3))), np.ones((2, 3)))


# ---------------------------------------------------------------- which in-place changes are seen, for every shape

def _watched_layer(name, shape, dtype, kernels):
    """(layer, its inputs: standard normal arrays of `shape` and `dtype`) for one of the layers whose
    backward reads its inputs; kernels "fast" swaps in the fast tier's subclasses (use_kernels)."""
    from minitransformer import GELU, LayerNorm, MultiHeadAttention, ScaledDotProductAttention
    from minitransformer.fast import use_kernels

    rng = np.random.default_rng(sum(shape))
    C = shape[-1]
    layer = {"Linear": lambda: Linear(C, 3, dtype=dtype, rng=rng),
             "GELU": GELU,
             "LayerNorm": lambda: LayerNorm(C, dtype=dtype),
             "ScaledDotProductAttention": lambda: ScaledDotProductAttention(causal=True),
             "MultiHeadAttention": lambda: MultiHeadAttention(C, 2 if C % 2 == 0 else 1, causal=True, dtype=dtype,
                                                              rng=rng)}[name]()
    n_inputs = 3 if name == "ScaledDotProductAttention" else 1
    return use_kernels(layer, kernels), [rng.standard_normal(shape).astype(dtype) for _ in range(n_inputs)]


WATCHED_LAYERS = ["Linear", "GELU", "LayerNorm", "ScaledDotProductAttention", "MultiHeadAttention"]
EDITS = {                                          # name: the part of x changed in place, as an index
    "one row": (-1, 1), "the rows of one sequence": (1,), "one column": (..., 5), "x[..., 1::2]": (..., slice(1, None, 2)),
    "x[::2]": (slice(None, None, 2),), "x[..., 1:]": (..., slice(1, None)), "x[:, 1::2]": (slice(None), slice(1, None, 2)),
    "x[:, 1::2, ::2]": (slice(None), slice(1, None, 2), slice(None, None, 2)), "the whole array": (...,),
}


def _assert_edit_is_refused(name, shape, dtype, kernels, which, edit, change):
    """Forward, change `edit` of input `which` by `change` (an in-place function of the selected view), and
    expect backward to raise InputChangedError naming the input."""
    from minitransformer.core.module import InputChangedError

    layer, inputs = _watched_layer(name, shape, dtype, kernels)
    out = layer(*inputs)
    change(inputs[which][edit])
    with pytest.raises(InputChangedError, match=rf"\.backward: input {which} of forward \(shape"):
        layer.backward(np.ones_like(out))
        pytest.fail(f"{type(layer).__name__} ({kernels}, {np.dtype(dtype)}): input {which} of shape {shape} changed "
                    f"at {edit} after forward, and backward raised nothing")


def _times_three(view):
    view *= 3


SAMPLED_SHAPES = [(8, 8, 128), (12, 64, 128), (2, 64, 64)]    # above WHOLE_ARRAY_ELEMENTS: read as a sample
WHOLE_SHAPE = (3, 7, 20)                                       # below it: copied whole


def test_the_shapes_of_the_edits_below_are_sampled_but_one():
    """The test below must meet sampled arrays: 0.4's regression shape (4, 8, 128) has exactly 4096 elements, is
    copied whole since the threshold (so no sample of it can miss anything), and gave way to (8, 8, 128)."""
    from minitransformer.core.contract import WHOLE_ARRAY_ELEMENTS, fingerprint
    for shape in SAMPLED_SHAPES:
        x = np.zeros(shape)
        assert x.size > WHOLE_ARRAY_ELEMENTS and len(fingerprint(x)) < x.nbytes, shape
    assert len(fingerprint(np.zeros(WHOLE_SHAPE))) == np.zeros(WHOLE_SHAPE).nbytes


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("shape", [*SAMPLED_SHAPES, WHOLE_SHAPE])
def test_a_change_to_whole_rows_columns_slices_or_the_array_is_refused_for_every_shape(shape, edit, dtype):
    """Powers of two included: 0.4 read 16 elements at a stride of size // 16, all in column 0 for (4, 8, 128)
    (and for (8, 8, 128), which is sampled today), so `x[..., 1::2] *= 3` passed unseen and Linear and GELU
    returned the gradient of another input."""
    for name in WATCHED_LAYERS:
        for kernels in ("plain", "fast"):
            for which in range(3 if name == "ScaledDotProductAttention" else 1):
                _assert_edit_is_refused(name, shape, dtype, kernels, which, EDITS[edit], _times_three)


@pytest.mark.parametrize("kernels", ["plain", "fast"])
@pytest.mark.parametrize("edit", list(EDITS))
def test_a_change_to_heads_that_multi_head_attention_hands_over_as_views_is_refused(edit, kernels):
    """q, k, v as MultiHeadAttention gives them to attention: (B, H, T, hs) views of one (B, T, 3, H, hs) buffer,
    not contiguous; their fingerprint reads them in memory order."""
    from minitransformer import ScaledDotProductAttention
    from minitransformer.core.module import InputChangedError
    from minitransformer.fast import use_kernels

    qkv = np.random.default_rng(0).standard_normal((12, 64, 3, 4, 32)).astype(np.float32)
    heads = [qkv[:, :, part].transpose(0, 2, 1, 3) for part in range(3)]           # (B, H, T, hs) each
    for which in range(3):
        attention = use_kernels(ScaledDotProductAttention(causal=True), kernels)
        out = attention(*heads)
        _times_three(heads[which][EDITS[edit]])
        with pytest.raises(InputChangedError, match=rf"input {which} of forward"):
            attention.backward(np.ones_like(out))
            pytest.fail(f"{kernels} attention: input {which} changed at {edit}, and backward raised nothing")


CHANGES = {"*= 3": _times_three, "+= 1": lambda view: view.__iadd__(1), "= 0": lambda view: view.fill(0)}


@settings(max_examples=100)
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]), kernels=st.sampled_from(["plain", "fast"]),
       name=st.sampled_from(WATCHED_LAYERS), change=st.sampled_from(["*= 3", "+= 1", "= 0"]))
def test_any_strided_slice_along_any_axis_changed_in_place_is_refused(data, dtype, kernels, name, change):
    """Random shapes (sides of 1 to 80 or a power of two up to 128; up to 2**18 elements, so that both the
    small arrays copied whole and the larger ones sampled are met), an axis, a start and a stride of 2 to 8."""
    sides = st.one_of(st.integers(1, 80), st.sampled_from([2, 4, 8, 16, 32, 64, 128]))
    n_axes = 3 if name == "MultiHeadAttention" else data.draw(st.integers(2 if "Attention" in name else 1, 4))
    shape = data.draw(st.lists(sides, min_size=n_axes, max_size=n_axes).filter(lambda s: np.prod(s) <= 2**18))
    axis = data.draw(st.integers(0, n_axes - 1), label="axis")
    start = data.draw(st.integers(0, shape[axis] - 1), label="start")
    stride = data.draw(st.integers(2, 8), label="stride")
    which = data.draw(st.integers(0, 2), label="input") if name == "ScaledDotProductAttention" else 0
    edit = (slice(None),) * axis + (slice(start, None, stride),)
    _assert_edit_is_refused(name, tuple(shape), dtype, kernels, which, edit, CHANGES[change])


# ---------------------------------------------------------------- the fingerprint: copied whole, or read as a sample

def test_any_single_element_of_an_array_at_the_whole_copy_threshold_changed_alone_is_seen():
    """Up to WHOLE_ARRAY_ELEMENTS = 4096 elements an array is its own fingerprint: each of the 4096 elements of
    (4, 8, 128), exactly at the threshold, changed alone is seen (a threshold of 64, or of 4096 bytes, read a
    sample of it and missed most); and through a layer, in float32 too."""
    from minitransformer import GELU
    from minitransformer.core.contract import WHOLE_ARRAY_ELEMENTS, InputChangedError, fingerprint

    for dtype in (np.float64, np.float32):
        x = np.random.default_rng(0).standard_normal((4, 8, 128)).astype(dtype)
        assert x.size == WHOLE_ARRAY_ELEMENTS
        before, flat, unseen = fingerprint(x), x.reshape(-1), []
        for index in range(flat.size):
            kept = flat[index]
            flat[index] = kept + 1
            if fingerprint(x) == before:
                unseen.append(np.unravel_index(index, x.shape))
            flat[index] = kept
        assert not unseen, f"{len(unseen)} single elements of {x.dtype} {x.shape} changed unseen, e.g. {unseen[:3]}"
        layer = GELU()
        layer(x)
        x[2, 5, 77] += 1
        with pytest.raises(InputChangedError, match=r"GELU\(\)\.backward: input 0 of forward \(shape \(4, 8, 128\)\)"):
            layer.backward(np.ones_like(x))


def test_an_array_above_the_threshold_is_read_as_one_element_of_every_row_and_one_of_every_column():
    """Beyond 4096 elements the fingerprint holds rows + columns elements (rows: the lines along the last axis),
    not the array: 4097 = 17 x 241 gives 17 + 241 = 258, (8, 8, 128) 64 + 128 = 192, (2, 3, 1000) 6 + 1000."""
    from minitransformer.core.contract import fingerprint
    for shape, sampled in [((17, 241), 258), ((8, 8, 128), 192), ((2, 3, 1000), 1006)]:
        for dtype in (np.float32, np.float64):
            assert len(fingerprint(np.zeros(shape, dtype))) == sampled * np.dtype(dtype).itemsize, (shape, dtype)


@pytest.mark.parametrize("shape", [(3, 2000), (2, 3, 1000), (8, 8, 128), (12, 64, 128)],
                         ids=["wide 2-D", "wide 3-D", "wide 3-D, 64 rows", "tall"])
def test_each_row_and_each_column_changed_alone_is_seen_wide_arrays_too(shape):
    """By brute force over every line: each row (line along the last axis) and each column (one index of the last
    axis, in every row), changed alone, changes the fingerprint; wide arrays (more columns than rows) included,
    where every column rests on its own sampled element. Through a layer: one column of a wide input."""
    from minitransformer import GELU
    from minitransformer.core.contract import InputChangedError, fingerprint

    x = np.random.default_rng(1).standard_normal(shape)
    lines, before, unseen = x.reshape(-1, shape[-1]), fingerprint(x), []
    for what, count, part in (("row", lines.shape[0], lambda i: lines[i]),
                              ("column", lines.shape[1], lambda i: lines[:, i])):
        for index in range(count):
            kept = part(index).copy()
            part(index)[...] = kept + 1
            if fingerprint(x) == before:
                unseen.append(f"{what} {index}")
            part(index)[...] = kept
    assert not unseen, f"{shape}: changed alone and unseen: {unseen[:5]} ({len(unseen)} in all)"
    layer = GELU()
    layer(x)
    lines[:, shape[-1] // 3] *= 3
    with pytest.raises(InputChangedError, match="input 0 of forward"):
        layer.backward(np.ones_like(x))


def test_sample_positions_are_the_weyl_sequences_of_the_docstring_computed_by_hand():
    """Row r (r < rows) is read at column floor(columns * frac(phi (r + 1))), phi = (1 + sqrt 5) / 2; column c at
    row floor(rows * frac(sqrt 2 (c + 1))). For (5, 3): frac(phi k) = .618, .236, .854, .472, .090 -> columns
    1, 0, 2, 1, 0; frac(sqrt 2 k) = .414, .828, .243 -> rows 2, 4, 1. For (2, 2, 3), rows (b, t) in order, 4 of
    them: columns 1, 0, 2, 1 and rows 1, 3, 0, flat (b * 2 + t) * 3 + c. A 1-D array is one row."""
    from minitransformer.core.contract import sample_positions

    (rows, columns), flat = sample_positions((5, 3))
    assert rows.tolist() == [0, 1, 2, 3, 4, 2, 4, 1] and columns.tolist() == [1, 0, 2, 1, 0, 0, 1, 2]
    assert flat.tolist() == [r * 3 + c for r, c in zip(rows.tolist(), columns.tolist())]
    positions, flat = sample_positions((2, 2, 3))
    assert [axis.tolist() for axis in positions] == [[0, 0, 1, 1, 0, 1, 0],      # b
                                                     [0, 1, 0, 1, 1, 1, 0],      # t
                                                     [1, 0, 2, 1, 0, 1, 2]]      # c
    assert flat.tolist() == [1, 3, 8, 10, 3, 10, 2]
    (columns,), flat = sample_positions((7,))
    assert columns.tolist() == flat.tolist() == [4, 0, 1, 2, 3, 4, 5, 6]        # floor(7 x .618) = 4, then each


def test_a_transposed_view_is_read_in_memory_order_as_the_array_it_was_transposed_from():
    """Attention's heads, (B, H, T, hs) views of one (B, T, 3, H, hs) projection, are read as the (B, T, H, hs)
    array in memory (the same bytes, rows along hs: B*T*H + hs elements); a transposed matrix as the matrix."""
    from minitransformer.core.contract import fingerprint

    qkv = np.random.default_rng(2).standard_normal((2, 64, 3, 4, 32))
    for part in range(3):
        in_memory = qkv[:, :, part]                                     # (B, T, H, hs), strided
        heads = in_memory.transpose(0, 2, 1, 3)                         # (B, H, T, hs)
        assert fingerprint(heads) == fingerprint(in_memory)
        assert len(fingerprint(heads)) == (2 * 64 * 4 + 32) * 8
    matrix = np.random.default_rng(3).standard_normal((100, 60))
    assert fingerprint(matrix.T) == fingerprint(matrix) and len(fingerprint(matrix.T)) == (100 + 60) * 8


# ---------------------------------------------------------------- which methods and which arrays the contract takes in

def test_a_subclass_that_writes_only_forward_or_only_backward_keeps_the_whole_contract():
    """keep_contract wraps the methods a class writes itself: a forward alone, or a backward alone."""
    from minitransformer.core.module import InputChangedError

    class Halved(Linear):                               # forward only: Linear's backward
        def forward(self, x):
            return super().forward(x / 2)

    class Doubled(Linear):                              # backward only: Linear's forward
        def backward(self, dout):
            return 2 * super().backward(dout)

    x = np.random.default_rng(0).normal(size=(4, 3))
    for layer in (Halved(3, 2, rng=0), Doubled(3, 2, rng=0)):
        name = type(layer).__name__
        with pytest.raises(RuntimeError, match="before forward"):
            layer.backward(np.ones((4, 2)))
        layer(x)
        assert layer.backward(np.ones((4, 2))).shape == (4, 3), name
        for wrong in (np.ones((1, 2)), np.ones((2, 4))):
            with pytest.raises(ValueError, match=r"expected dout of shape \(4, 2\)"):
                layer.backward(wrong)
        changed = x.copy()
        layer(changed)
        changed[1] += 1
        with pytest.raises(InputChangedError, match="input 0 of forward"):
            layer.backward(np.ones((4, 2)))


def test_an_array_a_subclass_was_given_is_watched_when_it_hands_its_parent_another():
    """Gated caches its own x for its backward and gives Linear x * x: x changed in place is refused, as is the
    array Linear was given."""
    from minitransformer.core.module import InputChangedError

    class Gated(Linear):
        def forward(self, x):
            self.x_in = x
            return super().forward(x * x)

        def backward(self, dout):
            return 2 * self.x_in * super().backward(dout)

    layer, x = Gated(3, 2, rng=0), np.random.default_rng(0).normal(size=(4, 3))
    layer(x)
    x *= 3
    with pytest.raises(InputChangedError, match=r"Linear\(3 -> 2\)\.backward: input 0 of forward"):
        layer.backward(np.ones((4, 2)))


def test_an_array_given_by_keyword_or_of_no_dimension_is_watched_and_named():
    """Every array argument of forward is watched: one given by keyword, named `argument factor=`, and a 0-d array
    (a scalar held in an array), named by its position."""
    from minitransformer.core.module import InputChangedError, Module

    class Scaled(Module):
        def forward(self, x, factor=None, *, weight=None):
            self.factor = weight if factor is None else factor
            return x * self.factor

        def backward(self, dout):
            return dout * self.factor

    x = np.ones((2, 3))
    for call, name in ((lambda layer, f: layer(x, weight=f), "argument weight="),
                       (lambda layer, f: layer(x, f), "input 1")):
        for factor in (np.full(3, 2.0), np.array(2.0)):
            layer = Scaled()
            call(layer, factor)
            factor[...] = 5.0
            shape = re.escape(str(factor.shape))
            with pytest.raises(InputChangedError, match=rf"Scaled\(\)\.backward: {name} of forward \(shape {shape}\)"):
                layer.backward(np.ones((2, 3)))


def test_a_property_that_reads_a_cache_before_forward_names_it():
    """`_require` refuses a cache that forward has not set, also one that __init__ set to None."""
    from minitransformer.core.module import Module

    class Weights(Module):
        def __init__(self):
            self.alpha = None

        @property
        def entropy(self):
            self._require("alpha")
            return float(-(self.alpha * np.log(self.alpha)).sum())

    with pytest.raises(RuntimeError, match=r"Weights\(\): nothing cached in `alpha` yet; call forward\(\) first"):
        Weights().entropy
