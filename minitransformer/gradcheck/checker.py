"""Numerical gradient checking, shipped in the package so users and tests call the same code.

The idea (CS231n's `gradient_check.py`): pick a random upstream gradient G of
the module's output and the scalar L = sum(G * forward(inputs)). Then
dL/dinput is exactly what `backward(G)` must return, and it can also be
estimated, one coordinate at a time, by central differences

    dL/dx_i ~ (L(x + eps e_i) - L(x - eps e_i)) / (2 eps),

whose error is O(eps^2). Comparing the two with `rel_error` (largest
difference over largest magnitude) gives one number per input and parameter;
in float64 a correct backward scores around 1e-10, a wrong one around 1.

Everything runs in float64: in float32 the difference quotient itself is only
good to about 1e-3 and proves nothing.
"""

from dataclasses import dataclass

import numpy as np

from ..core.random import as_generator

DEFAULT_TOLERANCE = 1e-7

# Below this, in absolute value, a gradient is rounding noise. Some gradients are exactly zero in
# exact arithmetic: attention's key bias b_k shifts every score of a row by the same q . b_k, which
# the softmax ignores. Both sides are then noise (about 1e-16 analytic, 1e-10 numeric) and their
# rel_error is meaningless, so a comparison whose two sides are both below this floor counts as 0.
ZERO_GRADIENT_FLOOR = 1e-8


def rel_error(analytic, numeric):
    """max |a - n| / max(|a| + |n|), 0 when both are all zero, inf when either holds NaN or inf.

    Args:
        analytic, numeric: arrays of the same shape.
    Returns:
        float in [0, 1].
    """
    analytic, numeric = np.asarray(analytic, dtype=np.float64), np.asarray(numeric, dtype=np.float64)
    if analytic.shape != numeric.shape:
        raise ValueError(f"rel_error expected arrays of the same shape, got {analytic.shape} and {numeric.shape}")
    if not (np.isfinite(analytic).all() and np.isfinite(numeric).all()):
        return float("inf")                 # a NaN or inf gradient is as wrong as it gets, and compares as such
    scale = np.max(np.abs(analytic) + np.abs(numeric), initial=0.0)
    if scale == 0.0:
        return 0.0
    return float(np.max(np.abs(analytic - numeric)) / scale)


def numerical_gradient(loss_fn, array, eps=1e-5):
    """Central-difference gradient of the scalar `loss_fn()` with respect to `array`, perturbed in place.

    Args:
        loss_fn: callable with no arguments returning a float; it must read `array`.
        array: float64 ndarray (an input or a parameter's `.data`); restored on return.
        eps: step size.
    Returns:
        grad: float64 array of array's shape.
    """
    grad = np.zeros(array.shape, dtype=np.float64)
    flat, flat_grad = array.reshape(-1), grad.reshape(-1)    # views: writing flat changes array
    for i in range(flat.size):
        original = flat[i]
        flat[i] = original + eps
        loss_plus = loss_fn()
        flat[i] = original - eps
        loss_minus = loss_fn()
        flat[i] = original
        flat_grad[i] = (loss_plus - loss_minus) / (2 * eps)
    return grad


@dataclass
class GradientComparison:
    """The check of one input or parameter: its name, error and worst coordinate."""

    name: str
    error: float
    worst_index: tuple
    analytic: float
    numeric: float

    def describe(self):
        if self.error == 0.0 and max(abs(self.analytic), abs(self.numeric)) > 0:
            return f"{self.name}: zero gradient (both sides below {ZERO_GRADIENT_FLOOR:.0e})"
        return (f"{self.name}: rel_error {self.error:.2e}, worst at index {self.worst_index}: "
                f"backward gave {self.analytic:.6e}, finite differences {self.numeric:.6e}")


