"""TiledAttention (variants/tiled_attention.py): gradient checks, equality with plain attention, the online
softmax's invariants, FlashAttention-2's order of the tiles and its causal skipping, fully masked rows, memory
linear in T, PyTorch parity, bad input; the fast form's threads.

The fast forms (fast/tiled_attention.py, and fast/attention.py's tiled path) are proven equal to the plain layers
in tests/test_fast.py on the gradient checker's cases; here the fast form against the plain one with 1 to 3
threads, its memory beside the plain layer's, and its threads' share of the cores.
"""

import sys
import tracemalloc

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _torch_parity import F, assert_matches_torch, requires_torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer import ScaledDotProductAttention, TiledAttention, rel_error
from minitransformer.layers.attention import causal_mask
from minitransformer.variants.tiled_attention import online_softmax_result, online_softmax_step

TOLERANCE = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5}


@pytest.mark.parametrize("case", catalogue_cases("TiledAttention"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


def _inputs(rng, batch, Tq, Tk, dk, dv, dtype=np.float64):
    q, k = rng.standard_normal((*batch, Tq, dk)), rng.standard_normal((*batch, Tk, dk))
    v, dout = rng.standard_normal((*batch, Tk, dv)), rng.standard_normal((*batch, Tq, dv))
    return [a.astype(dtype) for a in (q, k, v, dout)]


def _assert_same(tiled, plain, inputs, dtype=np.float64, **options):
    """Forward and every gradient of `tiled` equal `plain`'s, relative to each array's largest entry (an
    array that is zero in exact arithmetic, like dq with one key, holds only rounding noise: it is compared
    against the largest entry of all four arrays instead)."""
    q, k, v, dout = inputs
    results = []
    for layer in (plain, tiled):
        out = layer(q, k, v, **options)
        results.append((out, *layer.backward(dout)))
    largest = max(np.max(np.abs(a), initial=0.0) for a in results[0])
    for what, a, b in zip(("out", "dq", "dk", "dv"), *results):
        assert a.shape == b.shape and b.dtype == a.dtype, f"{what}: {a.shape} {a.dtype} against {b.shape} {b.dtype}"
        scale = max(np.max(np.abs(a), initial=0.0), 1e-30)
        scale = largest if scale <= 1e-10 * largest else scale
        difference = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0) / scale
        assert difference <= TOLERANCE[np.dtype(dtype)], f"{what} differs from plain attention by {difference:.1e}"


@settings(max_examples=40, deadline=None)
@given(Tq=st.integers(1, 11), extra=st.integers(-4, 5), block_size=st.integers(1, 6), causal=st.booleans(),
       batch=st.sampled_from([(), (2,), (2, 3)]), with_mask=st.booleans(), with_bias=st.booleans(),
       seed=st.integers(0, 2**31))
def test_equals_plain_attention(Tq, extra, block_size, causal, batch, with_mask, with_bias, seed):
    """Any T (also not a multiple of the block), Tq <= Tk (a cache before the queries) and Tq > Tk (causal: the
    first queries see no key), masks that may hide whole rows, a constant bias."""
    rng = np.random.default_rng(seed)
    Tk = max(1, Tq + extra)
    inputs = _inputs(rng, batch, Tq, Tk, 3, 2)
    options = {}
    if with_mask:
        options["mask"] = rng.random((*batch[:1], 1, Tq, Tk)[-len(batch) - 2:]) > 0.4
    if with_bias:
        options["bias"] = rng.standard_normal((Tq, Tk))
    _assert_same(TiledAttention(causal=causal, block_size=block_size), ScaledDotProductAttention(causal=causal),
                 inputs, **options)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_equals_plain_attention_on_a_longer_sequence(dtype):
    """T = 100 in blocks of 16 (the last block 4 long), causal, with ALiBi's bias and a scale of 1."""
    from minitransformer import alibi_bias
    rng = np.random.default_rng(5)
    inputs = _inputs(rng, (2, 4), 100, 100, 8, 8, dtype)
    bias = alibi_bias(4, 100, 100).astype(dtype)
    _assert_same(TiledAttention(causal=True, scale=1.0, block_size=16), ScaledDotProductAttention(causal=True, scale=1.0),
                 inputs, dtype=dtype, bias=bias)


def test_fully_masked_rows_give_zero_output_and_no_gradient_as_plain_attention():
    rng = np.random.default_rng(2)
    q, k, v, dout = _inputs(rng, (2,), 5, 7, 3, 4)
    mask = np.ones((2, 5, 7), dtype=bool)
    mask[0, 1] = False                                          # query 1 of batch 0 sees nothing
    mask[1, :, 3:] = False
    layer = TiledAttention(block_size=2)
    out = layer(q, k, v, mask=mask)
    dq, dk, dv = layer.backward(dout)
    assert np.all(out[0, 1] == 0) and np.all(dq[0, 1] == 0) and np.isinf(layer.lse[0, 1, 0])
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(dk)) and np.all(np.isfinite(dv))
    assert np.all(dk[1, 3:] == 0) and np.all(dv[1, 3:] == 0)   # hidden keys get no gradient
    _assert_same(TiledAttention(block_size=2), ScaledDotProductAttention(), (q, k, v, dout), mask=mask)


