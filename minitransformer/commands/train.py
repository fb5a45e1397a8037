"""`python -m minitransformer train`: train a small GPT on a text and show what it learned.

With no options it trains nanoGPT's small CPU model on the help text that ships
inside CPython (`pydoc_data.topics`), prints a sample from the untrained model,
trains with a progress bar (loss, learning rate, tokens/s), evaluates on the
held-out 10 %, and prints a sample from the trained model. The checkpoint and
loss-curve PNG go to --out; `--resume` continues a run from its checkpoint.
"""

import os
import sys

HELP = "train a GPT language model on a text (default: CPython's pydoc help topics) and print samples"

DEFAULT_STEPS = 2000


def add_arguments(parser):
    from ..training.config import TrainConfig

    defaults = TrainConfig()
    data = parser.add_argument_group("data")
    data.add_argument("--text", default=None, help="UTF-8 text file to train on (default: pydoc_data.topics)")
    data.add_argument("--tokenizer", choices=("char", "bpe"), default="char", help="token unit (default: char)")
    data.add_argument("--vocab-size", type=int, default=512, help="vocabulary size of the BPE tokenizer")
    run = parser.add_argument_group("run")
    run.add_argument("--max-steps", type=int, default=DEFAULT_STEPS, help=f"training steps (default {DEFAULT_STEPS})")
    run.add_argument("--out", default=os.path.join("runs", "latest"), help="checkpoint and loss.png directory")
    run.add_argument("--resume", action="store_true", help="continue the run whose checkpoint is in --out")
    run.add_argument("--eval-interval", type=int, default=defaults.eval_interval, help="steps between evaluations")
    run.add_argument("--eval-batches", type=int, default=defaults.eval_batches, help="batches per evaluation")
    run.add_argument("--seed", type=int, default=defaults.seed, help="seed of weights, dropout and batches")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--workers", type=int, default=defaults.workers,
                     help="processes that split each batch (data parallel), e.g. 2 on a 2-core machine")
    model = parser.add_argument_group("model (defaults: nanoGPT's Shakespeare-char CPU configuration)")
    for name in ("block_size", "batch_size", "n_layers", "n_heads", "d_model", "d_ff"):
        model.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    model.add_argument("--dropout", type=float, default=defaults.dropout, help="e.g. the notes' 0.1")
    model.add_argument("--dtype", choices=("float32", "float64"), default=defaults.dtype)
    model.add_argument("--kernels", choices=("fast", "plain"), default=defaults.kernels,
                       help="fast: the speed tier; plain: the lecture's layers (in a student copy, the student's own); "
                            f"same numbers up to rounding (default {defaults.kernels})")
    optim = parser.add_argument_group("optimisation")
    optim.add_argument("--lr", type=float, default=defaults.lr, help="peak learning rate")
    optim.add_argument("--min-lr", type=float, default=defaults.min_lr, help="floor of the cosine decay")
    optim.add_argument("--warmup-steps", type=int, default=defaults.warmup_steps)
    optim.add_argument("--schedule", choices=("cosine", "noam", "constant"), default=defaults.schedule)
    optim.add_argument("--weight-decay", type=float, default=defaults.weight_decay)
    optim.add_argument("--grad-clip", type=float, default=defaults.grad_clip, help="global-norm clip (0: off)")
    show = parser.add_argument_group("samples")
    show.add_argument("--prompt", default="\n", help="prompt of the printed samples")
    show.add_argument("--sample-tokens", type=int, default=300, help="tokens per printed sample (0: none)")
    show.add_argument("--temperature", type=float, default=0.8)
    show.add_argument("--top-k", type=int, default=None)


def _config_from_args(args):
    from ..training.config import TrainConfig

    warmup = args.warmup_steps if args.warmup_steps < args.max_steps else args.max_steps // 10   # short runs
    return TrainConfig(block_size=args.block_size, batch_size=args.batch_size, n_layers=args.n_layers,
                       n_heads=args.n_heads, d_model=args.d_model, d_ff=args.d_ff, dropout=args.dropout,
                       dtype=args.dtype, max_steps=args.max_steps, lr=args.lr, min_lr=args.min_lr,
                       warmup_steps=warmup, lr_decay_steps=args.max_steps, schedule=args.schedule,
                       weight_decay=args.weight_decay, grad_clip=args.grad_clip, eval_interval=args.eval_interval,
                       eval_batches=args.eval_batches, seed=args.seed, workers=args.workers,
                       kernels=args.kernels)


