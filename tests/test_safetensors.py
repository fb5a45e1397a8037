"""The NumPy reader of .safetensors files (interop/safetensors.py).

* definition: a file written by hand from the format's description (8-byte length, JSON header, raw
  little-endian data) reads back exactly, every dtype; the same arrays as the `safetensors` package
  on a file it wrote (when installed), BF16 included;
* bad input: truncated, foreign and inconsistent files are a SafetensorsError naming the file and the fault.
"""

import json
import struct

import numpy as np
import pytest

from minitransformer.interop.safetensors import SafetensorsError, load_safetensors

try:
    import safetensors.numpy as safetensors_numpy
except ImportError:
    safetensors_numpy = None
requires_safetensors = pytest.mark.skipif(safetensors_numpy is None,
                                          reason='safetensors is missing: pip install -e ".[gpt2]"')


def write_by_hand(path, arrays, header_changes=None, data_tail=b""):
    """The format from its description: tensors back to back in the given order, offsets into the data."""
    header, chunks, position = {"__metadata__": {"format": "np"}}, [], 0
    for name, (dtype_name, array) in arrays.items():
        raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype_name, "shape": list(array.shape), "data_offsets": [position, position + len(raw)]}
        chunks.append(raw)
        position += len(raw)
    for name, change in (header_changes or {}).items():
        header[name].update(change)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks) + data_tail)
    return path


ARRAYS = {"w": ("F32", np.arange(12, dtype=np.float32).reshape(3, 4) / 7), "b": ("F64", np.array([1.5, -2.25])),
          "ids": ("I64", np.array([[3, -1]], dtype=np.int64)), "h": ("F16", np.array([0.5, 65504], dtype=np.float16)),
          "flag": ("BOOL", np.array([True, False])), "bytes": ("U8", np.array([0, 255], dtype=np.uint8)),
          "empty": ("F32", np.zeros((0, 5), dtype=np.float32))}


def test_a_file_written_from_the_format_reads_back_exactly(tmp_path):
    loaded = load_safetensors(write_by_hand(tmp_path / "m.safetensors", ARRAYS))
    assert set(loaded) == set(ARRAYS)
    for name, (_, array) in ARRAYS.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape, name
        np.testing.assert_array_equal(loaded[name], array, err_msg=name)


def test_bfloat16_is_the_top_half_of_a_float32(tmp_path):
    values = np.array([1.0, -2.5, 3.140625], dtype=np.float32)          # exact in bfloat16
    top_halves = (values.view(np.uint32) >> 16).astype(np.uint16)
    loaded = load_safetensors(write_by_hand(tmp_path / "m.safetensors", {"x": ("BF16", top_halves)}))
    np.testing.assert_array_equal(loaded["x"], values)


@requires_safetensors
def test_same_arrays_as_the_safetensors_package(tmp_path):
    arrays = {name: array for name, (_, array) in ARRAYS.items()}
    safetensors_numpy.save_file(arrays, tmp_path / "m.safetensors")
    ours, theirs = load_safetensors(tmp_path / "m.safetensors"), safetensors_numpy.load_file(tmp_path / "m.safetensors")
    assert set(ours) == set(theirs)
    for name in theirs:
        assert ours[name].dtype == theirs[name].dtype
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


BAD = {
    "truncated data": (dict(data_tail=b""), "cut", r"data_offsets \[begin, end\] within the 78 bytes of data"),
    "unknown dtype": (dict(header_changes={"w": {"dtype": "F8_E4M3"}}), None, r"tensor 'w': expected dtype in"),
    "shape and bytes disagree": (dict(header_changes={"w": {"shape": [4, 4]}}), None,
                                 r"tensor 'w': F32 \[4, 4\] needs 64 bytes, its data_offsets span 48"),
    "offsets outside": (dict(header_changes={"w": {"data_offsets": [0, 10**9]}}), None, "within the"),
    "overlap": (dict(header_changes={"b": {"data_offsets": [0, 16]}}), None, r"expected .* no gap or overlap"),
    "bytes after the data": (dict(data_tail=b"\0" * 4), None, r"the tensors end at byte"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_damaged_file_names_the_file_and_the_fault(tmp_path, case):
    options, damage, message = BAD[case]
    path = write_by_hand(tmp_path / "m.safetensors", ARRAYS, **options)
    if damage == "cut":
        path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(SafetensorsError, match=message) as error:
        load_safetensors(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize("content, message", [(b"abc", "too short"), (struct.pack("<Q", 10**12) + b"{}", "claims"),
                                              (struct.pack("<Q", 2) + b"[]", "must be a JSON object"),
                                              (struct.pack("<Q", 3) + b"{x}", "not JSON")])
def test_a_foreign_file_is_refused(tmp_path, content, message):
    path = tmp_path / "x.safetensors"
    path.write_bytes(content)
    with pytest.raises(SafetensorsError, match=message):
        load_safetensors(path)
