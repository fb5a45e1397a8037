"""Benchmark: train nanoGPT's Shakespeare-char "CPU" configuration in float32 and compare with PyTorch.

    python benchmarks/bench_train.py --text ../shared/data/tinyshakespeare.txt

The configuration (karpathy/nanoGPT README): 4 layers, 4 heads, C = 128, T = 64,
B = 12, AdamW (beta2 0.99, weight decay 0.1), lr 1e-3 with 100 warmup steps and
cosine decay to 1e-4 at step 2000, clip 1.0, dropout 0, GELU, pre-norm, tied
embeddings. Like nanoGPT it decays every 2-D tensor, embeddings included.

Prints, in this order:
1. NumPy's own float32 matrix-multiply rate on this machine, now (GFLOP/s, median).
2. The training run: median ms per step, wall time, final validation loss
   (20 batches), peak memory; with --eval-batches N > 20 also the validation
   loss over N windows (the first 20 are the standard ones) and its standard error.
3. With --torch-train: the PyTorch twin (weights seeded by --seed; biases
   dropped with --twin-without-biases) trained on the same batches with the
   same schedule, and its validation loss on the same windows.
4. Interleaved rounds, so that all see the same machine load: our step, the
   step's matrix products replayed alone (the share of a step spent outside
   them, and the achieved GFLOP/s), and, if torch is installed, the same model
   (same shapes, biases, GELU-tanh) in PyTorch eager. Each takes turns of a few
   consecutive steps after an idle gap (see BLOCK, IDLE_GAP). Medians of wall
   time and of this process's CPU time, and the ratio. torch is never required.
   Data parallelism on MPI ranks is measured by bench_distributed.py.

The machine is shared, so absolute times move; the ratio within one run is the figure to quote.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _machine import peak_mb  # noqa: E402
from _threads import threads_from_argv  # noqa: E402

threads_from_argv(sys.argv)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minitransformer.fast import fast_forms  # noqa: E402
from minitransformer.layers.attention import ScaledDotProductAttention  # noqa: E402
from minitransformer.objectives.language_model import Trainer, evaluation_batches  # noqa: E402
from minitransformer.tokenizers import CharTokenizer
from minitransformer.training.config import TrainConfig  # noqa: E402
from minitransformer.training.data import get_batch, train_val_split  # noqa: E402
from minitransformer.variants.tiled_attention import Tiling  # noqa: E402


def matmul_products(config, V):
    """Every matrix product of one training step as (batch, m, k, n): forward and backward.

    The attention's are the dense form's below the fast attention's tiled threshold and the tiled form's from
    it on (`attention_tile_products`), as the fast kernels run them (dense throughout in a student copy without
    the fast attention)."""
    B, T, C, F, H = config.batch_size, config.block_size, config.d_model, config.d_ff, config.n_heads
    N, hs = B * T, C // H
    per_layer = []
    for shape in [(1, N, C, C)] * 4 + [(1, N, C, F), (1, N, F, C)]:
        per_layer += with_backward(*shape)             # W_Q, W_K, W_V, W_O (four Linears), feed-forward
    fast = fast_forms().get(ScaledDotProductAttention)
    tile = None if fast is None else fast(causal=True).tile_for(T)
    if tile is None:
        per_layer += with_backward(B * H, T, hs, T) + with_backward(B * H, T, T, hs)   # q k^T, alpha v
    else:
        per_layer += attention_tile_products(B * H, T, hs, tile)
    return per_layer * config.n_layers + with_backward(1, N, C, V)


def with_backward(batch, m, k, n):
    """y = a b (batch, m, k) @ (batch, k, n), then its backward: da = dy b^T, db = a^T dy."""
    return [(batch, m, k, n), (batch, m, n, k), (batch, k, m, n)]


def attention_tile_products(batch, T, hs, tile):
    """The causal tiled attention's products (fast/tiled_attention.py) at length T in tiles of `tile`: per tile
    computed, forward s = q k^T and o += p v; backward s again, dv += p^T do, dp = do v^T, dq += ds k, dk += ds^T q."""
    tiling = Tiling.cut(T, T, tile, causal=True)
    key_lengths = [block.stop - block.start for block in tiling.key_blocks]
    products = []
    for block, seen in zip(tiling.query_blocks, tiling.keys_seen_by):
        Bq = block.stop - block.start
        for Bk in (key_lengths[j] for j in seen):
            products += [(batch, Bq, hs, Bk), (batch, Bq, Bk, hs),                           # forward
                         (batch, Bq, hs, Bk), (batch, Bk, Bq, hs), (batch, Bq, hs, Bk),       # backward
                         (batch, Bq, Bk, hs), (batch, Bk, Bq, hs)]
    return products


def flops(products):
    return sum(2 * batch * m * k * n for batch, m, k, n in products)


def product_replay(products):
    """A function that runs every product of one step once, float32, on operands made here beforehand."""
    rng = np.random.default_rng(0)

    def operand(batch, rows, cols):
        array = rng.standard_normal((batch, rows, cols)).astype(np.float32)
        return array[0] if batch == 1 else array

    operands = [(operand(batch, m, k), operand(batch, k, n)) for batch, m, k, n in products]

    def replay():
        for a, b in operands:
            a @ b
    return replay


def numpy_matmul_rate(repeats=30):
    """GFLOP/s of a (768, 512) @ (512, 512) float32 product, median of `repeats`."""
    a = np.random.default_rng(0).standard_normal((768, 512)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((512, 512)).astype(np.float32)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - started)
    return 2 * 768 * 512 * 512 / float(np.median(times)) / 1e9


def torch_model(config, V, bias=True, sdpa=False):
    """The same GPT in PyTorch eager (nanoGPT's model.py shape, with our biases, GPT-2 initialisation,
    weights seeded by config.seed), and AdamW with nanoGPT's groups (every tensor of two or more axes
    decayed). bias=False drops every Linear bias and LayerNorm beta, as nanoGPT's train.py does by default.
    sdpa=True computes attention with F.scaled_dot_product_attention(is_causal=True), PyTorch's tiled
    kernel, as nanoGPT does when it is available (bench_long_sequences.py)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(config.seed)
    C, H, T = config.d_model, config.n_heads, config.block_size

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.qkv = nn.LayerNorm(C, bias=bias), nn.Linear(C, 3 * C, bias=bias)
            self.proj, self.ln2 = nn.Linear(C, C, bias=bias), nn.LayerNorm(C, bias=bias)
            self.fc1, self.fc2 = nn.Linear(C, config.d_ff, bias=bias), nn.Linear(config.d_ff, C, bias=bias)
            if not sdpa:
                self.register_buffer("allowed", torch.tril(torch.ones(T, T, dtype=torch.bool)))

        def forward(self, x):
            B, T_, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T_, H, C // H).transpose(1, 2) for t in (q, k, v))
            if sdpa:
                heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)        # (B, H, T, hs)
            else:
                scores = (q @ k.transpose(-2, -1)) * (C // H) ** -0.5
                scores = scores.masked_fill(~self.allowed[:T_, :T_], float("-inf"))
                heads = F.softmax(scores, dim=-1) @ v
            heads = heads.transpose(1, 2).contiguous().view(B, T_, C)
            x = x + self.proj(heads)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList([Block() for _ in range(config.n_layers)])
            self.ln_f = nn.LayerNorm(C, bias=bias)

        def forward(self, ids, targets):
            h = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
            for block in self.blocks:
                h = block(h)
            logits = self.ln_f(h) @ self.wte.weight.T
            return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    model = GPT()
    for name, param in model.named_parameters():                # GPT-2 / nanoGPT initialisation
        if param.dim() < 2:
            if name.endswith("bias"):
                torch.nn.init.zeros_(param)
        else:
            residual = name.endswith("proj.weight") or name.endswith("fc2.weight")
            torch.nn.init.normal_(param, 0.0, 0.02 / (2 * config.n_layers) ** 0.5 if residual else 0.02)
    groups = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": config.weight_decay},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2))
    return model, optimizer


def torch_step(model, optimizer, config, x, y, lr):
    """One PyTorch training step on int arrays x, y (B, T); returns the loss."""
    import torch

    for group in optimizer.param_groups:
        group["lr"] = lr
    loss = model(torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64)))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
    optimizer.step()
    return loss.detach().item()


