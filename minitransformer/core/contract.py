"""The contract of a backward pass, kept for every layer by the base class, with no line in the layer.

`Module.__init_subclass__` (core/module.py) hands each subclass to `keep_contract`, which wraps the class's own
`forward` and `backward`. Then `backward` refuses, naming the layer:

* a call before any forward (or after one that raised);
* a `dout`, given by position or by keyword, that is not an array of real floats of exactly the output's shape
  (NumPy would broadcast it); the layer's `_check_dout` says so;
* with `InputChangedError`, an array given to forward that was changed in place since (`x *= 3`, a buffer
  reused for the next batch). Caches hold the inputs themselves, not copies (a copy per layer would double
  the memory of training), so such a change would give the gradient of another input, silently;
  `fingerprint` says which changes are seen.

A forward that returns no array (a loss's scalar, a tuple) leaves checking its gradient to its own backward.
A subclass's `super().forward(...)` and `super().backward(...)` run inside the subclass's call: the caller's
dout is checked once, against the subclass's output, and the arrays the parent is given are watched too.

What the checks cost a training step is measured by benchmarks/bench_contract.py (benchmarks/README.md, "The
backward contract's checks").
"""

import functools
import inspect
import math
import weakref

import numpy as np

WHOLE_ARRAY_ELEMENTS = 4096        # an array up to this size is its own fingerprint (a copy of 16-32 KiB)
NOT_RUN = "no forward returned"    # a module's _output_shape before its first forward, or after one that raised


class InputChangedError(RuntimeError):
    """An array given to `forward` was changed in place before `backward`, which would use its cached value."""


def keep_contract(cls):
    """Wrap the `forward` and `backward` that `cls` defines itself (not those it inherits, already wrapped)."""
    if "forward" in cls.__dict__:
        cls.forward = _remembering_inputs(cls.__dict__["forward"])
    if "backward" in cls.__dict__:
        cls.backward = _checking_inputs(cls.__dict__["backward"])


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


def fingerprint(array):
    """Bytes that change when `array` (any shape, dtype and layout) is changed in place; it reads a sample.

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
    training step takes about 140 fingerprints of 17.5 million elements in all. What that would cost,
    against this sample, is measured by benchmarks/bench_contract.py (benchmarks/README.md, "The
    backward contract's checks").
    """
    if array.size <= WHOLE_ARRAY_ELEMENTS:
        return array.tobytes()
    if not array.flags.c_contiguous:                    # a transposed view (attention's heads): read as in memory
        array = array.transpose(sorted(range(array.ndim), key=lambda axis: -array.strides[axis]))
    positions, flat_positions = sample_positions(array.shape)
    if array.flags.c_contiguous:
        return array.take(flat_positions).tobytes()
    return array[positions].tobytes()                   # a strided view: fancy indexing, slower than take


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