def _resumed_config(args, requested, meta):
    """The checkpoint's config with this call's max_steps / eval settings; a conflicting flag is an error."""
    import dataclasses

    from ..training.checkpoint import CheckpointError
    from ..training.config import TrainConfig

    saved, defaults = TrainConfig(**meta["train_config"]), TrainConfig()
    keep = TrainConfig.RESUMABLE + ("lr_decay_steps", "warmup_steps")   # both derived from --max-steps
    conflicts = [f"--{field.replace('_', '-')} {getattr(requested, field)!r} (checkpoint: {getattr(saved, field)!r})"
                 for field in dataclasses.asdict(saved) if field not in keep
                 and getattr(requested, field) != getattr(defaults, field)
                 and getattr(requested, field) != getattr(saved, field)]
    if conflicts:
        raise CheckpointError(f"checkpoint {args.out} was trained with a different config: " + ", ".join(conflicts))
    return dataclasses.replace(saved, **{field: getattr(requested, field) for field in TrainConfig.RESUMABLE})


def _print_sample(title, trainer, tokenizer, args):
    from ..generation.sampling import sample_text

    if args.sample_tokens <= 0:
        return
    text = sample_text(trainer.model, tokenizer, args.prompt, args.sample_tokens, temperature=args.temperature,
                       top_k=args.top_k, rng=args.seed)
    print(f"\n--- {title} ---\n{text}\n---", flush=True)


def run(args):
    import time

    import numpy as np

    from ..tokenizers import make_tokenizer, tokenizer_from_config
    from ..training.checkpoint import CheckpointError, read_checkpoint
    from ..training.data import default_corpus, train_val_split
    from ..training.trainer import Trainer

    if args.text is None:
        text, source = default_corpus(), "pydoc_data.topics (CPython's help text)"
    else:
        with open(args.text, encoding="utf-8") as file:
            text, source = file.read(), args.text
    config = _config_from_args(args)
    try:
        if args.resume:
            contents = read_checkpoint(args.out)                # read and verified once
            meta = contents[0]
            config = _resumed_config(args, config, meta)
            tokenizer = tokenizer_from_config(meta["tokenizer"])
            ids = np.array(tokenizer.encode(text), dtype=np.int64)
            train_data, val_data = train_val_split(ids)
            trainer = Trainer.resume(args.out, train_data, val_data, config=config, out_dir=args.out, contents=contents,
                                     progress=not args.no_progress)
        else:
            tokenizer = make_tokenizer(args.tokenizer, text, args.vocab_size)
            ids = np.array(tokenizer.encode(text), dtype=np.int64)
            train_data, val_data = train_val_split(ids)
            trainer = Trainer(config, train_data, val_data, tokenizer.vocab_size, out_dir=args.out,
                              tokenizer_config=tokenizer.to_config(), progress=not args.no_progress)
    except (CheckpointError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"corpus: {source}, {len(text):,} characters -> {len(ids):,} tokens "
          f"({tokenizer!r}; {len(train_data):,} train / {len(val_data):,} validation)")
    print(f"model: {trainer.model!r}, {trainer.model.num_parameters():,} parameters, {config.dtype}; "
          f"{config.max_steps} steps of {config.batch_size} x {config.block_size} tokens")
    if trainer.step == 0:
        first = trainer.evaluate()
        trainer.history["eval"].append([0, first["train"], first["val"]])     # the curve starts untrained
        print(f"untrained: val loss {first['val']:.4f} "
              f"(uniform guessing would be ln V = {np.log(tokenizer.vocab_size):.4f})")
        _print_sample("sample before training", trainer, tokenizer, args)
    else:
        print(f"resuming at step {trainer.step}")
    started = time.perf_counter()
    with trainer:                                       # stops the worker processes of --workers N
        losses = trainer.fit()
    elapsed = time.perf_counter() - started
    if losses is None:
        print(f"nothing to do: the checkpoint is already at step {trainer.step} >= --max-steps {config.max_steps}")
        return 0
    print(f"\ntrained to step {trainer.step} in {elapsed:.0f} s "
          f"(median {np.median(trainer.step_times) * 1e3:.0f} ms/step): val loss {losses['val']:.4f}")
    _print_sample("sample after training", trainer, tokenizer, args)
    print(f"\ncheckpoint: {args.out}   loss curve: {os.path.join(args.out, 'loss.png')}")
    print(f'sample more: python -m minitransformer sample --checkpoint {args.out} --prompt "..."')
    return 0