def validation_losses(loss_of, val_data, config, n_batches):
    """loss_of(x, y) on the trainer's evaluation windows (`evaluation_batches`); the first
    config.eval_batches of them are exactly the windows `Trainer.evaluate` uses."""
    return [loss_of(x, y) for x, y in evaluation_batches(val_data, config, n_batches)]


def describe(losses, standard):
    """'x.xxxx' for the standard evaluation, plus the mean over all windows when there are more."""
    text = f"{np.mean(losses[:standard]):.4f} ({standard} batches)"
    if len(losses) > standard:
        sem = np.std(losses, ddof=1) / np.sqrt(len(losses))
        text += f", {np.mean(losses):.4f} +- {sem:.4f} ({len(losses)} batches)"
    return text


def torch_train(config, train_data, val_data, V, n_eval, bias=True):
    """Train the PyTorch twin with our schedule and our batch generators; return (val losses, wall s)."""
    import torch

    model, optimizer = torch_model(config, V, bias=bias)
    data_rng = np.random.default_rng([config.seed, 1])          # the trainer's batch generator
    started = time.perf_counter()
    for step in range(config.max_steps):
        x, y = get_batch(train_data, config.block_size, config.batch_size, data_rng)
        torch_step(model, optimizer, config, x, y, config.learning_rate(step))
    wall = time.perf_counter() - started
    with torch.no_grad():
        losses = validation_losses(lambda x, y: model(torch.from_numpy(x.astype(np.int64)),
                                                      torch.from_numpy(y.astype(np.int64))).item(),
                                   val_data, config, n_eval)
    return losses, wall


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default="../shared/data/tinyshakespeare.txt", help="training text (read by path)")
    parser.add_argument("--steps", type=int, default=2000, help="training steps of the full run (0: skip it)")
    parser.add_argument("--compare-steps", type=int, default=60,
                        help="steps of each contender timed in the interleaved comparison (rounded up to a "
                             "multiple of 4, the timed steps of one turn)")
    parser.add_argument("--seed", type=int, default=1337, help="seed of the weights and batches (nanoGPT's 1337)")
    parser.add_argument("--torch-train", action="store_true",
                        help="also train the PyTorch twin for --steps steps on the same batches and report its val loss")
    parser.add_argument("--eval-batches", type=int, default=20,
                        help="validation windows of the final evaluation (the standard, nanoGPT's, is 20; "
                             "more gives a less noisy estimate, reported beside the 20-batch one)")
    parser.add_argument("--twin-without-biases", action="store_true",
                        help="train the PyTorch twin as nanoGPT's default bias=False (no Linear biases, no LayerNorm beta)")
    parser.add_argument("--kernels", choices=("fast", "plain"), default="fast",
                        help="our layers' tier: fast (default) or plain, the lecture's form")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS and PyTorch threads (default: the libraries' own choice, all cores); "
                             "on a machine shared with other jobs 1 thread is often faster for both")
    args = parser.parse_args(argv)
    if args.eval_batches < 20:
        parser.error(f"--eval-batches must be at least the standard 20, got {args.eval_batches}")

    config = TrainConfig(max_steps=max(args.steps, 1), eval_interval=max(args.steps, 1), eval_batches=20,
                         decay_embeddings=True, seed=args.seed, kernels=args.kernels)
    with open(args.text, encoding="utf-8") as file:
        text = file.read()
    tokenizer = CharTokenizer.train(text)
    V = tokenizer.vocab_size
    train_data, val_data = train_val_split(np.array(tokenizer.encode(text), dtype=np.int64))
    products = matmul_products(config, V)
    step_flops = flops(products)

    rate = numpy_matmul_rate()
    print(f"threads: {os.environ.get('OPENBLAS_NUM_THREADS', 'library default')}")
    print(f"NumPy {np.__version__} float32 matmul (768x512 @ 512x512): {rate:.0f} GFLOP/s (median of 30)")
    print(f"one training step: {step_flops / 1e9:.2f} GFLOP in {len(products)} matrix products; "
          f"floor at that rate {step_flops / rate / 1e6:.1f} ms")

    if args.steps:
        with Trainer(config, train_data, val_data, V, progress=False) as trainer:
            started = time.perf_counter()
            losses = trainer.fit()
            wall = time.perf_counter() - started
        median = float(np.median(trainer.step_times))
        peak = peak_mb()
        print(f"\nminitransformer, {args.steps} steps, float32: median {median * 1e3:.1f} ms/step, "
              f"wall {wall:.0f} s (incl. evaluation), final val loss {losses['val']:.4f} "
              f"(train {losses['train']:.4f}, 20 batches), peak memory {peak:.0f} MB")
        if args.eval_batches > config.eval_batches:
            with trainer.model.evaluating():
                ours = validation_losses(lambda x, y: float(trainer.loss_fn(trainer.model(x), y)),
                                         val_data, config, args.eval_batches)
            print(f"  validation loss {describe(ours, config.eval_batches)}")

    if args.torch_train:
        import torch
        if args.threads:
            torch.set_num_threads(args.threads)
        twin, torch_wall = torch_train(config, train_data, val_data, V, max(args.eval_batches, config.eval_batches),
                                       bias=not args.twin_without_biases)
        print(f"PyTorch twin{' without biases' if args.twin_without_biases else ''}, same schedule, batches and "
              f"evaluation windows: val loss {describe(twin, config.eval_batches)} "
              f"after {config.max_steps} steps in {torch_wall:.0f} s")
    if not args.compare_steps:
        return 0
    compare(config, train_data, val_data, V, products, args)
    return 0


