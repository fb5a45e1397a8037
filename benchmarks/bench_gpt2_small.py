"""Benchmark: generation at GPT-2 small's shape, batch 1, float32, tokens per second.

    python benchmarks/bench_gpt2_small.py [--prompt 16] [--new 64] [--repeats 3] [--threads 2]

GPT-2 small is 12 layers, 12 heads, C = 768, V = 50,257, a 1,024-token window: 124 M parameters. No
weights download here, so the benchmark draws random ones in Hugging Face's layout and builds the model
through the same interop path that loads the real ones (`interop.gpt2.from_gpt2_state_dict`); the cost of
a step does not depend on the values. Three decoders generate `--new` tokens greedily after a random
`--prompt`-token prompt:

1. ours with the key/value cache (`generation.sampling.generate`, the fast kernels),
2. ours without a cache, recomputing the whole prefix at every token (picoGPT's way),
3. Hugging Face transformers' `GPT2LMHeadModel` on the same weights, eager, with its cache
   (the `parity` extra; skipped without torch and transformers).

All three must produce the same tokens (checked). Each is timed `--repeats` times, interleaved so they
see the same machine load; the median tokens per second and the ratio to Hugging Face are printed,
with the bandwidth bound: a cached step reads every weight once, so tokens/s can not exceed
(memory bandwidth) / (bytes of the weights); the script measures this machine's copy bandwidth to say
how far each decoder is from it.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _machine import load_average  # noqa: E402
from _threads import threads_from_argv  # noqa: E402

THREADS = int(threads_from_argv(sys.argv, "2"))

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minitransformer.fast import use_kernels  # noqa: E402
from minitransformer.generation.sampling import generate  # noqa: E402
from minitransformer.interop.gpt2 import from_gpt2_state_dict  # noqa: E402

SMALL = dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, n_positions=1024)


def random_gpt2_state_dict(shape, rng):
    """{Hugging Face GPT-2 name: float32 array} with GPT-2's initialisation (N(0, 0.02), LayerNorm 1 and 0)."""
    C, V, n_ctx = shape["n_embd"], shape["vocab_size"], shape["n_positions"]
    normal = lambda *dims: np.float32(0.02) * rng.standard_normal(dims, dtype=np.float32)   # noqa: E731
    ones, zeros = (lambda n: np.ones(n, np.float32)), (lambda n: np.zeros(n, np.float32))
    state = {"wte.weight": normal(V, C), "wpe.weight": normal(n_ctx, C),
             "ln_f.weight": ones(C), "ln_f.bias": zeros(C)}
    for i in range(shape["n_layer"]):
        state.update({f"h.{i}.ln_1.weight": ones(C), f"h.{i}.ln_1.bias": zeros(C),
                      f"h.{i}.attn.c_attn.weight": normal(C, 3 * C), f"h.{i}.attn.c_attn.bias": zeros(3 * C),
                      f"h.{i}.attn.c_proj.weight": normal(C, C), f"h.{i}.attn.c_proj.bias": zeros(C),
                      f"h.{i}.ln_2.weight": ones(C), f"h.{i}.ln_2.bias": zeros(C),
                      f"h.{i}.mlp.c_fc.weight": normal(C, 4 * C), f"h.{i}.mlp.c_fc.bias": zeros(4 * C),
                      f"h.{i}.mlp.c_proj.weight": normal(4 * C, C), f"h.{i}.mlp.c_proj.bias": zeros(C)})
    return state


def hugging_face_model(state, shape):
    """GPT2LMHeadModel with these weights, eager attention, float32; None without the parity extra."""
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return None
    torch.set_num_threads(THREADS)
    config = GPT2Config(**shape, attn_implementation="eager")
    with torch.device("meta"):                        # no random initialisation: the weights come next
        model = GPT2LMHeadModel(config)
    model.transformer.load_state_dict({name: torch.from_numpy(value) for name, value in state.items()},
                                      strict=False, assign=True)
    model.lm_head.weight = model.transformer.wte.weight
    for name, _ in model.named_buffers():             # the causal-mask buffers, if this version keeps them
        raise SystemExit(f"error: Hugging Face's GPT2LMHeadModel has a buffer {name} this benchmark does not fill")
    return model.eval()


