"""What each fast form buys: the training step with every fast form, and with each one turned back to plain.

    python benchmarks/bench_fast_forms.py [--text ../shared/data/tinyshakespeare.txt] [--rounds 7] [--steps 10]

The model is `train`'s default (nanoGPT's Shakespeare-char CPU configuration, float32, one process). Each round
times `--steps` training steps (forward, loss, backward, AdamW) of every variant in turn, on the same batches:
"all fast", "all plain", and for each fast form "all fast but <form> plain". Interleaving the variants inside
every round spreads a shared machine's noise over all of them; the table reports the median over rounds and
the saving of each form, median(without it) / median(all fast) - 1, with the spread of that ratio over rounds
(its 25th-75th percentiles). A form whose saving is inside that spread does not earn its place (the rule of the two tiers: a
fast form that gains less than the run-to-run noise is deleted, not kept).

A fast form that only works beside another (it calls a method that only the other's fast form has) cannot be
turned back alone; the table says so.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minitransformer.fast import fast_forms, use_kernels  # noqa: E402
from minitransformer.objectives.language_model import LanguageModelObjective  # noqa: E402
from minitransformer.tokenizers import CharTokenizer  # noqa: E402
from minitransformer.training.config import TrainConfig, build_model, build_optimizer  # noqa: E402
from minitransformer.training.data import get_batch  # noqa: E402
from minitransformer.training.step import train_step  # noqa: E402


def variant_model(config, vocab_size, plain_classes):
    """The default GPT with every fast form, then the layers whose plain class is in `plain_classes` made plain."""
    model = use_kernels(build_model(config, vocab_size), "fast")
    forms = fast_forms()
    fast_to_plain = {forms[plain]: plain for plain in plain_classes}
    stack = [model]
    while stack:
        layer = stack.pop()
        if type(layer) in fast_to_plain:
            layer.__class__ = fast_to_plain[type(layer)]
        stack.extend(child for _, child in layer.named_children())
    return model


def time_steps(model, config, batches):
    """Seconds per training step over `batches`, after one untimed warm-up step."""
    objective = LanguageModelObjective(model)
    optimizer = build_optimizer(model, config)
    train_step(objective, optimizer, batches[0], config.lr, config.grad_clip)
    start = time.perf_counter()
    for batch in batches:
        train_step(objective, optimizer, batch, config.lr, config.grad_clip)
    return (time.perf_counter() - start) / len(batches)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default="../shared/data/tinyshakespeare.txt", help="training text (read by path)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; each times every variant once")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per variant per round")
    parser.add_argument("--only", action="append", default=[],
                        help="also time a variant with only these fast forms (comma-separated plain class names); "
                             "a form may pay off only beside another, e.g. multi-head attention beside attention")
    args = parser.parse_args(argv)
    text = open(args.text, encoding="utf-8").read()
    tokenizer = CharTokenizer.train(text)
    data = np.array(tokenizer.encode(text), dtype=np.int64)
    config = TrainConfig()
    rng = np.random.default_rng(0)
    batches = [get_batch(data, config.block_size, config.batch_size, rng) for _ in range(args.steps)]

    forms = sorted(fast_forms(), key=lambda plain: plain.__name__)
    variants = {"all fast": [], "all plain": list(forms)}
    variants.update({f"fast but {plain.__name__} plain": [plain] for plain in forms})
    by_name = {plain.__name__: plain for plain in forms}
    for kept in args.only:                      # e.g. "GELU,MultiHeadAttention,ScaledDotProductAttention"
        names = kept.split(",")
        variants[f"only {kept} fast"] = [plain for plain in forms if plain.__name__ not in names]
        assert all(name in by_name for name in names), f"--only: unknown fast form in {kept}"
    times = {name: [] for name in variants}
    broken = {}
    for round_index in range(args.rounds):
        for name, plain_classes in variants.items():
            if name in broken:
                continue
            model = variant_model(config, tokenizer.vocab_size, plain_classes)
            try:
                times[name].append(time_steps(model, config, batches))
            except (AttributeError, TypeError) as error:
                broken[name] = f"{type(error).__name__}: {error}"
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    fast = np.array(times["all fast"])
    print(f"{'variant':<38}{'median ms':>10}  {'saving of the form (IQR over rounds)':>38}")
    for name in variants:
        if name in broken:
            print(f"{name:<38}{'-':>10}  cannot run alone: {broken[name]}")
            continue
        ms = 1e3 * np.median(times[name])
        ratios = np.array(times[name]) / fast - 1
        q25, q50, q75 = np.percentile(ratios, [25, 50, 75])
        saving = "" if name == "all fast" else f"{100 * q50:+6.1f} %  ({100 * q25:+.1f} .. {100 * q75:+.1f})"
        print(f"{name:<38}{ms:>10.1f}  {saving:>38}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