def _in_place_step():
    return _fast_module().online_softmax_step_in_place


@pytest.mark.parametrize("step", [lambda: online_softmax_step, _in_place_step], ids=["plain", "fast, in place"])
def test_online_softmax_keeps_its_invariants_block_by_block(step):
    """After each block, m is the prefix's maximum, l = sum exp(s - m) and o = sum exp(s - m) v over the
    prefix; at the end out is softmax(s) v and lse is log sum exp(s), computed by hand here. The fast form's
    in-place step too (it overwrites the block's scores: each is given a copy)."""
    step = step()
    rng = np.random.default_rng(3)
    scores, values = rng.standard_normal(10) * 4, rng.standard_normal((10, 2))
    row_max, row_sum, acc = np.array([[-np.inf]]), np.zeros((1, 1)), np.zeros((1, 2))
    for end in (3, 6, 9, 10):
        start = {3: 0, 6: 3, 9: 6, 10: 9}[end]
        row_max, row_sum, acc = step(row_max, row_sum, acc, scores[None, start:end].copy(), values[start:end])
        prefix = scores[:end]
        assert row_max[0, 0] == prefix.max()
        np.testing.assert_allclose(row_sum[0, 0], np.exp(prefix - prefix.max()).sum(), rtol=1e-13)
        np.testing.assert_allclose(acc[0], np.exp(prefix - prefix.max()) @ values[:end], rtol=1e-13)
    out, lse = online_softmax_result(row_max, row_sum, acc)
    weights = np.exp(scores) / np.exp(scores).sum()
    np.testing.assert_allclose(out[0], weights @ values, rtol=1e-13)
    np.testing.assert_allclose(lse[0, 0], np.log(np.exp(scores).sum()), rtol=1e-13)


def test_keeps_one_number_per_row_not_the_weights():
    layer = TiledAttention(causal=True, block_size=4)
    q, k, v, _ = _inputs(np.random.default_rng(4), (2, 3), 9, 9, 5, 6)
    layer(q, k, v)
    assert layer.lse.shape == (2, 3, 9, 1) and layer.out.shape == (2, 3, 9, 6)
    assert not hasattr(layer, "alpha")
    assert not any(isinstance(value, np.ndarray) and value.shape[-2:] == (9, 9) for value in vars(layer).values())


class _RecordingTiles(TiledAttention):
    """TiledAttention that records the tiles (i, j) whose scores it computes, in order."""

    def _tile_scores(self, q_i, k_j, i, j):
        self.visited.append((i, j))
        return super()._tile_scores(q_i, k_j, i, j)


@pytest.mark.parametrize("causal", [True, False])
def test_tiles_run_in_flashattention2_order_and_causal_skips_those_after_the_diagonal(causal):
    """Algorithm 1: query block i outside, key block j inside; Algorithm 2: j outside, i inside. With causal,
    10 queries after 3 cached keys, blocks of 4: the key blocks are cut at the query blocks' positions (after one
    block of the keys before them), and only tiles on or below the diagonal are computed."""
    q, k, v, dout = _inputs(np.random.default_rng(6), (2,), 10, 13, 3, 2)
    layer = _RecordingTiles(causal=causal, block_size=4)
    layer.visited = []
    layer(q, k, v)
    forward, layer.visited = layer.visited, []
    layer.backward(dout)
    if causal:
        assert layer.tiling.key_blocks == [slice(0, 3), slice(3, 7), slice(7, 11), slice(11, 13)]
        expected = [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2), (2, 3)]
    else:
        assert layer.tiling.key_blocks == [slice(0, 4), slice(4, 8), slice(8, 12), slice(12, 13)]
        expected = [(i, j) for i in range(3) for j in range(4)]
    assert forward == expected
    assert layer.visited == sorted(expected, key=lambda tile: (tile[1], tile[0]))
    _assert_same(layer, ScaledDotProductAttention(causal=causal), (q, k, v, dout))