def hugging_face_decoder(model, prompt, new_tokens):
    import torch

    def decode():
        with torch.inference_mode():
            out = model.generate(torch.from_numpy(prompt[None].astype(np.int64)), max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, do_sample=False, use_cache=True, pad_token_id=0)
        return out[0].numpy()
    return decode


def copy_bandwidth(megabytes=128, repeats=5):
    """This machine's memory bandwidth in GB/s, from copying a large array (read + write)."""
    source = np.ones(megabytes * 2**20 // 4, np.float32)
    target = np.empty_like(source)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(target, source)
        times.append(time.perf_counter() - start)
    return 2 * source.nbytes / min(times) / 1e9


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=16, help="prompt length in tokens")
    parser.add_argument("--new", type=int, default=64, help="tokens to generate")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="BLAS threads (and torch's), read before NumPy loads")
    parser.add_argument("--layers", type=int, default=SMALL["n_layer"], help="fewer layers for a quick try")
    parser.add_argument("--no-uncached", action="store_true", help="skip the decoder without a cache (slow)")
    args = parser.parse_args(argv)
    shape = dict(SMALL, n_layer=args.layers)
    rng = np.random.default_rng(0)
    state = random_gpt2_state_dict(shape, rng)
    model = use_kernels(from_gpt2_state_dict(state, n_heads=shape["n_head"], dtype=np.float32), "fast")
    n_params = sum(p.data.size for p in model.parameters())
    weight_bytes = sum(p.data.nbytes for p in model.parameters())
    prompt = rng.integers(0, shape["vocab_size"], args.prompt)
    print(f"GPT-2 small's shape: {shape['n_layer']} layers, {shape['n_head']} heads, C {shape['n_embd']}, "
          f"V {shape['vocab_size']}: {n_params / 1e6:.1f} M parameters, {weight_bytes / 1e6:.0f} MB in float32")
    print(f"batch 1, prompt {args.prompt} tokens, {args.new} new tokens, greedy, {args.threads} threads")
    decoders = {"ours, KV cache": lambda: generate(model, prompt, args.new, temperature=0.0),
                "ours, no cache": lambda: generate(model, prompt, args.new, temperature=0.0, use_cache=False)}
    if args.no_uncached:
        del decoders["ours, no cache"]
    hf = hugging_face_model(state, shape)
    if hf is not None:
        decoders["Hugging Face eager, cache"] = hugging_face_decoder(hf, prompt, args.new)
    outputs = {name: decode() for name, decode in decoders.items()}         # warm-up, and the tokens to compare
    reference = outputs["ours, KV cache"]
    for name, out in outputs.items():
        if not np.array_equal(out, reference):
            raise SystemExit(f"error: {name} generated other tokens than ours with the cache: {out} vs {reference}")
    times = {name: [] for name in decoders}
    for _ in range(args.repeats):
        for name, decode in decoders.items():
            start = time.perf_counter()
            decode()
            times[name].append(time.perf_counter() - start)
    bandwidth = copy_bandwidth()
    bound = bandwidth * 1e9 / weight_bytes
    print(f"copy bandwidth {bandwidth:.1f} GB/s: a cached step that reads every weight once is at most "
          f"{bound:.0f} tokens/s")
    hf_rate = args.new / statistics.median(times[list(decoders)[-1]]) if hf is not None else None
    for name, samples in times.items():
        rate = args.new / statistics.median(samples)
        versus = f", {rate / hf_rate:.2f}x Hugging Face" if hf_rate else ""
        print(f"{name:28s} {rate:7.2f} tokens/s (median of {args.repeats}){versus}, "
              f"{rate / bound:.0%} of the bandwidth bound")
    print(f"load average: {load_average():.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
