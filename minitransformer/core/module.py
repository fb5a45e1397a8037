"""The base class every layer and model derives from.

A `Module` does four things:

* Each subclass writes `forward(*inputs)`, which computes the output and caches,
  as named attributes, what `backward` needs, and `backward(dout)`, which returns
  the gradient with respect to each array input and *adds* parameter gradients
  into `Parameter.grad`. The base class adds `__call__`.
* It finds its parameters by walking its own attributes: a `Parameter`, a
  `Module`, or a list of modules (named `blocks.0`, `blocks.1`, ...). Names are
  stable and dotted (`blocks.0.attn.w_q`); a parameter shared by two modules
  (tied embeddings) is listed once, under the first name met.
* `train()` / `eval()` set `training` on the whole tree (dropout reads it);
  `with model.evaluating():` switches to evaluation for a block and back.
* It holds every layer to the contract of a backward pass, with no line in the
  layer (`core/contract.py`): backward refuses a call before forward, a `dout`
  not shaped like the output, and, with `InputChangedError`, an input of forward
  changed in place since.

Left out on purpose: hooks, device placement, automatic differentiation. The
gradient of every layer is written out by hand in that layer's file.
"""

import contextlib

import numpy as np

from .contract import NOT_RUN, WHOLE_ARRAY_ELEMENTS, InputChangedError, fingerprint, keep_contract, sample_positions
from .parameter import Parameter

# InputChangedError is met here, beside the class that raises it; the contract's other names lived here up to 0.4
# and are found here until 0.6 (their home is core/contract.py)
__all__ = ["Module", "Parameter", "InputChangedError", "fingerprint", "sample_positions", "WHOLE_ARRAY_ELEMENTS",
           "NOT_RUN"]