def test_the_diagonal_mask_is_built_once_per_forward(monkeypatch):
    from minitransformer.variants import tiled_attention
    built = []

    def counting_causal_mask(Tq, Tk):
        built.append((Tq, Tk))
        return causal_mask(Tq, Tk)
    monkeypatch.setattr(tiled_attention, "causal_mask", counting_causal_mask)
    q, k, v, dout = _inputs(np.random.default_rng(7), (2,), 11, 11, 3, 2)
    layer = TiledAttention(causal=True, block_size=3)       # 4 diagonal tiles, the last 2 x 2
    layer(q, k, v)
    layer.backward(dout)
    assert built == [(3, 3)]


def _fast_module():
    return pytest.importorskip("minitransformer.fast.tiled_attention", reason="the fast tiled attention is left out")


def test_the_fast_tier_swaps_its_tiled_form_in_and_out():
    """The fast tier registers FastTiledAttention for TiledAttention: use_kernels switches a layer to it and back."""
    fast = _fast_module()
    from minitransformer.fast import kernels_of, use_kernels
    layer = use_kernels(TiledAttention(causal=True, block_size=3), "fast")
    assert type(layer) is fast.FastTiledAttention and kernels_of(layer) == "fast"
    assert type(use_kernels(layer, "plain")) is TiledAttention


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_fast_form_equals_plain_with_any_number_of_threads(workers, dtype, monkeypatch):
    """The fast form's blocks shared between 1 to 3 threads (each thread its own terms of dq): forward and every
    gradient equal the plain TiledAttention's; the same threads give the same bits twice."""
    fast = _fast_module()
    monkeypatch.setattr(fast.FastTiledAttention, "workers", workers)
    rng = np.random.default_rng(9)
    for causal, Tq, Tk, with_options in [(True, 13, 13, False), (True, 7, 12, True), (True, 9, 5, False),
                                         (False, 8, 11, True)]:
        inputs = _inputs(rng, (2, 2), Tq, Tk, 4, 3, dtype)
        options = {"mask": rng.random((2, 1, Tq, Tk)) > 0.3, "bias": rng.standard_normal((Tq, Tk))} if with_options else {}
        _assert_same(fast.FastTiledAttention(causal=causal, block_size=3), TiledAttention(causal=causal, block_size=3),
                     inputs, dtype=dtype, **options)
        runs = []
        for _ in range(2):
            layer = fast.FastTiledAttention(causal=causal, block_size=3)
            runs.append((layer(*inputs[:3], **options), *layer.backward(inputs[3])))
        assert all(np.array_equal(a, b) for a, b in zip(*runs)), "two runs with the same threads differ"


def test_threads_stay_within_the_process_share_of_cores(monkeypatch):
    """As many threads as BLAS may use (threadpoolctl's limit), BLAS at one thread each while they run and
    set back after, also when a thread raises; the blocks shared out evenly."""
    import threading

    from threadpoolctl import threadpool_limits
    fast = _fast_module()
    seen = []

    def work(part):
        seen.append((threading.get_ident(), fast.blas_threads()))
        if part == ["raise"]:
            raise ValueError("a block failed")
        return part
    with threadpool_limits(limits=2, user_api="blas"):
        assert fast.in_threads(work, [[0], [1]]) == [[0], [1]]
        assert [n for _, n in seen] == [1, 1] and len({thread for thread, _ in seen}) == 2
        with pytest.raises(ValueError, match="a block failed"):
            fast.in_threads(work, [[0], ["raise"]])
        assert fast.blas_threads() == 2
    parts_used = []
    monkeypatch.setattr(fast, "in_threads", lambda work, parts: parts_used.append(len(parts)) or [work(p) for p in parts])
    q, k, v, dout = _inputs(np.random.default_rng(10), (2,), 12, 12, 3, 2)
    for limit in (1, 2):
        with threadpool_limits(limits=limit, user_api="blas"):
            layer = fast.FastTiledAttention(causal=True, block_size=2)
            layer(q, k, v)
            layer.backward(dout)
    assert parts_used == [1, 1, 2, 2]
    costs = list(range(1, 17))                       # a causal layer's 16 query blocks
    parts = fast.share(costs, 3)
    loads = [sum(costs[index] for index in part) for part in parts]
    assert sorted(index for part in parts for index in part) == list(range(16))
    assert max(loads) - min(loads) <= 1, f"blocks shared unevenly: {loads}"


