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
  layer: `__init_subclass__` wraps each subclass's `forward` and `backward`.
  `backward` refuses, naming the layer, a call before any forward (or after one
  that raised); a `dout`, given by position or by keyword, that is not an array
  of real floats of exactly the output's shape (NumPy would broadcast it); and,
  with `InputChangedError`, an array given to forward that was changed in place
  since (`x *= 3`, a buffer reused for the next batch). Caches hold the inputs
  themselves, not copies (a copy per layer would double the memory of
  training), so such a change would give the gradient of another input,
  silently; `fingerprint` says which changes are seen. A forward that returns
  no array (a loss's scalar, a tuple) leaves checking its gradient to its own
  backward.

Left out on purpose: hooks, device placement, automatic differentiation. The
gradient of every layer is written out by hand in that layer's file.
"""

import contextlib
import functools
import inspect
import math
import weakref

import numpy as np

from .parameter import Parameter

WHOLE_ARRAY_ELEMENTS = 4096        # an array up to this size is its own fingerprint (a copy of 16-32 KiB)
NOT_RUN = "no forward returned"    # a module's _output_shape before its first forward, or after one that raised


class InputChangedError(RuntimeError):
    """An array given to `forward` was changed in place before `backward`, which would use its cached value."""


def fingerprint(array):
    """Bytes that change when `array` (any shape, dtype and layout) is changed in place; a few microseconds.

    An array of at most WHOLE_ARRAY_ELEMENTS elements is copied whole: any change is seen. A larger
    one is read as rows, the lines along its last axis (a token's C features), and columns, the
    indices of its last axis (one feature of every token). The fingerprint is one element of every
    row and one of every column, at scattered positions (`sample_positions`), so a change to whole
    rows, whole columns or the whole array is seen, for every shape, and so is any slice along any
    axis, which contains whole rows (`x[1]`, `x[::2]`, `x[:, 3:]`) or whole columns (`x[..., 1::2]`,
    `x[..., 1:]`). The positions are scattered, not periodic, so an edit strided along two axes at
    once (`x[:, 1::2, ::2]`) meets them too. A transposed view is read in memory order, as the array
    it was transposed from (attention's (B, H, T, hs) heads as (B, T, H, hs)): its rows are the
    lines along the axis whose elements are adjacent in memory.

    What can escape: a change that leaves every sampled element as it was. A few isolated elements
    are sampled only by chance ((rows + columns) / size of them: 1 in 110 for (12, 64, 128)); so is
    a line along another axis (`x[b, :, c]`); and an edit that maps the sampled elements to
    themselves (scaling a row whose sampled element is 0) is not seen.

    Why not a checksum of every element, e.g. each row's sum weighted by a fixed non-periodic vector
    plus the column sums? It would see isolated elements too, but not a change lost in its rounding
    (an element of a large row moved by an ulp) nor one that cancels in every sum (two elements of a
    column swapped between rows of equal weighted sum); and it reads every element: a default
    training step takes about 140 fingerprints of 17.5 million elements in all, which cost 12-13 %
    of the step's CPU time that way, against about 1 % for all the checks with this sample
    (benchmarks/bench_contract.py, one thread, 2026-11-27, on a loaded 2-core machine).
    """
    if array.size <= WHOLE_ARRAY_ELEMENTS:
        return array.tobytes()
    if not array.flags.c_contiguous:                    # a transposed view (attention's heads): read as in memory
        array = array.transpose(sorted(range(array.ndim), key=lambda axis: -array.strides[axis]))
    positions, flat_positions = sample_positions(array.shape)
    if array.flags.c_contiguous:
        return array.take(flat_positions).tobytes()
    return array[positions].tobytes()                   # a strided view: ten times slower


@functools.lru_cache(maxsize=256)
def sample_positions(shape):
    """Where `fingerprint` reads an array of `shape` (at least 1-D): one element of every row (line
    along the last axis) at a scattered column, then one of every column at a scattered row.
    Scattered: the fractional parts of multiples of an irrational number (a Weyl sequence), which
    never repeat with a period. Returns (a tuple of index arrays, one per axis; the flat indices)."""
    n_rows, n_columns = math.prod(shape[:-1]), shape[-1]
    rows = np.concatenate([np.arange(n_rows), _scattered(n_columns, n_rows, math.sqrt(2))])
    columns = np.concatenate([_scattered(n_rows, n_columns, (1 + math.sqrt(5)) / 2), np.arange(n_columns)])
    positions = (np.unravel_index(rows, shape[:-1]) if len(shape) > 1 else ()) + (columns,)
    return positions, np.ravel_multi_index(positions, shape)


def _scattered(count, size, irrational):
    """`count` indices in range(size): size x the fractional part of irrational x (1, 2, ..., count)."""
    return (np.arange(1, count + 1) * irrational % 1 * size).astype(np.intp)


def _remembering_inputs(forward):
    """`forward`, which first remembers (a weak reference to, and a fingerprint of) each array argument,
    then the shape of the array it returns (None for anything else)."""
    @functools.wraps(forward)
    def remembering(self, *inputs, **options):
        arrays = [(str(index), value) for index, value in enumerate(inputs)] + list(options.items())
        if type(self).forward is not remembering:       # a subclass's super().forward(): watch its new arrays too,
            watched = getattr(self, "_input_fingerprints", [])
            self._input_fingerprints = watched + _fingerprints(arrays, watched)
            return forward(self, *inputs, **options)    # and the subclass's output counts
        self._input_fingerprints = _fingerprints(arrays, [])
        self._output_shape = NOT_RUN                    # until this forward returns
        out = forward(self, *inputs, **options)
        self._output_shape = out.shape if isinstance(out, np.ndarray) else None
        # an input handed back as the output (dropout at p = 0, in eval) is the caller's now, to change in place:
        # NumPy itself does, computing `h + out` into out's buffer when out is a large temporary
        self._input_fingerprints = [entry for entry in self._input_fingerprints if entry[1]() is not out]
        return out
    return remembering


def _fingerprints(arguments, watched):
    """[(where, weak reference, fingerprint)] of the arrays among `arguments` [(where, value)] not in `watched`."""
    seen = [reference() for _, reference, _ in watched]
    return [(where, weakref.ref(value), fingerprint(value)) for where, value in arguments
            if isinstance(value, np.ndarray) and not any(value is array for array in seen)]


def _checking_inputs(backward):
    """`backward`, which first checks that forward returned, that dout (its first argument, given by position
    or by keyword) is shaped like forward's output, and that forward's array arguments still hold their values."""
    dout_name = next(iter(list(inspect.signature(backward).parameters)[1:]), None)

    @functools.wraps(backward)
    def checking(self, *args, **kwargs):
        if type(self).backward is checking:             # the caller's dout, not what a subclass gives super().backward()
            output_shape = getattr(self, "_output_shape", NOT_RUN)
            if output_shape is NOT_RUN:
                raise RuntimeError(f"{self!r}: backward() called before forward() (or after a forward that raised)")
            if output_shape is not None and (args or dout_name in kwargs):
                self._check_dout(args[0] if args else kwargs[dout_name], output_shape)
        for where, reference, seen in getattr(self, "_input_fingerprints", ()):
            array = reference()
            if array is not None and fingerprint(array) != seen:
                what = f"input {where}" if where.isdigit() else f"argument {where}="
                raise InputChangedError(
                    f"{self!r}.backward: {what} of forward (shape {array.shape}) was changed in place after forward "
                    "(e.g. `x += 1`, or a buffer reused for the next batch); its cached value would give wrong "
                    "gradients. Pass a copy to forward (x.copy()), or call forward again before backward")
        return backward(self, *args, **kwargs)
    return checking


class Module:
    """Base class: parameter discovery, train/eval switch, and the shared error messages."""

    training = True

    def __init_subclass__(cls, **kwargs):
        """Every layer's backward checks that its forward ran, dout's shape and forward's inputs (see above)."""
        super().__init_subclass__(**kwargs)
        if "forward" in cls.__dict__:
            cls.forward = _remembering_inputs(cls.__dict__["forward"])
        if "backward" in cls.__dict__:
            cls.backward = _checking_inputs(cls.__dict__["backward"])

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
        if dtype.kind != "f":                          # np.issubdtype(dtype, np.floating), 5 us faster a call
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
