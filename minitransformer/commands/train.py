"""`python -m minitransformer train`: train a small GPT on a text and show what it learned.

With no options it trains nanoGPT's small CPU model on the help text that ships
inside CPython (`pydoc_data.topics`), prints a sample from the untrained model,
trains with a progress bar (loss, learning rate, tokens/s), evaluates on the
held-out 10 %, and prints a sample from the trained model.

Where the run goes: with no --out, a new numbered directory under runs/
(runs/run-001, runs/run-002, ...; runs/latest names the newest: commands/runs.py),
so running the command twice keeps both runs. An --out that already holds a
checkpoint is refused unless --resume (continue it) or --force (replace its
checkpoint; other files there stay). `--resume` alone continues the newest run.

Everything a user can get wrong (options, the text file, --out) is checked
before a model is built, and reported as one `error: ...` line with exit
status 2 (commands/errors.py). A run whose loss becomes NaN or infinite stops
with an error naming the step and exit status 1; its last checkpoint is kept as
it was.
"""

import argparse
import os
import sys

from .errors import UsageError, non_negative_float, non_negative_int, positive_float, positive_int, read_text_file

HELP = "train a GPT language model on a text (default: CPython's pydoc help topics) and print samples"

DEFAULT_STEPS = 2000


def _dropout_rate(text):
    """argparse type: a dropout probability, 0 <= p < 1."""
    value = non_negative_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"expected a probability 0 <= p < 1, got {text!r}")
    return value


def add_arguments(parser):
    from ..training.config import TrainConfig

    defaults = TrainConfig()
    data = parser.add_argument_group("data")
    data.add_argument("--text", default=None, help="UTF-8 text file to train on (default: pydoc_data.topics)")
    data.add_argument("--tokenizer", choices=("char", "bpe"), default="char", help="token unit")
    data.add_argument("--vocab-size", type=positive_int, default=512, help="vocabulary size of the BPE tokenizer")
    run = parser.add_argument_group("run")
    run.add_argument("--max-steps", type=non_negative_int, default=DEFAULT_STEPS,
                     help="training steps (0: evaluate and sample the untrained model, save nothing)")
    run.add_argument("--out", default=None,
                     help="directory for the checkpoint and loss.png (default: a new runs/run-NNN; "
                          "runs/latest names the newest)")
    again = run.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="continue the run whose checkpoint is in --out (without --out: the newest run)")
    again.add_argument("--force", action="store_true",
                       help="replace the checkpoint already in --out (other files there stay)")
    run.add_argument("--eval-interval", type=positive_int, default=defaults.eval_interval,
                     help="steps between evaluations (and checkpoints)")
    run.add_argument("--eval-batches", type=positive_int, default=defaults.eval_batches, help="batches per evaluation")
    run.add_argument("--seed", type=non_negative_int, default=defaults.seed,
                     help="seed of weights, dropout and batches")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--workers", type=positive_int, default=defaults.workers,
                     help="processes that split each batch (data parallel), e.g. 2 on a 2-core machine")
    run.add_argument("--worker-timeout", type=positive_float, default=defaults.worker_timeout, metavar="SECONDS",
                     help="with --workers: the least a step waits for a worker's answer before the run stops "
                          "(or 20 x the slowest step, if longer)")
    model = parser.add_argument_group("model (defaults: nanoGPT's Shakespeare-char CPU configuration)")
    sizes = {"block_size": "context window T, in tokens", "batch_size": "windows per step B",
             "n_layers": "Transformer blocks", "n_heads": "attention heads (must divide --d-model)",
             "d_model": "model width C", "d_ff": "feed-forward width"}
    for name, what in sizes.items():
        model.add_argument("--" + name.replace("_", "-"), type=positive_int, default=getattr(defaults, name),
                           help=what)
    model.add_argument("--dropout", type=_dropout_rate, default=defaults.dropout, help="e.g. the notes' 0.1")
    model.add_argument("--dtype", choices=("float32", "float64"), default=defaults.dtype, help="parameter dtype")
    model.add_argument("--kernels", choices=("fast", "plain"), default=defaults.kernels,
                       help="fast: the speed tier; plain: the lecture's layers (in a student copy, the student's own); "
                            "same numbers up to rounding")
    optim = parser.add_argument_group("optimisation")
    optim.add_argument("--lr", type=non_negative_float, default=defaults.lr, help="peak learning rate")
    optim.add_argument("--min-lr", type=non_negative_float, default=defaults.min_lr, help="floor of the cosine decay")
    optim.add_argument("--warmup-steps", type=non_negative_int, default=defaults.warmup_steps,
                       help="steps of linear warmup (a run shorter than this warms up for a tenth of it)")
    optim.add_argument("--schedule", choices=("cosine", "noam", "constant"), default=defaults.schedule,
                       help="learning-rate schedule")
    optim.add_argument("--weight-decay", type=non_negative_float, default=defaults.weight_decay,
                       help="AdamW's decoupled weight decay")
    optim.add_argument("--grad-clip", type=non_negative_float, default=defaults.grad_clip,
                       help="global-norm clip (0: off)")
    show = parser.add_argument_group("samples")
    show.add_argument("--prompt", default="\n", help="prompt of the printed samples (default: a newline)")
    show.add_argument("--sample-tokens", type=non_negative_int, default=300,
                      help="tokens per printed sample (0: none)")
    show.add_argument("--temperature", type=non_negative_float, default=0.8, help="0 for greedy decoding")
    show.add_argument("--top-k", type=positive_int, default=None,
                      help="sample only among the k most likely tokens (default: all tokens)")