def test_openblas_idle_spin_is_cut_before_numpy_loads():
    """The package sets OPENBLAS_THREAD_TIMEOUT (how long OpenBLAS's idle threads spin, read once when NumPy loads
    OpenBLAS; minitransformer/fast/blas_idle.py) before it first imports NumPy and takes it out of the environment
    after (the programs it starts do not inherit it); a value the user gave is kept, and left."""
    import os
    import pathlib
    import subprocess
    import sys

    probe = ("import builtins, os\n"
             "original = builtins.__import__\n"
             "def spy(name, *args, **kwargs):\n"
             "    if name.split('.')[0] == 'numpy' and not hasattr(spy, 'seen'):\n"
             "        spy.seen = os.environ.get('OPENBLAS_THREAD_TIMEOUT')\n"
             "    return original(name, *args, **kwargs)\n"
             "builtins.__import__ = spy\n"
             "import minitransformer\n"
             "print(spy.seen, os.environ.get('OPENBLAS_THREAD_TIMEOUT'))\n")
    root = str(pathlib.Path(__file__).resolve().parents[1])
    clean = {name: value for name, value in os.environ.items() if name != "OPENBLAS_THREAD_TIMEOUT"}
    for environment, expected in [(clean, "22 None"), ({**clean, "OPENBLAS_THREAD_TIMEOUT": "9"}, "9 9")]:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=root,
                              env={**environment, "PYTHONPATH": root}, timeout=120, encoding="utf-8")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split()[-2:] == expected.split(), f"(value when NumPy loaded, value after): {done.stdout}"


def _both_forms(**options):
    """The plain TiledAttention and, unless this copy leaves it out, the fast tier's, built with `options`."""
    layers = [TiledAttention(**options)]
    try:
        from minitransformer.fast.tiled_attention import FastTiledAttention
    except ImportError:                              # a student copy without the fast form
        return layers
    return layers + [FastTiledAttention(**options)]


@pytest.mark.parametrize("dtypes", [(a, b, c, d) for a in (np.float32, np.float64) for b in (np.float32, np.float64)
                                    for c in (np.float32, np.float64) for d in (np.float32, np.float64)],
                         ids=lambda dtypes: "q k v dout " + " ".join(np.dtype(t).name[5:] for t in dtypes))
def test_any_mix_of_float32_and_float64_gives_plain_attentions_dtypes_and_numbers(dtypes):
    """q, k, v and dout each float32 or float64: out, dq, dk and dv come out in the dtypes plain attention's products
    give (out, dq and dk in the promotion of what they meet; dv = alpha^T dout, not v's dtype), with its numbers to
    the precision they are computed in: out and dv that of the scores q k^T (a float32 v or dout is exact in
    float64), dq and dk also that of dp = dout v^T. The running sums m, l, o and lse are kept in the scores' dtype."""
    q, k, v, dout = _inputs(np.random.default_rng(11), (2,), 5, 6, 3, 4)
    inputs = [array.astype(dtype) for array, dtype in zip((q, k, v, dout), dtypes)]
    scores_type = np.result_type(*dtypes[:2])
    dp_in_float64 = scores_type == np.float64 and np.result_type(dtypes[3], dtypes[2]) == np.float64
    precision = {"out": scores_type, "dv": scores_type, "dq": np.float64 if dp_in_float64 else np.float32}
    precision["dk"] = precision["dq"]
    plain = ScaledDotProductAttention(causal=True)
    expected = (plain(*inputs[:3]), *plain.backward(inputs[3]))
    for layer in _both_forms(causal=True, block_size=2):
        results = (layer(*inputs[:3]), *layer.backward(inputs[3]))
        name = type(layer).__name__
        assert layer.lse.dtype == scores_type, f"{name}: lse in {layer.lse.dtype}, scores in {scores_type}"
        largest = max(np.max(np.abs(a)) for a in expected)
        for what, a, b in zip(("out", "dq", "dk", "dv"), expected, results):
            assert b.dtype == a.dtype, f"{name} {what}: {b.dtype}, plain attention's {a.dtype}"
            scale = max(np.max(np.abs(a)), 1e-10 * largest)
            difference = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))) / scale
            assert difference <= TOLERANCE[np.dtype(precision[what])], f"{name} {what}: {difference:.1e}"


