"""The fast tier equals the plain tier: every fast layer against its plain parent, and the checker on the fast forms.

For every case of the gradient checker's catalogue that contains a layer with a fast form, the case is
built twice from one seed; one copy is switched to the fast kernels (`use_kernels`), and both run the
same forward and backward. The outputs, the input gradients and every parameter gradient must agree:
float64 within 1e-12 relative (the worst entry against the largest), float32 within 1e-5. A failure
names the case and the array. Then `check_module` runs on the fast copy itself (float64, 1e-7): along random
directions, and at every coordinate in the full run.
"""

import copy

import numpy as np
import pytest

from minitransformer import GPT
from minitransformer.fast import fast_forms, kernels_of, use_kernels
from minitransformer.fast.attention import FastScaledDotProductAttention
from minitransformer.gradcheck import DEFAULT_TOLERANCE, check_module
from minitransformer.gradcheck.cases import all_cases

CASES = [case for case in all_cases()
         if kernels_of(use_kernels(case.build(np.random.default_rng(0))[0], "fast")) == "fast"]
TOLERANCE = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5}


def _magnitude(array):
    return np.max(np.abs(np.asarray(array, dtype=np.float64)), initial=0.0)


def _relative_difference(plain, fast, floor):
    """max |plain - fast| over the larger of the two arrays' largest entry and `floor`."""
    scale = max(_magnitude(plain), _magnitude(fast), floor, 1e-30)
    return np.max(np.abs(np.asarray(plain, dtype=np.float64) - np.asarray(fast, dtype=np.float64)), initial=0.0) / scale


def _as_dtype(case, dtype):
    """Build the case from seed 0, in `dtype`: parameters and float inputs cast."""
    module, inputs, forward = case.build(np.random.default_rng(0))
    for _, param in module.named_parameters():
        param.data = param.data.astype(dtype)
        param.grad = np.zeros_like(param.data)
    inputs = [value.astype(dtype) if isinstance(value, np.ndarray) and value.dtype.kind == "f" else value
              for value in inputs]
    return module, inputs, forward


def _run(module, inputs, forward, upstream):
    out = (forward or module.forward)(*inputs)
    module.zero_grad()
    grads = module.backward(upstream(out))
    grads = grads if isinstance(grads, tuple) else (grads,)
    return out, grads, {name: param.grad.copy() for name, param in module.named_parameters()}


def _exact_zeros(case):
    """The arrays of `case` that are zero in exact arithmetic (attention's key bias b_k: softmax ignores a
    shift of a whole row), found as those below 1e-10 of the largest in a float64 plain run.

    Both forms hold only rounding noise there, and a ratio of two noises means nothing, so these are
    compared against the case's largest array instead of their own; every other array is held to the
    full relative tolerance.
    """
    module, inputs, forward = _as_dtype(case, np.float64)
    out, grads, params = _run(module, inputs, forward, lambda out: np.random.default_rng(1).standard_normal(np.shape(out)))
    arrays = {"output": out, **{f"gradient of input {i}": g for i, g in enumerate(grads) if g is not None},
              **{f"gradient of parameter {name}": g for name, g in params.items()}}
    largest = max(_magnitude(a) for a in arrays.values())
    return {what for what, a in arrays.items() if _magnitude(a) <= 1e-10 * largest}


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_fast_layers_equal_their_plain_parents(case, dtype):
    _assert_fast_equals_plain(case, dtype)


def _runs_fast_attention(case):
    module = use_kernels(case.build(np.random.default_rng(0))[0], "fast")
    stack = [module]
    while stack:
        layer = stack.pop()
        if isinstance(layer, FastScaledDotProductAttention):
            return True
        stack += [child for _, child in layer.named_children()]
    return False