# Each round gives every contender a turn of BLOCK consecutive steps, as a training loop runs them; the
# first step of a turn warms the caches the other contenders used and is not timed. Before each turn the
# benchmark waits IDLE_GAP seconds, so that no library's idle threads are still spinning from the turn
# before: OpenBLAS's spin for about 2**28 cycles (0.1 s) after each product before they sleep, and on 2
# cores they took a core from PyTorch's step that followed ours (measured: PyTorch's 2-thread step 114 ms
# right after ours, 37 ms when OpenBLAS's threads sleep at once).
IDLE_GAP = 0.15
BLOCK = 5


def _timed(function, times):
    """Run function(); append (wall seconds, CPU seconds of this process) to `times`."""
    wall, cpu = time.perf_counter(), time.process_time()
    function()
    times.append((time.perf_counter() - wall, time.process_time() - cpu))


def compare(config, train_data, val_data, V, products, args):
    """Interleave our step, a replay of its matrix products, and (if installed) PyTorch's step."""
    try:
        import torch
    except ImportError:
        torch = None
        print("\ntorch not installed: no PyTorch comparison (pip install torch==2.13.0 to add it)")
    with Trainer(config, train_data, val_data, V, progress=False) as ours:
        replay = product_replay(products)
        contenders = {"minitransformer step": ours.step_on_next_batch, "its matrix products alone": replay}
        if torch is not None:
            if args.threads:
                torch.set_num_threads(args.threads)
            x, y = get_batch(train_data, config.block_size, config.batch_size, np.random.default_rng(0))
            model, optimizer = torch_model(config, V)
            contenders[f"PyTorch {torch.__version__} eager step ({torch.get_num_threads()} threads)"] = (
                lambda: torch_step(model, optimizer, config, x, y, config.lr))
        times = {name: [] for name in contenders}
        for _ in range(5):                                      # warm up
            for function in contenders.values():
                function()
        for _ in range(-(-args.compare_steps // (BLOCK - 1))):
            for name, function in contenders.items():
                time.sleep(IDLE_GAP)
                function()                                      # untimed: the turn's first step
                for _ in range(BLOCK - 1):
                    _timed(function, times[name])
    medians = {name: np.median(np.array(values), axis=0) for name, values in times.items()}
    print(f"\ninterleaved, {len(times['minitransformer step'])} timed steps each, in turns of {BLOCK - 1} "
          "(median wall ms / median CPU ms of this process):")
    for name, (wall, cpu) in medians.items():
        print(f"  {name:<45} {wall * 1e3:7.1f} / {cpu * 1e3:7.1f}")
    ours_wall, ours_cpu = medians["minitransformer step"]
    products_wall, products_cpu = medians["its matrix products alone"]
    print(f"  outside matrix products: {1 - products_wall / ours_wall:.1%} of the step (wall)"
          + f", {1 - products_cpu / ours_cpu:.1%} (CPU)"
          + f"; achieved {flops(products) / ours_wall / 1e9:.0f} GFLOP/s")
    if torch is not None:
        torch_wall, torch_cpu = list(medians.values())[-1]
        print(f"  ratio minitransformer / PyTorch: {ours_wall / torch_wall:.2f} (wall)"
              + f", {ours_cpu / torch_cpu:.2f} (CPU)")


if __name__ == "__main__":
    sys.exit(main())