@pytest.mark.parametrize("dtype, far_below", [(np.float64, -1000.0), (np.float32, -128.0)])
def test_scores_far_below_zero_give_plain_attentions_weights(dtype, far_below):
    """A constant bias far below 0 on every key (exp of it is 0 in the dtype) changes no softmax: the running maximum
    m starts at -inf, so each row is shifted by its own largest score (from m = 0 every weight would underflow
    and each row would come out 0)."""
    inputs = _inputs(np.random.default_rng(12), (2,), 7, 7, 3, 2, dtype)
    bias = np.full((7, 7), far_below, dtype)
    for layer in _both_forms(causal=True, block_size=3):
        _assert_same(layer, ScaledDotProductAttention(causal=True), inputs, dtype=dtype, bias=bias)
    assert np.abs(layer.out).max() > 0.1


def test_lse_is_each_rows_log_sum_exp_by_hand_and_infinite_where_a_row_sees_no_key():
    """Causal, 6 queries on 4 keys: query i sits at position i - 2, so queries 0 and 1 see no key (lse +inf, output
    0) and query i >= 2 sees keys 0 .. i - 2. lse = log sum_j exp(q_i . k_j / sqrt(dk)), computed here by hand."""
    q, k, v, dout = _inputs(np.random.default_rng(13), (2,), 6, 4, 3, 2)
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(3)                                  # (2, 6, 4)
    expected = np.full((2, 6, 1), np.inf)
    for i in range(2, 6):
        expected[:, i, 0] = np.log(np.exp(scores[:, i, :i - 1]).sum(axis=-1))
    for layer in _both_forms(causal=True, block_size=2):
        out = layer(q, k, v)
        np.testing.assert_allclose(layer.lse, expected, rtol=1e-13)
        assert np.all(out[:, :2] == 0) and np.all(layer.backward(dout)[0][:, :2] == 0)


def test_the_default_tile_is_64_queries_by_64_keys():
    """T = 130 in the default blocks: 64, 64 and the last 2, on both axes."""
    layer = TiledAttention()
    layer(*_inputs(np.random.default_rng(14), (), 130, 130, 2, 2)[:3])
    expected = [slice(0, 64), slice(64, 128), slice(128, 130)]
    assert layer.block_size == 64 and layer.tiling.query_blocks == expected and layer.tiling.key_blocks == expected


def test_a_scale_of_zero_is_used_not_taken_for_the_default():
    """scale=0 makes every score 0: each query's output is the mean of the values it sees (causal: v_0 .. v_i), by
    hand; 1/sqrt(dk) would weigh them by q.k."""
    q, k, v, dout = _inputs(np.random.default_rng(15), (2,), 5, 5, 3, 2)
    expected = np.cumsum(v, axis=-2) / np.arange(1, 6)[:, None]
    for layer in _both_forms(causal=True, scale=0.0, block_size=2):
        np.testing.assert_allclose(layer(q, k, v), expected, rtol=1e-13)


def test_a_mask_of_fewer_axes_broadcasts_as_in_plain_attention():
    """A key-padding mask (B, 1, 1, Tk), one mask per head (H, Tq, Tk) and one of the keys alone (Tk,), each against
    (B, H, Tq, Tk) scores, in tiles that cut both axes."""
    rng = np.random.default_rng(16)
    inputs = _inputs(rng, (2, 3), 7, 7, 4, 2)
    for mask in (rng.random((2, 1, 1, 7)) > 0.3, rng.random((3, 7, 7)) > 0.3, np.arange(7) != 2):
        for layer in _both_forms(causal=True, block_size=3):
            _assert_same(layer, ScaledDotProductAttention(causal=True), inputs, mask=mask)


def test_no_keys_at_all_give_zero_output_and_zero_gradients():
    """Tk = 0: every query sees no key, as a fully masked row (output 0, lse +inf, dq 0; dk and dv empty), in the
    plain form and in the fast one, whose threads then get no key block."""
    q, dout = np.ones((2, 3, 4)), np.ones((2, 3, 5))
    k, v = np.ones((2, 0, 4)), np.ones((2, 0, 5))
    for layer in _both_forms(block_size=2):
        out = layer(q, k, v)
        dq, dk, dv = layer.backward(dout)
        assert out.shape == (2, 3, 5) and not out.any() and np.all(layer.lse == np.inf)
        assert dq.shape == q.shape and not dq.any() and dk.shape == k.shape and dv.shape == v.shape