TILED_CASES = [case for case in CASES if _runs_fast_attention(case)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("case", TILED_CASES, ids=[case.id for case in TILED_CASES])
def test_fast_attention_tiled_equals_plain(case, dtype, monkeypatch):
    """The fast attention's tiled path (from Tk >= tiled_from keys), forced here on the catalogue's short
    sequences with tiles of 2 x 2, so that every case crosses tiles, diagonals and partial blocks."""
    monkeypatch.setattr(FastScaledDotProductAttention, "tiled_from", 1)
    monkeypatch.setattr(FastScaledDotProductAttention, "tile_size", 2)
    _assert_fast_equals_plain(case, dtype)
    if dtype == np.float64 and case.layer in ("ScaledDotProductAttention", "MultiHeadAttention"):   # the checker
        module, inputs, forward = case.build(np.random.default_rng(0))                            # on the layers
        use_kernels(module, "fast")                                                                # themselves
        check_module(module, inputs, forward=forward, rng=1).assert_ok(DEFAULT_TOLERANCE)


def _assert_fast_equals_plain(case, dtype):
    plain, inputs, forward_plain = _as_dtype(case, dtype)
    fast, inputs_fast, forward_fast = _as_dtype(case, dtype)
    use_kernels(fast, "fast")
    assert kernels_of(fast) == "fast" and kernels_of(plain) == "plain"
    draws = {}

    def upstream(out):                                   # the same upstream gradient for both, in out's dtype
        if "G" not in draws:
            draws["G"] = np.random.default_rng(1).standard_normal(np.shape(out))
        value = draws["G"].astype(np.asarray(out).dtype)
        return float(value) if np.ndim(out) == 0 else value

    out_plain, grads_plain, params_plain = _run(plain, inputs, forward_plain, upstream)
    out_fast, grads_fast, params_fast = _run(fast, inputs_fast, forward_fast, upstream)
    tolerance = TOLERANCE[np.dtype(dtype)]
    pairs = [("output", out_plain, out_fast)]
    pairs += [(f"gradient of input {i}", a, b) for i, (a, b) in enumerate(zip(grads_plain, grads_fast))
              if a is not None or b is not None]
    pairs += [(f"gradient of parameter {name}", params_plain[name], params_fast[name]) for name in params_plain]
    assert params_plain.keys() == params_fast.keys()
    largest = max(_magnitude(a) for _, a, _ in pairs if a is not None)
    zeros = _exact_zeros(case)
    for what, a, b in pairs:
        assert np.shape(a) == np.shape(b), f"{case.id} {what}: plain shape {np.shape(a)}, fast {np.shape(b)}"
        difference = _relative_difference(a, b, largest if what in zeros else 0.0)
        assert difference <= tolerance, f"{case.id} ({np.dtype(dtype).name}) {what}: fast differs from plain " \
                                        f"by {difference:.2e} relative, above {tolerance:.0e}"


@pytest.mark.parametrize("mode", ["directions", pytest.param("coordinates", marks=pytest.mark.coordinates)])
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_fast_layers_pass_the_gradient_checker(case, mode):
    module, inputs, forward = case.build(np.random.default_rng(0))
    use_kernels(module, "fast")
    check_module(module, inputs, forward=forward, rng=1, mode=mode).assert_ok(DEFAULT_TOLERANCE)


def test_every_fast_form_is_a_subclass_that_some_case_exercises():
    exercised = set()
    for case in CASES:
        module = use_kernels(case.build(np.random.default_rng(0))[0], "fast")
        exercised |= {type(layer) for layer in module.modules()}
    for plain, fast in fast_forms().items():
        assert issubclass(fast, plain) and fast is not plain
        assert fast in exercised, f"no gradient-check case runs {fast.__name__}"


def test_kernels_switch_keeps_names_values_and_init():
    options = dict(vocab_size=11, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=12, rng=3)
    plain, fast = GPT(**options), GPT(**options, kernels="fast")
    assert list(plain.state_dict()) == list(fast.state_dict())
    assert all(np.array_equal(a, b) for a, b in zip(plain.state_dict().values(), fast.state_dict().values()))
    assert kernels_of(plain) == "plain" and kernels_of(fast) == "fast"
    back = use_kernels(copy.deepcopy(fast), "plain")
    assert kernels_of(back) == "plain"
    with pytest.raises(ValueError, match="GPT expected kernels 'plain' or 'fast', got 'quick'"):
        GPT(**options, kernels="quick")


def test_a_model_reaches_the_fast_forms_only_through_what_the_fast_tier_registered(monkeypatch):
    """The models import nothing from fast/ (tests/test_import_order.py): GPT(kernels="fast") finds the forms the
    fast tier registered with core/tiers.py when it was imported. With none registered every layer stays plain,
    as in a student copy without a layer's fast file; fast/ still gives 0.4's names, the same objects."""
    from minitransformer import fast
    from minitransformer.core import tiers

    options = dict(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=6, rng=0)
    assert tiers.fast_forms() == fast_forms() and kernels_of(GPT(**options, kernels="fast")) == "fast"
    monkeypatch.setattr(tiers, "_fast_forms", None)
    assert tiers.fast_forms() == {} and kernels_of(GPT(**options, kernels="fast")) == "plain"
    tiers.register_fast_forms(fast.fast_forms)
    assert kernels_of(GPT(**options, kernels="fast")) == "fast"
    for name in ("use_kernels", "kernels_of", "check_kernels", "KERNELS"):
        assert getattr(fast, name) is getattr(tiers, name), name
    model = GPT(**options)
    assert list(fast.walk(model)) == list(model.modules())
