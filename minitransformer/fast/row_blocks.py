"""Elementwise work done one block of rows at a time, so that it runs in the CPU cache (speed only).

An elementwise layer written as a chain of in-place NumPy passes (GELU's
forward is eight passes, its backward nine) reads and writes every operand
once per pass. On the feed-forward activation of the benchmark model,
(B*T, 4C) = (768, 512) float32, each operand is 1.5 MB: the three to five
operands of one chain do not fit in a core's L2 cache (2 MB here) together,
so every pass streams them from further away. Cut into blocks of
`BLOCK_BYTES` per operand, a block's operands stay in L2 for the whole chain
and only the first and last pass touch memory.

The numbers are the same, bit for bit: every element goes through the same
operations in the same order; only the order in which rows are visited
changes (tests/test_fast_forms.py). GELU in row blocks saves time, and returning
each block and copying it into place instead of writing it there saves less, hence
the `out` arguments (benchmarks/README.md, "What the code's docstrings point to").

Left out: blocks along the last axis (rows are what every elementwise layer
here is long in), and threads (NumPy's elementwise loops are single-threaded).
"""

import numpy as np

BLOCK_BYTES = 1 << 18       # 256 KB per operand: five operands of a backward chain stay within a 2 MB L2

# A quiet NaN whose bits no arithmetic produces (computed NaNs carry the default payload). Each output block's
# first element is set to it before the kernel runs, so a kernel that never wrote into its block (say a
# student's `dx = ...`, which only rebinds the name) is caught instead of returning np.empty's garbage.
_UNWRITTEN = {np.dtype(np.float32): np.uint32(0x7FE1B2C3), np.dtype(np.float64): np.uint64(0x7FFCA1B2C3D4E5F6)}


def row_blocks(n_rows, row_bytes):
    """Slices that cover range(n_rows) in blocks of about BLOCK_BYTES bytes per operand, at least one row each.

    Args:
        n_rows: N, the number of rows.
        row_bytes: the size of one row of one operand (n * itemsize).
    Returns:
        list of slices, in order, covering 0 .. N.
    """
    rows = max(1, BLOCK_BYTES // max(row_bytes, 1))
    return [slice(start, start + rows) for start in range(0, n_rows, rows)]


def by_row_blocks(kernel, inputs, n_outputs=1):
    """Run `kernel` over blocks of rows; return its outputs as whole arrays.

    The plain form is `outputs = kernel(*inputs)` on the whole arrays; this
    computes the same thing block by block.

    Args:
        kernel: kernel(*input_blocks, *output_blocks) writes its results into
            the output blocks (each (rows, n)) and returns nothing. A kernel
            that returns a value, or leaves an output block unwritten, raises
            TypeError: either would otherwise hand back uninitialised memory.
        inputs: arrays of one shape (..., n), e.g. x (B, T, C).
        n_outputs: how many output arrays to allocate.
    Returns:
        list of n_outputs arrays with the inputs' shape and the first input's dtype.
    """
    shape = inputs[0].shape
    for array in inputs[1:]:
        if array.shape != shape:
            raise ValueError(f"by_row_blocks expected inputs of one shape {shape}, got {array.shape}")
    n_rows, width = (int(np.prod(shape[:-1])), shape[-1]) if shape else (1, 1)
    rows2d = [np.reshape(array, (n_rows, width)) for array in inputs]           # (N, n), views when contiguous
    outputs = [np.empty((n_rows, width), dtype=inputs[0].dtype) for _ in range(n_outputs)]
    marker = _UNWRITTEN.get(outputs[0].dtype) if width else None
    for rows in row_blocks(n_rows, width * inputs[0].dtype.itemsize):
        blocks = [output[rows] for output in outputs]
        if marker is not None:
            for block in blocks:
                block[0, :1].view(marker.dtype)[0] = marker
        returned = kernel(*(array[rows] for array in rows2d), *blocks)
        if returned is not None:
            raise TypeError(f"{kernel.__qualname__} must write its result into its output block(s) "
                            f"(e.g. dx[...] = ...) and return nothing, got a {type(returned).__name__}")
        if marker is not None and any(block[0, :1].view(marker.dtype)[0] == marker for block in blocks):
            raise TypeError(f"{kernel.__qualname__} did not write into its output block(s): assign into them "
                            f"(dx[...] = ..., or out=dx) rather than to the name (dx = ... only rebinds it)")
    return [output.reshape(shape) for output in outputs]