def test_the_fast_form_keeps_after_backward_only_what_the_plain_form_keeps():
    """Backward's own arrays (D, dout, the values' transposed copies) are let go; forward's stay for another
    backward: the plain layer's attributes, and the keys' transposed blocks and the diagonal's bias."""
    fast = _fast_module()
    q, k, v, dout = _inputs(np.random.default_rng(17), (2,), 6, 6, 3, 2)
    layers = [TiledAttention(causal=True, block_size=2), fast.FastTiledAttention(causal=True, block_size=2)]
    for layer in layers:
        layer(q, k, v)
        layer.backward(dout)
    assert set(vars(layers[1])) - set(vars(layers[0])) == {"k_t", "diagonal_bias"}


def test_the_blocks_are_shared_by_their_tiles_and_no_thread_gets_none(monkeypatch):
    """Causal, 8 blocks: query block i has i + 1 tiles, key block j is seen by 8 - j query blocks (by hand). Shared
    between 2 threads, largest first to the least loaded, each pass splits its 36 tiles 18 and 18 (by the number
    of blocks alone it would be 16 and 20). No thread is given nothing: 1 block for 4 threads is 1 part, and 0
    threads asked for is one."""
    fast = _fast_module()
    monkeypatch.setattr(fast.FastTiledAttention, "workers", 2)
    shared = []
    monkeypatch.setattr(fast, "in_threads", lambda work, parts: shared.append(parts) or [work(part) for part in parts])
    q, k, v, dout = _inputs(np.random.default_rng(18), (2,), 16, 16, 3, 2)
    layer = fast.FastTiledAttention(causal=True, block_size=2)
    layer(q, k, v)
    layer.backward(dout)
    (forward_parts,), (backward_parts,) = shared[:1], shared[1:]
    assert sorted(sum(i + 1 for i in part) for part in forward_parts) == [18, 18], forward_parts
    assert sorted(sum(8 - j for j in part) for part in backward_parts) == [18, 18], backward_parts
    assert fast.share([3], 4) == [[0]] and fast.share([3, 1], 0) == [[0, 1]] and fast.share([], 2) == []


def test_one_part_runs_with_blas_as_it_is_and_a_failing_part_waits_for_the_others():
    """in_threads limits BLAS to one thread only while parts run side by side: a single part keeps the process's
    BLAS threads. When the first part raises, the others are finished before the error leaves (no thread still
    computing once BLAS is set back)."""
    import threading
    import time

    from threadpoolctl import threadpool_limits
    fast = _fast_module()
    with threadpool_limits(limits=2, user_api="blas"):
        assert fast.in_threads(lambda part: fast.blas_threads(), [[0]]) == [2]
        finished = threading.Event()

        def work(part):
            if part == ["raise"]:
                raise ValueError("the first part failed")
            time.sleep(0.3)
            finished.set()
        with pytest.raises(ValueError, match="the first part failed"):
            fast.in_threads(work, [["raise"], [1]])
        assert finished.is_set(), "in_threads raised while another part was still running"


def _forward_in_a_child(inputs, queue):
    fast = _fast_module()
    layer = fast.FastTiledAttention(causal=True, block_size=2)
    queue.put(np.asarray(layer(*inputs)).sum())


@pytest.mark.skipif(sys.platform != "linux", reason="fork after threads is only safe enough to test on Linux")
def test_a_forked_child_runs_its_blocks_in_threads_of_its_own(monkeypatch):
    """fork copies only the calling thread: the pool's threads are not in the child, which must start a pool of its
    own (os.register_at_fork), or its blocks would wait for threads that do not exist."""
    import multiprocessing
    import warnings
    fast = _fast_module()
    monkeypatch.setattr(fast.FastTiledAttention, "workers", 2)
    inputs = _inputs(np.random.default_rng(19), (2,), 8, 8, 3, 2)[:3]
    expected = fast.FastTiledAttention(causal=True, block_size=2)(*inputs).sum()      # the parent's pool now runs
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)          # Python 3.12+: fork of a process with threads
        child = context.Process(target=_forward_in_a_child, args=(inputs, queue))
        child.start()
    child.join(timeout=60)
    hung = child.is_alive()
    if hung:
        child.kill()
        child.join()
    assert not hung, "the forked child waited for the parent's threads"
    assert child.exitcode == 0 and np.isclose(queue.get(timeout=10), expected)