def _config_from_args(args):
    from ..training.config import TrainConfig

    warmup = args.warmup_steps if args.warmup_steps < args.max_steps else args.max_steps // 10   # short runs
    return TrainConfig(block_size=args.block_size, batch_size=args.batch_size, n_layers=args.n_layers,
                       n_heads=args.n_heads, d_model=args.d_model, d_ff=args.d_ff, dropout=args.dropout,
                       dtype=args.dtype, max_steps=args.max_steps, lr=args.lr, min_lr=args.min_lr,
                       warmup_steps=warmup, lr_decay_steps=args.max_steps, schedule=args.schedule,
                       weight_decay=args.weight_decay, grad_clip=args.grad_clip, eval_interval=args.eval_interval,
                       eval_batches=args.eval_batches, seed=args.seed, workers=args.workers,
                       kernels=args.kernels, worker_timeout=args.worker_timeout)


def _resumed_config(args, requested, saved, directory):
    """The checkpoint's config with this call's max_steps / eval settings; a conflicting flag is an error."""
    import dataclasses

    from ..training.checkpoint import CheckpointError
    from ..training.config import TrainConfig

    defaults = TrainConfig()
    keep = TrainConfig.RESUMABLE + ("lr_decay_steps", "warmup_steps")   # both derived from --max-steps
    conflicts = [f"--{field.replace('_', '-')} {getattr(requested, field)!r} (checkpoint: {getattr(saved, field)!r})"
                 for field in dataclasses.asdict(saved) if field not in keep
                 and getattr(requested, field) != getattr(defaults, field)
                 and getattr(requested, field) != getattr(saved, field)]
    if conflicts:
        raise CheckpointError(f"checkpoint {directory} was trained with a different config: " + ", ".join(conflicts))
    return dataclasses.replace(saved, **{field: getattr(requested, field) for field in TrainConfig.RESUMABLE})


def _check_options(args):
    """What argparse cannot see alone: options that must agree with each other, --out."""
    if args.d_model % args.n_heads:
        raise UsageError(f"--d-model {args.d_model} must be divisible by --n-heads {args.n_heads}")
    if args.out is not None and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out} is a file, expected a directory")


def _run_directory(args):
    """(the directory this run reads and writes, or None for a new numbered run) after checking it."""
    from ..training.checkpoint import has_checkpoint
    from .runs import RUNS_DIRECTORY, latest_run

    if args.resume:
        directory = args.out if args.out is not None else latest_run()
        if directory is None:
            raise UsageError(f"--resume: no run to continue: no --out given and no run under {RUNS_DIRECTORY}/")
        return directory
    if args.out is not None and has_checkpoint(args.out) and not args.force:
        raise UsageError(f"--out {args.out} already holds a checkpoint; continue it with --resume, replace it "
                         "with --force, or choose another --out")
    return args.out


