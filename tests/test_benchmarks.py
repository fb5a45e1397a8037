"""The training benchmark runs end to end on a tiny text (its timings are never asserted: speed is measured
by running the script, not by tests)."""

import importlib.util
import pathlib

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_train.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_train", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_train_runs_and_reports_every_figure(tmp_path, capsys):
    text = tmp_path / "tiny.txt"
    text.write_text("First Citizen: before we proceed any further, hear me speak.\n" * 40, encoding="utf-8")
    bench = load_bench()
    assert bench.main(["--text", str(text), "--steps", "2", "--compare-steps", "1", "--eval-batches", "25"]) == 0
    out = capsys.readouterr().out
    for figure in ("GFLOP/s", "ms/step", "final val loss", "(25 batches)", "peak memory",
                   "its matrix products alone", "outside matrix products"):
        assert figure in out, figure


def test_the_replayed_products_add_up_to_the_models_flops():
    """Per layer: 2 B T C (3C) for q, k, v, 2 B T C C for W_O, 2 * 2 B T C F for the feed-forward and
    2 * 2 B H T T hs for attention, each once forward and twice backward; then the tied head, 2 B T C V."""
    bench = load_bench()
    from minitransformer.training.config import TrainConfig
    config = TrainConfig()
    B, T, C, F, H, L, V = 12, 64, 128, 512, 4, 4, 65
    per_layer = 2 * B * T * C * 3 * C + 2 * B * T * C * C + 2 * 2 * B * T * C * F + 2 * 2 * B * H * T * T * (C // H)
    products = bench.matmul_products(config, V)
    assert bench.flops(products) == 3 * (L * per_layer + 2 * B * T * C * V)
    N = B * T                                        # W_Q, W_K, W_V, W_O: four Linears, as the model runs them
    assert products.count((1, N, C, C)) == 2 * 4 * L and (1, N, C, 3 * C) not in products   # y = x W and dx
    assert products.count((1, C, N, C)) == 4 * L     # dW for W_Q, W_K, W_V and W_O
    assert len(products) == L * 8 * 3 + 3


def test_from_the_tiled_threshold_on_the_replay_holds_the_tiles_products():
    """T = 2048 runs in causal tiles of 256 (fast/attention.py): 8 query blocks see 1 + 2 + ... + 8 = 36 tiles, each
    (B H) x 256 x 32 x 256 twice forward (scores, weights times values) and five times backward."""
    bench = load_bench()
    from minitransformer.training.config import TrainConfig
    B, T, C, F, H, L, V, tile = 1, 2048, 128, 512, 4, 4, 65, 256
    config = TrainConfig(block_size=T, batch_size=B)
    products = bench.matmul_products(config, V)
    N, hs = B * T, C // H
    linears = 2 * N * C * 3 * C + 2 * N * C * C + 2 * 2 * N * C * F
    attention = 36 * 7 * 2 * B * H * tile * hs * tile
    assert bench.flops(products) == L * (3 * linears + attention) + 3 * 2 * N * C * V
    assert products.count((B * H, tile, hs, tile)) == L * 36 * 3 and len(products) == L * (6 * 3 + 36 * 7) + 3
    assert (B * H, T, hs, T) not in products                         # no dense T x T score


@pytest.mark.mpi
def test_bench_distributed_runs_on_two_ranks_and_reports_every_figure(tmp_path):
    """Under `mpiexec -n 2` (skipped without MPI): the interleaved contenders and the alpha-beta model."""
    import subprocess

    from test_distributed import mpi_command

    text = tmp_path / "tiny.txt"
    text.write_text("First Citizen: before we proceed any further, hear me speak.\n" * 40, encoding="utf-8")
    script = BENCH.parent / "bench_distributed.py"
    result = subprocess.run(mpi_command(2, str(script), "--text", str(text), "--rounds", "1"), capture_output=True,
                            text=True, timeout=600, encoding="utf-8")
    assert result.returncode == 0, result.stderr
    for figure in ("2 ranks, replicated", "2 ranks, sharded", "1 rank", "2 ranks, matrix products alone",
                   "alpha-beta model", "64 machines, sharded", "where each rank's step goes"):
        assert figure in result.stdout, figure
    phases = result.stdout.split("where each rank's step goes")[1].split("alpha-beta model")[0]
    rows = [line.split()[0] for line in phases.splitlines() if line.startswith("    ") and "/" in line]
    assert rows == ["0", "1", "0", "1", "0"], phases                  # 2 ranks twice, then one process


@pytest.mark.mpi
def test_bench_train_command_times_the_command_on_one_and_two_ranks_and_prints_their_phases(tmp_path):
    """The `train` command itself, one process and under `mpiexec -n 2` (skipped without MPI), beside
    PyTorch's step when torch is installed; --phases prints each rank's table."""
    import subprocess
    import sys

    from test_distributed import mpiexec

    mpiexec()
    text = tmp_path / "tiny.txt"
    text.write_text("First Citizen: before we proceed any further, hear me speak.\n" * 40, encoding="utf-8")
    script = BENCH.parent / "bench_train_command.py"
    small = "--sample-tokens 0 --eval-batches 1 --n-layers 1 --d-model 16 --n-heads 2 --block-size 16 --batch-size 4"
    result = subprocess.run([sys.executable, str(script), "--text", str(text), "--steps", "1", "2", "--repeats", "1",
                             "--phases", "--train-options", small], capture_output=True, text=True, timeout=900, encoding="utf-8")
    assert result.returncode == 0, result.stderr
    for figure in ("train, one process", "mpiexec -n 2 ... train", "phases of rank 0", "phases of rank 1"):
        assert figure in result.stdout, figure
    try:
        import torch  # noqa: F401
        assert result.stdout.count("ratio to PyTorch ") == 3, result.stdout         # the bests beside PyTorch's
        paired = result.stdout.split("in the same repeat")[1].split("phases of")[0]
        assert [line.split()[-2] for line in paired.splitlines()[1:] if "median" in line] == ["median"] * 2, paired
    except ImportError:
        pass


@pytest.mark.mpi
def test_bench_distributed_memory_reports_each_sharded_ranks_part_of_the_moments(tmp_path):
    """`--memory sharded` under `mpiexec -n 2`: each rank's optimizer state is half of Adam's whole m and v (the
    bytes are exact), and every rank's peak memory is printed."""
    import re
    import subprocess

    from test_distributed import mpi_command

    text = tmp_path / "tiny.txt"
    text.write_text("First Citizen: before we proceed any further, hear me speak.\n" * 40, encoding="utf-8")
    script = BENCH.parent / "bench_distributed.py"
    result = subprocess.run(mpi_command(2, str(script), "--text", str(text), "--memory", "sharded"),
                            capture_output=True, text=True, timeout=600, encoding="utf-8")
    assert result.returncode == 0, result.stderr
    weights = int(re.search(r"([\d,]+) float32 weights", result.stdout).group(1).replace(",", ""))
    held = [int(value.replace(",", "")) for value in re.findall(r"optimizer state +([\d,]+) bytes", result.stdout)]
    assert held == [8 * (weights // 2), 8 * (weights - weights // 2)], result.stdout
    assert result.stdout.count("after the checkpoint's gather") == 2


def test_bench_gpt2_small_builds_the_shape_through_interop_and_every_decoder_agrees(capsys):
    """One layer of GPT-2 small's width and vocabulary; the decoders' tokens are compared inside the script."""
    spec = importlib.util.spec_from_file_location("bench_gpt2_small", BENCH.parent / "bench_gpt2_small.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--layers", "1", "--prompt", "3", "--new", "2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "V 50257" in out and "C 768" in out
    for figure in ("ours, KV cache", "ours, no cache", "tokens/s", "bandwidth bound"):
        assert figure in out, figure

def test_bench_contract_turns_the_checks_off_and_on_again_and_reports_every_contender(capsys):
    """Its contenders really differ (off: an input changed in place passes; on: refused), and the package is
    left with its checks on."""
    import numpy as np
    import pytest

    from minitransformer import Linear
    from minitransformer.core.module import InputChangedError

    spec = importlib.util.spec_from_file_location("bench_contract", BENCH.parent / "bench_contract.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    states = bench.contenders()

    def changed_in_place():
        layer, x = Linear(8, 4, rng=0), np.random.default_rng(0).standard_normal((3, 8))
        layer(x)
        x += 1
        layer.backward(np.ones((3, 4)))

    try:
        states["checks off"]()
        changed_in_place()
    finally:
        states["checks on"]()
    with pytest.raises(InputChangedError):
        changed_in_place()
    assert bench.main(["--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for name in ("checks on", "checks off", "checks on, every element read", "load average"):
        assert name in out, name
    with pytest.raises(InputChangedError):
        changed_in_place()


def _load_script(monkeypatch, filename):
    """A benchmark script as a module; the thread variables its import sets (threads_from_argv) are put back
    afterwards: each is recorded by a first setenv, which the undo restores, or removes if it was not set."""
    import os
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(variable, os.environ.get(variable, "1"))
    spec = importlib.util.spec_from_file_location(filename.removesuffix(".py"), BENCH.parent / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_threshold_decision_is_the_earliest_length_from_which_tiling_never_loses(monkeypatch):
    """Per tile size, the shortest length with the tiled form at most as slow as dense there and at every longer
    length (a dip below 1 followed by a loss does not count); the earliest such crossover is the decision."""
    bench = _load_script(monkeypatch, "bench_tiled_threshold.py")
    lengths = [128, 256, 384, 512]
    ratios = {"tiled-128": [1.3, 0.95, 0.9, 0.8], "tiled-256": [1.2, 0.9, 1.1, 0.7], "tiled-64": [1.5, 1.4, 1.2, 1.1]}
    times = {(T, "dense"): [2.0, 1.0, 4.0] for T in lengths}
    for name, per_length in ratios.items():
        for T, ratio in zip(lengths, per_length):
            times[T, name] = [ratio * 2.0, ratio * 1.0, ratio * 4.0]
    assert bench.crossover(times, lengths, "tiled-128") == 256
    assert bench.crossover(times, lengths, "tiled-256") == 512
    assert bench.crossover(times, lengths, "tiled-64") is None
    said = bench.decision(times, lengths, [64, 128, 256])
    assert "-> TILED_FROM = 256, TILE_SIZE = 128" in said, said
    assert "tiles of 64 x 64: tiled at most as slow as dense nowhere up to T = 512" in said, said
    assert "now in minitransformer/fast/attention.py: TILED_FROM = " in said, said
    only_losing = bench.decision(times, lengths, [64])
    assert "-> the dense form is faster at every length measured: measure beyond T = 512" in only_losing
    # wider tiles than the decision's: 256 against 128 per round 0.92, 0.95, 1.22, 0.875 -> from 512 only
    assert "-> WIDE_TILES_FROM = 512, WIDE_TILE_SIZE = 256" in said, said
    times[384, "tiled-256"] = [0.85 * 2.0, 0.85 * 1.0, 0.85 * 4.0]      # now 0.92, 0.95, 0.94, 0.875: from 128 on
    assert bench.wide_tiles(times, lengths, [256], 128)[0].startswith("  -> WIDE_TILES_FROM = 128, WIDE_TILE_SIZE = 256")
    times[512, "tiled-256"] = [0.9 * 2.0, 0.9 * 1.0, 0.9 * 4.0]         # 1.125 at the longest: no wide tiles
    assert "no wider tile is at most as slow as 128 x 128" in bench.wide_tiles(times, lengths, [256], 128)[0]


def test_the_long_sequence_table_gives_the_ratio_of_the_medians_and_the_paired_ratio(monkeypatch):
    """Rounds 1-4: ours 300, 500, 400, 900 ms, PyTorch 250, 500, 200 and none (failed): medians 450 / 250 = 1.80;
    each round's ratio 1.2, 1.0, 2.0 (the fourth has no PyTorch to pair with), median 1.20."""
    bench = _load_script(monkeypatch, "bench_long_sequences.py")
    results = [{"side": side, "T": 2048, "ms": ms, "peak_mb": 100.0, "round": k}
               for side, times in (("ours", (300, 500, 400, 900)), ("torch", (250, 500, 200))) for k, ms in enumerate(times)]
    table = bench._table(results, [2048], ["ours", "torch"]).splitlines()
    assert table[0] == "| T | B | ours ms | torch ms | ours MB | torch MB | ours / torch | ours / torch, paired |"
    assert table[2] == "| 2048 | 1 | 450.0 | 250.0 | 100 | 100 | 1.80 | 1.20 |", table[2]


def test_benchmark_threads_option_refuses_a_bad_count_in_one_line():
    import subprocess
    import sys
    for script in ("bench_tiled_threshold.py", "bench_long_sequences.py"):
        done = subprocess.run([sys.executable, str(BENCH.parent / script), "--threads", "0"], capture_output=True,
                              text=True, timeout=120, encoding="utf-8")
        assert done.returncode == 2, (script, done.stderr)
        assert done.stderr.strip().splitlines() == ["error: --threads expected an integer >= 1, got '0'"], done.stderr


def test_bench_step_layers_gives_each_layer_class_its_own_time_and_the_products_alone(tmp_path):
    """Each layer class's forward and backward once per row, with its calls per step (24 Linears forward: q, k, v,
    o and the feed-forward's two, in 4 layers), the step's rest, and the products replayed alone."""
    import subprocess
    import sys

    text = tmp_path / "tiny.txt"
    text.write_text("First Citizen: before we proceed any further, hear me speak.\n" * 40, encoding="utf-8")
    result = subprocess.run([sys.executable, str(BENCH.parent / "bench_step_layers.py"), "--text", str(text),
                             "--steps", "2", "--batch", "2"], capture_output=True, text=True, timeout=600, encoding="utf-8")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.startswith("  Fast")
            or line.startswith("  MultiHead")}
    assert rows["FastLinear.forward"][3] == "24" and rows["FastLinear.backward"][3] == "24", rows
    assert rows["MultiHeadAttention.forward"][3] == "4", rows      # its own time: its Linears are rows of their own
    assert "FastGELU.backward" in rows and "FastLayerNorm.forward" in rows
    for figure in ("the rest (optimizer, clipping, batch, loop)", "matrix products replayed alone"):
        assert figure in result.stdout, figure
    bad = subprocess.run([sys.executable, str(BENCH.parent / "bench_step_layers.py"), "--text", str(text),
                          "--batch", "0"], capture_output=True, text=True, timeout=600, encoding="utf-8")
    assert bad.returncode == 2 and "error: --batch, --block-size and --steps must be at least 1, got 0, 64 and 40" \
        in bad.stderr