def _peak_bytes(layer, T, causal=True):
    """Peak bytes NumPy allocates during one forward and backward at length T (B = 1, H = 2, hs = 16)."""
    q, k, v, dout = _inputs(np.random.default_rng(0), (1, 2), T, T, 16, 16)
    tracemalloc.start()
    layer(q, k, v)
    layer.backward(dout)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def _fast_tiled():
    """The fast tier's attention on its tiled path (absent from a student copy that assigns attention)."""
    fast = pytest.importorskip("minitransformer.fast.attention", reason="the fast attention is left out of this copy")
    layer = fast.FastScaledDotProductAttention(causal=True)
    layer.tiled_from, layer.tile_size, layer.wide_tile_size = 1, 64, 64      # one tile size at every length
    return layer


@pytest.mark.parametrize("make", [lambda: TiledAttention(causal=True, block_size=64), _fast_tiled],
                         ids=["plain TiledAttention", "fast tiled form"])
def test_memory_grows_linearly_with_length(make):
    """Doubling T twice: plain attention's peak grows about 4x each time (the (T, T) weights); the tiled
    layers' about 2x (q, k, v, out and their gradients)."""
    plain = [_peak_bytes(ScaledDotProductAttention(causal=True), T) for T in (256, 512, 1024)]
    tiled = [_peak_bytes(make(), T) for T in (256, 512, 1024)]
    assert plain[2] / plain[1] > 3.5, f"plain attention's peaks {plain}: not quadratic, so this test sees nothing"
    assert tiled[2] / tiled[1] < 2.3 and tiled[1] / tiled[0] < 2.3, f"tiled peaks {tiled} grow faster than T"
    assert tiled[2] < plain[2] / 8


@requires_torch
@pytest.mark.parametrize("causal, Tq, Tk", [(False, 5, 7), (True, 7, 7), (True, 3, 8)])
def test_matches_torch(causal, Tq, Tk):
    """The definition, independently of our plain layer: torch's scaled_dot_product_attention (causal rule
    aligned to the end of the keys: `causal_lower_right`)."""
    from torch.nn.attention.bias import causal_lower_right
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((2, 3, T, 4)) for T in (Tq, Tk, Tk))

    def reference(t, leaves):
        return F.scaled_dot_product_attention(t[0], t[1], t[2], attn_mask=causal_lower_right(Tq, Tk) if causal else None)
    assert_matches_torch(TiledAttention(causal=causal, block_size=3), [q, k, v], reference)


def test_bad_input_names_the_layer():
    q = np.ones((2, 5, 3))
    for block_size in (0, 2.5, True, None):
        with pytest.raises(ValueError, match="TiledAttention expected block_size an integer >= 1"):
            TiledAttention(block_size=block_size)
    layer = TiledAttention(block_size=2)
    with pytest.raises(RuntimeError, match=r"TiledAttention.*backward\(\) called before forward\(\)"):
        layer.backward(q)
    with pytest.raises(ValueError, match=r"TiledAttention.*expected a bias broadcastable to \(2, 5, 5\), got \(4, 5\)"):
        layer(q, q, q, bias=np.zeros((4, 5)))
    for dtype in (complex, int, bool):
        with pytest.raises(TypeError, match=rf"TiledAttention.*expected bias of a real float.*got dtype {np.dtype(dtype)}"):
            layer(q, q, q, bias=np.zeros((5, 5), dtype))
    with pytest.raises(TypeError, match="TiledAttention.*expected a bool mask"):
        layer(q, q, q, mask=np.ones((5, 5)))
    with pytest.raises(ValueError, match=r"TiledAttention.*expected a mask broadcastable to \(2, 5, 5\), got \(3, 5, 5\)"):
        layer(q, q, q, mask=np.ones((3, 5, 5), dtype=bool))
    with pytest.raises(ValueError, match="TiledAttention.*expected q"):
        layer(q, np.ones((2, 5, 4)), q)
    layer(q, q, q)
    with pytest.raises(ValueError, match=r"TiledAttention.*backward expected dout of shape \(2, 5, 3\)"):
        layer.backward(np.ones((2, 4, 3)))
    assert rel_error(layer(q, q, q), ScaledDotProductAttention()(q, q, q)) < 1e-15