class Module:
    """Base class: parameter discovery, train/eval switch, and the shared error messages."""

    training = True

    def __init_subclass__(cls, **kwargs):
        """Every layer's backward checks that its forward ran, dout's shape and forward's inputs (core/contract.py)."""
        super().__init_subclass__(**kwargs)
        keep_contract(cls)

    def forward(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__} does not implement forward")

    def backward(self, dout):
        raise NotImplementedError(f"{type(self).__name__} does not implement backward")

    def __call__(self, *inputs, **kwargs):
        return self.forward(*inputs, **kwargs)

    # ------------------------------------------------------------------ tree walking
    def named_children(self):
        """Yield `(name, module)` for direct sub-modules, in attribute order."""
        for name, value in vars(self).items():
            if isinstance(value, Module):
                yield name, value
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Module) for v in value):
                for index, child in enumerate(value):
                    yield f"{name}.{index}", child

    def modules(self):
        """Yield every module of the tree, itself first, then depth first in attribute order; each once (a module
        shared by two parents is met at its first place)."""
        seen = set()

        def visit(module):
            if id(module) not in seen:
                seen.add(id(module))
                yield module
                for _, child in module.named_children():
                    yield from visit(child)
        return visit(self)

    def _walk_parameters(self, prefix):
        for name, value in vars(self).items():
            if isinstance(value, Parameter):
                yield prefix + name, value
        for name, child in self.named_children():
            yield from child._walk_parameters(f"{prefix}{name}.")

    def named_parameters(self):
        """Return a list of `(dotted_name, Parameter)`; a shared parameter appears once."""
        seen = set()
        named = []
        for name, param in self._walk_parameters(""):
            if id(param) not in seen:
                seen.add(id(param))
                named.append((name, param))
        return named

    def parameters(self):
        """Return the list of distinct parameters of this module and its children."""
        return [param for _, param in self.named_parameters()]

    def num_parameters(self):
        return sum(param.size for param in self.parameters())

    def zero_grad(self):
        for param in self.parameters():
            param.zero_grad()

    def train(self, mode=True):
        """Switch the module and all its children to training mode (dropout active)."""
        self.training = mode
        for _, child in self.named_children():
            child.train(mode)
        return self

    def eval(self):
        """Switch to evaluation mode (dropout is the identity)."""
        return self.train(False)

    @contextlib.contextmanager
    def evaluating(self):
        """`with model.evaluating():` runs the block in evaluation mode, then restores the mode it found.

        Generation and evaluation use it: a model left in training mode would draw dropout masks, and
        a cached decoding step would then disagree with the recomputed one.
        """
        was_training = self.training
        self.eval()
        try:
            yield self
        finally:
            self.train(was_training)

    # ------------------------------------------------------------------ state
    def state_dict(self):
        """Return `{dotted_name: copy of the parameter array}`."""
        return {name: param.data.copy() for name, param in self.named_parameters()}

    def load_state_dict(self, state):
        """Copy arrays into the parameters; names, shapes and dtypes must match exactly.

        A float64 state does not load into a float32 model (nor the reverse):
        cast it first, e.g. `{name: value.astype(np.float32) for name, value in state.items()}`.
        Nothing is written unless every entry matches, so a failed load leaves
        the module untouched.
        """
        params = dict(self.named_parameters())
        missing = sorted(set(params) - set(state))
        unexpected = sorted(set(state) - set(params))
        if missing or unexpected:
            raise KeyError(f"{self!r}: state does not match; missing {missing}, unexpected {unexpected}")
        for name, param in params.items():
            value = np.asarray(state[name])
            if value.shape != param.shape:
                raise ValueError(f"{self!r}: parameter {name} expected shape {param.shape}, got {value.shape}")
            if value.dtype != param.dtype:
                raise ValueError(f"{self!r}: parameter {name} expected dtype {param.dtype}, got {value.dtype}"
                                 " (cast the state explicitly)")
        for name, param in params.items():
            param.data[...] = state[name]

    # ------------------------------------------------------------------ checks shared by all layers
    def _require(self, *cached_names):
        """Raise a clear error when a property or a hook reads forward's caches (`alpha`, RoPE's
        `transform_backward`) before forward set them; `backward` itself is checked by the base class."""
        for name in cached_names:
            if getattr(self, name, None) is None:
                raise RuntimeError(f"{self!r}: nothing cached in `{name}` yet; call forward() first")

    def _check_features(self, x, d, what="input"):
        """Raise unless `x` is an array of real floats (`_check_float`) whose last axis has size `d`."""
        self._check_float(x, what)
        shape = np.shape(x)
        if len(shape) == 0 or shape[-1] != d:
            raise ValueError(f"{self!r} expected {what} (..., {d}), got {shape}")

    def _check_float(self, x, what="input"):
        """Raise a TypeError naming this layer unless the array `x` holds real floating-point numbers.

        Every layer that takes activations calls this in its public `forward` (directly or through
        `_check_features` and the attention layers' shape checks, which their fast forms call too).
        Complex and object arrays would flow through NumPy silently (LayerNorm of a complex array
        gives complex garbage); integer and bool arrays would make the fast forms, which compute in
        the input's dtype, disagree with the plain ones. Token ids are integers and go through
        `layers.embedding.check_token_ids` instead. Only the dtype is read: no pass over the data.
        """
        dtype = np.asarray(x).dtype if not isinstance(x, np.ndarray) else x.dtype
        if dtype.kind != "f":                          # np.issubdtype(dtype, np.floating), a cheaper call
            raise TypeError(f"{self!r} expected {what} of a real floating-point dtype (e.g. float32 or float64), "
                            f"got dtype {dtype}")

    def _check_dout(self, dout, expected_shape):
        """Raise unless the upstream gradient is real floating point and has exactly the output's shape
        (no broadcasting); the base class calls it before every backward (see the module docstring)."""
        self._check_float(dout, "dout")
        if np.shape(dout) != tuple(expected_shape):
            raise ValueError(f"{self!r}.backward expected dout of shape {tuple(expected_shape)}, got {np.shape(dout)}")

    def __repr__(self):
        return f"{type(self).__name__}()"