@dataclass
class GradcheckReport:
    """All comparisons of one module; `inputs` and `params` are lists of GradientComparison."""

    module: str
    inputs: list
    params: list

    @property
    def worst_input_error(self):
        return max((c.error for c in self.inputs), default=0.0)

    @property
    def worst_param_error(self):
        return max((c.error for c in self.params), default=0.0)

    def passed(self, tolerance=DEFAULT_TOLERANCE):
        return max(self.worst_input_error, self.worst_param_error) <= tolerance

    def failures(self, tolerance=DEFAULT_TOLERANCE):
        return [c for c in self.inputs + self.params if c.error > tolerance]

    def assert_ok(self, tolerance=DEFAULT_TOLERANCE):
        """Raise AssertionError naming every input and parameter whose gradient is wrong, and where."""
        bad = self.failures(tolerance)
        if bad:
            lines = "\n  ".join(c.describe() for c in bad)
            raise AssertionError(f"gradient check of {self.module} failed (tolerance {tolerance:.0e}):\n  {lines}")


def _compare(name, analytic, numeric):
    analytic = np.asarray(analytic, dtype=np.float64)
    difference = np.abs(analytic - numeric)
    worst = np.unravel_index(np.argmax(difference), difference.shape) if difference.size else ()
    largest = max(np.max(np.abs(analytic), initial=0.0), np.max(np.abs(numeric), initial=0.0))
    both_zero = largest < ZERO_GRADIENT_FLOOR
    return GradientComparison(name, 0.0 if both_zero else rel_error(analytic, numeric), tuple(int(i) for i in worst),
                              float(analytic[worst]) if difference.size else 0.0,
                              float(numeric[worst]) if difference.size else 0.0)


def _is_differentiable(value):
    return isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating)


def check_module(module, inputs, forward=None, rng=0, eps=1e-5, check_params=True):
    """Compare `module.backward` with central differences on every float input and every parameter.

    Args:
        module: a Module whose parameters are float64.
        inputs: list of forward's positional arguments; float64 arrays are
            checked, anything else (token ids, masks, None) is passed through.
        forward: optional callable(*inputs) -> output to use instead of
            `module.forward` (e.g. to fix dropout's random mask, or to pass
            keyword arguments).
        rng: seed or Generator for the random upstream gradient. An integer
            seed s draws from default_rng([s, 1]), a stream apart from the
            caller's default_rng(s): were G equal to x, LayerNorm's dx would
            be almost exactly zero and the check would measure only noise.
        eps: finite-difference step.
        check_params: also check every parameter of the module.
    Returns:
        GradcheckReport.
    """
    rng = np.random.default_rng([int(rng), 1]) if isinstance(rng, (int, np.integer)) else as_generator(rng)
    forward = module.forward if forward is None else forward
    inputs = list(inputs)
    for i, value in enumerate(inputs):
        if _is_differentiable(value) and value.dtype != np.float64:
            raise TypeError(f"check_module: input {i} of {module!r} must be float64, got {value.dtype}")
    params = module.named_parameters() if check_params else []
    for name, param in params:
        if param.dtype != np.float64:
            raise TypeError(f"check_module: parameter {name} of {module!r} must be float64, got {param.dtype}")

    out = forward(*inputs)
    upstream = rng.standard_normal(np.shape(out))
    if np.ndim(out) == 0:
        upstream = float(upstream)

    def loss():
        return float(np.sum(np.asarray(forward(*inputs), dtype=np.float64) * upstream))

    # analytic gradients: the backward of the forward above (whose caches still hold these inputs),
    # from zeroed parameter gradients
    module.zero_grad()
    grads = module.backward(upstream)
    differentiable = [i for i, value in enumerate(inputs) if _is_differentiable(value)]
    if not isinstance(grads, tuple):
        grads = (grads,)
    # backward returns one gradient per input (None for integer ones), or one per float input
    one_per_input = len(grads) == len(inputs)
    input_comparisons = []
    for rank, i in enumerate(differentiable):
        position = i if one_per_input else rank
        if position >= len(grads) or grads[position] is None:
            raise AssertionError(f"{module!r}.backward returned no gradient for input {i}")
        input_comparisons.append(_compare(f"input {i}", grads[position], numerical_gradient(loss, inputs[i], eps)))
    analytic_params = {name: param.grad.copy() for name, param in params}
    param_comparisons = [_compare(f"parameter {name}", analytic_params[name], numerical_gradient(loss, param.data, eps))
                         for name, param in params]
    module.zero_grad()
    return GradcheckReport(repr(module), input_comparisons, param_comparisons)
