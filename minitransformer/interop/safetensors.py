"""Reading a `.safetensors` file with NumPy alone (the format Hugging Face checkpoints ship in).

The format (huggingface/safetensors, "Format"): 8 bytes, a little-endian unsigned 64-bit integer N;
then N bytes of UTF-8 JSON, an object mapping each tensor's name to its `dtype` ("F32", "F16", ...),
`shape` (a list of integers) and `data_offsets` [begin, end] (byte offsets into the data, which
follows the header directly), plus an optional "__metadata__" object of strings; then the data:
every tensor's bytes, little-endian, C order, back to back with no gap and no overlap.

Everything is checked before any tensor is read, so a damaged or foreign file is one
`SafetensorsError` (a ValueError) naming the file and the field or tensor: the header's length
against the file's, the JSON, each dtype, each shape, each tensor's byte count against its dtype and
shape, and that the tensors tile the data exactly. tests/test_safetensors.py checks the arrays against
the `safetensors` package when it is installed.

Left out: writing, and the float8 dtypes. BF16 is read by widening each value to float32 (the
16 bits become the top half of a float32, which is all bfloat16 is).
"""

import json
import os

import numpy as np

HEADER_LENGTH_BYTES = 8
MAX_HEADER_BYTES = 100_000_000          # the safetensors package's own limit on the JSON header
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
          "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?"}


class SafetensorsError(ValueError):
    """A file that is not a valid .safetensors file; the message names the file and what is wrong."""


def read_header(path):
    """(header dict without "__metadata__", offset of the data, data length in bytes); checked against the file."""
    size = os.path.getsize(path)
    with open(path, "rb") as file:
        prefix = file.read(HEADER_LENGTH_BYTES)
        if len(prefix) < HEADER_LENGTH_BYTES:
            raise SafetensorsError(f"{path}: {size} bytes, too short for a safetensors header")
        header_bytes = int.from_bytes(prefix, "little")
        if header_bytes > min(MAX_HEADER_BYTES, size - HEADER_LENGTH_BYTES):
            raise SafetensorsError(f"{path}: the header claims {header_bytes:,} bytes, the file has "
                                   f"{size - HEADER_LENGTH_BYTES:,} after the length (truncated, or not safetensors?)")
        try:
            header = json.loads(file.read(header_bytes).decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            raise SafetensorsError(f"{path}: the header is not JSON: {str(error)[:80]}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: the header must be a JSON object, got {type(header).__name__}")
    header.pop("__metadata__", None)
    data_start = HEADER_LENGTH_BYTES + header_bytes
    check_entries(header, size - data_start, path)
    return header, data_start, size - data_start


def check_entries(header, data_bytes, path):
    """Raise unless every entry has a known dtype, a shape of whole numbers, a byte count that matches
    them, and the entries tile the `data_bytes` bytes of data exactly (no gap, no overlap)."""
    spans = []
    for name, entry in header.items():
        where = f"{path}: tensor {name!r}"
        if not isinstance(entry, dict) or entry.get("dtype") not in DTYPES:
            raise SafetensorsError(f"{where}: expected dtype in {sorted(DTYPES)}, got "
                                   f"{entry.get('dtype') if isinstance(entry, dict) else entry!r}")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
            raise SafetensorsError(f"{where}: expected a shape of whole numbers >= 0, got {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(n) is int for n in offsets)
                and 0 <= offsets[0] <= offsets[1] <= data_bytes):
            raise SafetensorsError(f"{where}: expected data_offsets [begin, end] within the {data_bytes:,} bytes "
                                   f"of data, got {offsets!r}")
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(DTYPES[entry["dtype"]]).itemsize
        if offsets[1] - offsets[0] != expected:
            raise SafetensorsError(f"{where}: {entry['dtype']} {shape} needs {expected:,} bytes, its data_offsets "
                                   f"span {offsets[1] - offsets[0]:,}")
        spans.append((offsets[0], offsets[1], name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise SafetensorsError(f"{path}: tensor {name!r} starts at byte {begin:,} of the data, expected "
                                   f"{position:,} (the tensors must tile the data with no gap or overlap)")
        position = end
    if position != data_bytes:
        raise SafetensorsError(f"{path}: the tensors end at byte {position:,} of {data_bytes:,} bytes of data")


def load_safetensors(path):
    """{name: ndarray} of a .safetensors file (copies in memory; BF16 widened to float32).

    Raises:
        FileNotFoundError for a missing file; SafetensorsError (a ValueError) for an invalid one.
    """
    header, data_start, data_bytes = read_header(path)
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=data_start, shape=(data_bytes,)) if data_bytes else b""
    arrays = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = np.frombuffer(data[begin:end], dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"])
        if entry["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        arrays[name] = raw.astype(raw.dtype.newbyteorder("="), copy=True)
    return arrays