def _check_data(args, text, source, tokenizer, train_data, val_data, block_size):
    """Enough tokens for one window in each split; a prompt the tokenizer can encode."""
    needed = block_size + 1
    for split, data in (("training (first 90 %)", train_data), ("validation (last 10 %)", val_data)):
        if len(data) < needed:
            raise UsageError(f"--text {source}: {len(text):,} characters give {len(train_data) + len(val_data):,} "
                             f"tokens, and its {split} part has {len(data):,}, fewer than one window of "
                             f"--block-size + 1 = {needed} tokens; use a longer text or a smaller --block-size")
    if args.sample_tokens > 0:
        try:
            prompt = tokenizer.encode(args.prompt)
        except ValueError as error:
            raise UsageError(f"--prompt {args.prompt!r} cannot be encoded: {error}") from None
        if not prompt:
            raise UsageError("--prompt is empty: the samples need at least one token to continue "
                             "(or --sample-tokens 0 for no samples)")


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

    from ..tokenizers import make_tokenizer
    from ..training.checkpoint import CheckpointError, check_training_meta, checkpoint_tokenizer, read_checkpoint
    from ..training.data import default_corpus, train_val_split
    from ..training.trainer import Trainer, TrainingDiverged
    from .runs import new_run_directory

    _check_options(args)
    out = _run_directory(args)
    if args.text is None:
        text, source = default_corpus(), "pydoc_data.topics (CPython's help text)"
    else:
        text, source = read_text_file(args.text, "--text"), args.text
    if not text:
        raise UsageError(f"--text {args.text} is empty")
    config = _config_from_args(args)
    try:
        if args.resume:
            contents = read_checkpoint(out)                     # read and verified once
            saved = check_training_meta(contents[0], out)
            config = _resumed_config(args, config, saved, out)
            tokenizer = checkpoint_tokenizer(contents[0], out)
            try:
                ids = np.array(tokenizer.encode(text), dtype=np.int64)
            except ValueError as error:
                raise UsageError(f"--text {source} does not fit the checkpoint's tokenizer: {error}") from None
        else:
            try:
                tokenizer = make_tokenizer(args.tokenizer, text, args.vocab_size)
            except ValueError as error:
                raise UsageError(f"--tokenizer {args.tokenizer}: {error}") from None
            ids = np.array(tokenizer.encode(text), dtype=np.int64)
        if config.workers > config.batch_size:
            raise UsageError(f"--workers {config.workers} must be at most the batch size {config.batch_size} "
                             "(each worker takes at least one window of the batch)")
        train_data, val_data = train_val_split(ids)
        _check_data(args, text, source, tokenizer, train_data, val_data, config.block_size)
        saves = args.resume or config.max_steps > 0              # --max-steps 0 trains nothing, saves nothing
        note = None
        if saves and out is None:
            try:
                out, note = new_run_directory()
            except OSError as error:
                raise UsageError(f"cannot create a run directory under runs/: {error}") from None
        elif saves:
            try:
                os.makedirs(out, exist_ok=True)
            except OSError as error:
                raise UsageError(f"--out {out} cannot be created: {error.strerror or error}") from None
        if args.resume:
            try:
                trainer = Trainer.resume(out, train_data, val_data, config=config, out_dir=out, contents=contents,
                                         progress=not args.no_progress)
            except MemoryError:                     # e.g. a hand-edited d_model of 10**9
                raise CheckpointError(f"checkpoint {out}: its train_config asks for a model too large for this "
                                      "machine's memory (was checkpoint.json edited?)") from None
        else:
            trainer = Trainer(config, train_data, val_data, tokenizer.vocab_size, out_dir=out if saves else None,
                              tokenizer_config=tokenizer.to_config(), progress=not args.no_progress,
                              overwrite=args.force)
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if note:
        print(note, file=sys.stderr)
    print(f"corpus: {source}, {len(text):,} characters -> {len(ids):,} tokens "
          f"({tokenizer!r}; {len(train_data):,} train / {len(val_data):,} validation)")
    print(f"model: {trainer.model!r}, {trainer.model.num_parameters():,} parameters, {config.dtype}; "
          f"{config.max_steps} steps of {config.batch_size} x {config.block_size} tokens")
    if trainer.step == 0:
        first = trainer.evaluate()
        trainer.history["eval"].append([0, first["train"], first["val"]])     # measured: the curve starts untrained
        print(f"untrained: val loss {first['val']:.4f} "
              f"(uniform guessing would be ln V = {np.log(tokenizer.vocab_size):.4f})")
        _print_sample("sample before training", trainer, tokenizer, args)
    else:
        print(f"resuming at step {trainer.step} ({out})")
    if not saves:
        print("\n--max-steps 0: nothing trained, nothing saved")
        return 0
    started = time.perf_counter()
    try:
        with trainer:                                   # stops the worker processes of --workers N
            losses = trainer.fit()
    except TrainingDiverged as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - started
    if losses is None:
        print(f"nothing to do: the checkpoint is already at step {trainer.step} >= --max-steps {config.max_steps}")
        return 0
    print(f"\ntrained to step {trainer.step} in {elapsed:.0f} s "
          f"(median {np.median(trainer.step_times) * 1e3:.0f} ms/step): val loss {losses['val']:.4f}")
    _print_sample("sample after training", trainer, tokenizer, args)
    print(f"\ncheckpoint: {out}   loss curve: {os.path.join(out, 'loss.png')}")
    print(f'sample more: python -m minitransformer sample --checkpoint {out} --prompt "..."')
    return 0
