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

`--resume` continues the run as it was configured: every option is stored in
the checkpoint, and one given again with another value is applied and said, or
refused (training/resuming.py's rules, the same for every command that trains;
commands/resumable.py reads the checkpoint once). Ctrl-C stops at the end of
the step under way, saves a checkpoint there and exits with status 130;
`--resume` continues from that step bit for bit. A run directory is left only
if something was saved in it.

Everything a user can get wrong (options, the text file, --out) is checked
before a model is built, and reported as one `error: ...` line with exit
status 2 (commands/errors.py). A run whose loss becomes NaN or infinite stops
with an error naming the step and exit status 1; its last checkpoint is kept as
it was.
"""

import argparse
import contextlib
import dataclasses
import os
import sys
import time
import types

from ..training import resuming
from . import ranks, resumable, threads
from .errors import UsageError, non_negative_float, non_negative_int, positive_float, positive_int, read_text_file

HELP = "train a GPT language model on a text (default: CPython's pydoc help topics) and print samples"

DEFAULT_STEPS = 2000
RESUMES = True          # __main__ records which options were given (args.given), for --resume (training/resuming.py)


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
    _add_parallel_arguments(parser, defaults)
    _add_model_arguments(parser, defaults)
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


def _add_model_arguments(parser, defaults):
    """The model's sizes, its style (training/config.py's STYLES), dropout, dtype and kernels."""
    from ..training.config import STYLES

    model = parser.add_argument_group("model (defaults: nanoGPT's Shakespeare-char CPU configuration)")
    sizes = {"block_size": "context window T, in tokens", "batch_size": "windows per step B",
             "n_layers": "Transformer blocks", "n_heads": "attention heads (must divide --d-model)",
             "d_model": "model width C"}
    for name, what in sizes.items():
        model.add_argument("--" + name.replace("_", "-"), type=positive_int, default=getattr(defaults, name),
                           help=what)
    model.add_argument("--style", choices=tuple(STYLES), default=defaults.style,
                       help="gpt2: learned positions, LayerNorm, GELU, biases; llama: RoPE, RMSNorm, SwiGLU, "
                            "no biases (Touvron et al. 2023)")
    model.add_argument("--d-ff", type=positive_int, default=None,
                       help=f"feed-forward width (default: {defaults.d_ff}; with --style llama, the SwiGLU width "
                            "that gives the parameter count of the gpt2 model of the same options)")
    model.add_argument("--dropout", type=_dropout_rate, default=defaults.dropout, help="e.g. the notes' 0.1")
    model.add_argument("--dtype", choices=("float32", "float64"), default=defaults.dtype, help="parameter dtype")
    model.add_argument("--kernels", choices=("fast", "plain"), default=defaults.kernels,
                       help="fast: the speed tier; plain: the lecture's layers (in a student copy, the student's own); "
                            "same numbers up to rounding")


def _add_parallel_arguments(parser, defaults):
    """Data parallelism on MPI ranks (training/distributed.py; commands/ranks.py)."""
    group = parser.add_argument_group("data parallel (mpiexec -n N, or --workers N; needs the [mpi] extra)")
    group.add_argument("--workers", type=positive_int, default=defaults.workers,
                       help="MPI ranks that split each batch, e.g. 2 on a 2-core machine: runs this command "
                            "under `mpiexec -n N`; under mpiexec, its -n")
    group.add_argument("--parallel", choices=("replicated", "sharded"), default=defaults.parallel,
                       help="with several ranks: replicated (the gradient all-reduced, as PyTorch's DDP) or "
                            "sharded (AdamW's state split over the ranks, as ZeRO-1)")
    group.add_argument("--threads-per-rank", type=positive_int, default=None, metavar="N",
                       help="BLAS and OpenMP threads of each rank (default: the cores of each host divided among "
                            "its ranks; one process: the libraries' own choice)")
    group.add_argument("--worker-timeout", type=positive_float, default=defaults.worker_timeout, metavar="SECONDS",
                       help="with several ranks: the least a step waits for a rank before the job stops "
                            "(or 20 x the slowest step, if longer)")


def run(args):
    """Train as the options say; the exit status. The command's phases, each a function called once, in order
    (tests/test_train_command_flow.py holds `run` to that):

    1. `_join_ranks`: this process's place among the MPI ranks (`--workers N` runs the command under mpiexec);
    2. `_check_and_read`: every option, --out, on --resume the checkpoint (read once, its resuming rules
       applied: commands/resumable.py), the text, checked and read before any model is built; every rank agrees,
       so a mistake is one `error:` line and exit status 2;
    3. `_kept_only_if_saved`: a run directory made for this run is removed again if nothing was saved in it;
    4. `_build`: the threads of each rank, then the trainer, fresh or restored from the checkpoint read in 2;
    5. `_introduce`: the notes, the corpus, the model, and the untrained model's loss and sample;
    6. `_train`: the loop's run (Ctrl-C saves there, status 130; a NaN stops it, status 1);
    7. `_report`: the trained model's loss and sample, where its checkpoint is; the exit status.
    """
    job = _join_ranks(args)
    plan = _check_and_read(args, job)
    with _kept_only_if_saved(plan):
        trainer = _build(args, plan, job)
        _introduce(args, plan, trainer, job)
        outcome = _train(plan, trainer)
        return _report(args, plan, trainer, outcome)


# ---------------------------------------------------------------- 1. the ranks
def _join_ranks(args):
    """SimpleNamespace(comm: MPI_COMM_WORLD or None, rank, size): None, 0, 1 for one process. `--workers N`
    outside mpiexec runs this command under `mpiexec -n N` instead (commands/ranks.py), its options checked
    first; under mpiexec, ranks but 0 are silenced."""
    from ..training.distributed import mpi_world, world
    from .runs import latest_run

    rank, size = mpi_world()
    if size == 1 and args.workers > 1:
        _check_options(args)                    # a mistake found here is not worth starting mpiexec for
        resumable.run_directory(args, latest_run)
        ranks.launch(args.workers, args.argv, threads.launch_environment(args.workers, args.threads_per_rank))
    if size > 1:
        ranks.quiet_unless_rank_0(rank)
        if args.workers not in (1, size):
            raise UsageError(f"--workers {args.workers} under mpiexec -n {size}: give one or the other, or the same")
        args.workers = size
    return types.SimpleNamespace(comm=world() if size > 1 else None, rank=rank, size=size)


# ---------------------------------------------------------------- 2. everything checked and read
def _check_and_read(args, job):
    """The plan of the run (`_plan`); every rank agrees on it: if any rank failed, every rank stops with the
    first failure, rank 0 saying it (commands/ranks.py), as one UsageError."""
    from ..training.checkpoint import CheckpointError

    plan = failure = None
    try:
        plan = _plan(args, job)
    except (UsageError, CheckpointError) as error:          # ResumeRefused among them
        failure = error
    if job.comm is not None:
        ranks.agree(job.comm, failure)
    elif failure is not None:
        raise UsageError(str(failure)) from None
    return plan


def _plan(args, job):
    """The options, then --out, the checkpoint (on --resume), the text and the tokens, then the run directory,
    each checked before the next is read.

    Returns:
        SimpleNamespace(out, created: True if this run made its directory, text, source, text_path, tokenizer,
        config, contents: the checkpoint read (None for a new run), notes, ids, train_data, val_data, saves).
    """
    from .runs import latest_run

    _check_options(args)                                        # the options as given
    prepared = resumable.prepare(args, "train", add_arguments, newest=latest_run, ranks=job.size)
    plan = _resumed(args, prepared) if args.resume else _started(args, prepared.out)
    _split(args, plan)
    plan.saves = args.resume or plan.config.max_steps > 0      # --max-steps 0 trains nothing, saves nothing
    _make_directory(plan, job.rank)
    return plan


def _check_options(args):
    """What argparse cannot see alone: options that must agree with each other (--out: `resumable.prepare`)."""
    if args.d_model % args.n_heads:
        raise UsageError(f"--d-model {args.d_model} must be divisible by --n-heads {args.n_heads}")
    if not args.resume:                                         # a resumed run's: once its config is known
        _check_workers(args.workers, args.batch_size)
    _check_threads(args)


def _check_workers(workers, batch_size):
    if workers > batch_size:
        raise UsageError(f"--workers {workers} must be at most the batch size {batch_size} "
                         "(each rank takes at least one window of the batch)")


def _check_threads(args):
    """--threads-per-rank, given or (resumed) stored, at most the cores this process may run on."""
    message = threads.check(args.threads_per_rank)
    if message:
        raise UsageError(message)


def _started(args, out):
    """A new run: its text, tokenizer and config from the command line."""
    from ..tokenizers import make_tokenizer

    text, source = _read_text(args.text)
    try:
        tokenizer = make_tokenizer(args.tokenizer, text, args.vocab_size)
    except ValueError as error:
        raise UsageError(f"--tokenizer {args.tokenizer}: {error}") from None
    return types.SimpleNamespace(out=out, text=text, source=source, text_path=args.text, tokenizer=tokenizer,
                                 config=_config_from_args(args, tokenizer.vocab_size), contents=None, notes=[])


def _config_from_args(args, vocab_size):
    from ..training.config import TrainConfig

    warmup = args.warmup_steps if args.warmup_steps < args.max_steps else args.max_steps // 10   # short runs
    config = TrainConfig(block_size=args.block_size, batch_size=args.batch_size, n_layers=args.n_layers,
                         n_heads=args.n_heads, d_model=args.d_model, dropout=args.dropout, style=args.style,
                         dtype=args.dtype, max_steps=args.max_steps, lr=args.lr, min_lr=args.min_lr,
                         warmup_steps=warmup, lr_decay_steps=args.max_steps, schedule=args.schedule,
                         weight_decay=args.weight_decay, grad_clip=args.grad_clip, eval_interval=args.eval_interval,
                         eval_batches=args.eval_batches, seed=args.seed, workers=args.workers,
                         parallel=args.parallel, kernels=args.kernels, worker_timeout=args.worker_timeout)
    return dataclasses.replace(config, d_ff=_feed_forward_width(args, config, vocab_size))


def _feed_forward_width(args, config, vocab_size):
    """--d-ff as given; else TrainConfig's for gpt2, and for llama the SwiGLU width whose model has as many
    parameters as the gpt2 model of the same options (`matching_llama_width`; the counts computed, not built)."""
    from ..training.config import TrainConfig, matching_llama_width, parameter_count

    if args.d_ff is not None:
        return args.d_ff
    gpt2 = dataclasses.replace(config, style="gpt2", d_ff=TrainConfig.d_ff)
    if config.style == "gpt2":
        return gpt2.d_ff
    return matching_llama_width(config, vocab_size, parameter_count(gpt2, vocab_size))


def _read_text(path):
    """(text, how to name it) of --text PATH, or of the default corpus when PATH is None."""
    from ..training.data import default_corpus

    if path is None:
        return default_corpus(), "pydoc_data.topics (CPython's help text)"
    text = read_text_file(path, "--text")
    if not text:
        raise UsageError(f"--text {path} is empty")
    return text, path


def _resumed(args, resumed):
    """A resumed run: its checkpoint read once and its rules applied (commands/resumable.py's `prepare`: the
    config, the tokenizer, the options not given again), its text read again and compared."""
    _check_threads(args)                                        # a stored value too
    text, source = _read_text(resumed.text_path)
    text_note = resuming.check_text(resumed.text, resumed.text_path, text, resumed.given)
    return types.SimpleNamespace(out=resumed.out, text=text, source=source, text_path=resumed.text_path,
                                 tokenizer=resumed.tokenizer, config=resumed.config, contents=resumed.contents,
                                 notes=[note for note in [*resumed.notes, text_note] if note])


def _split(args, plan):
    """Token ids, split 90/10, checked against the window, the ranks and the prompt."""
    import numpy as np

    from ..training.data import train_val_split

    try:
        plan.ids = np.array(plan.tokenizer.encode(plan.text), dtype=np.int64)
    except ValueError as error:
        raise UsageError(f"--text {plan.source} does not fit the checkpoint's tokenizer: {error}") from None
    _check_workers(plan.config.workers, plan.config.batch_size)
    plan.train_data, plan.val_data = train_val_split(plan.ids)
    _check_data(args, plan.text, plan.source, plan.tokenizer, plan.train_data, plan.val_data, plan.config.block_size)


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


def _make_directory(plan, rank):
    """Rank 0 makes the run's directory (a new numbered one when no --out was given): sets plan.out and
    plan.created, and puts a note first when runs/latest could not be pointed at it. Nothing when nothing will
    be saved."""
    from .runs import new_run_directory

    plan.created = False
    if not plan.saves or rank != 0:
        return
    if plan.out is None:
        try:
            plan.out, note = new_run_directory()
        except OSError as error:
            raise UsageError(f"cannot create a run directory under runs/: {error}") from None
        plan.created = True
        plan.notes[:0] = [note] if note else []
        return
    plan.created = not os.path.isdir(plan.out)
    try:
        os.makedirs(plan.out, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--out {plan.out} cannot be created: {error.strerror or error}") from None


# ---------------------------------------------------------------- 3. a run directory only where something was saved
@contextlib.contextmanager
def _kept_only_if_saved(plan):
    """Around the rest of the run: the directory this run made is removed again if nothing was put in it (the
    run diverged, was stopped or failed before its first save)."""
    from .runs import remove_if_empty

    try:
        yield
    finally:
        if plan.created:
            remove_if_empty(plan.out)                       # a directory holding anything is left as it is


# ---------------------------------------------------------------- 4. the trainer
def _build(args, plan, job):
    """This rank's threads (the job's line, the run's first), then the Trainer: a new one, or the checkpoint read
    in `_check_and_read` restored; it saves to plan.out on rank 0 (nowhere with --max-steps 0)."""
    from ..training.checkpoint import CheckpointError

    line = threads.limit(job.comm, args.threads_per_rank, plan.config.parallel)
    if line and job.rank == 0:
        print(line, flush=True)
    try:
        trainer = _trainer(args, plan, plan.out if plan.saves and job.rank == 0 else None)
    except CheckpointError as error:
        raise UsageError(str(error)) from None
    trainer.run_info = resuming.run_record("train", args, text=resuming.text_record(plan.text_path, plan.text))
    return trainer


def _trainer(args, plan, out_dir):
    from ..objectives.language_model import Trainer

    if plan.contents is None:
        return Trainer(plan.config, plan.train_data, plan.val_data, plan.tokenizer.vocab_size, out_dir=out_dir,
                       tokenizer_config=plan.tokenizer.to_config(), progress=not args.no_progress,
                       overwrite=args.force)
    try:
        return Trainer.resume(plan.out, plan.train_data, plan.val_data, config=plan.config, out_dir=out_dir,
                              contents=plan.contents, progress=not args.no_progress)
    except MemoryError:                     # e.g. a hand-edited d_model of 10**9
        raise UsageError(f"checkpoint {plan.out}: its train_config asks for a model too large for this "
                         "machine's memory (was checkpoint.json edited?)") from None


# ---------------------------------------------------------------- 5. before training
def _introduce(args, plan, trainer, job):
    """The notes; on rank 0 the corpus, the model, and the untrained model's loss and sample (or where it
    resumes). Under mpiexec every rank takes its share of the untrained model's evaluation, as of the loop's."""
    import numpy as np

    from ..training.metrics import perplexity

    for note in plan.notes:
        print(note, file=sys.stderr)
    untrained = trainer.step == 0
    if untrained and (job.rank == 0 or trainer.shares_evaluation):
        first = trainer.evaluate_together()                            # every rank its share (a collective)
    if job.rank != 0:
        return
    config, tokenizer = plan.config, plan.tokenizer
    print(f"corpus: {plan.source}, {len(plan.text):,} characters -> {len(plan.ids):,} tokens "
          f"({tokenizer!r}; {len(plan.train_data):,} train / {len(plan.val_data):,} validation)")
    print(f"model: {trainer.model!r}, {config.style} style, d_ff {config.d_ff}, "
          f"{trainer.model.num_parameters():,} parameters, {config.dtype}; "
          f"{config.max_steps} steps of {config.batch_size} x {config.block_size} tokens")
    if not untrained:
        print(f"resuming at step {trainer.step} ({plan.out})")
        return
    trainer.record_evaluation(first)                                    # measured: the curve starts untrained
    print(f"untrained: val loss {first['val']:.4f}, perplexity {perplexity(first['val']):.2f} "
          f"(uniform guessing would be ln V = {np.log(tokenizer.vocab_size):.4f}, perplexity V = "
          f"{tokenizer.vocab_size})")
    _print_sample("sample before training", trainer, tokenizer, args)


def _print_sample(title, trainer, tokenizer, args):
    from ..generation.sampling import sample_text

    if args.sample_tokens <= 0:
        return
    text = sample_text(trainer.model, tokenizer, args.prompt, args.sample_tokens, temperature=args.temperature,
                       top_k=args.top_k, rng=args.seed)
    print(f"\n--- {title} ---\n{text}\n---", flush=True)


# ---------------------------------------------------------------- 6. the loop's run
def _train(plan, trainer):
    """Hand the loop its run (none with --max-steps 0): SimpleNamespace(status: the exit status when it stopped
    early (1 diverged, 130 Ctrl-C, each said in one line), else None; losses: the last evaluation's, None when
    no step was left; seconds)."""
    started = time.perf_counter()
    status, losses = resumable.fit(trainer, "train", plan.out) if plan.saves else (None, None)
    return types.SimpleNamespace(status=status, losses=losses, seconds=time.perf_counter() - started)


# ---------------------------------------------------------------- 7. the report
def _report(args, plan, trainer, outcome):
    """What the run learned, a sample, where its checkpoint is; the exit status."""
    import numpy as np

    from ..training.metrics import perplexity

    if outcome.status is not None:
        return outcome.status
    if not plan.saves:
        print("\n--max-steps 0: nothing trained, nothing saved")
        return 0
    if outcome.losses is None:
        print(f"nothing to do: the checkpoint is already at step {trainer.step} >= --max-steps {plan.config.max_steps}")
        return 0
    losses = outcome.losses
    print(f"\ntrained to step {trainer.step} in {outcome.seconds:.0f} s "
          f"(median {np.median(trainer.step_times) * 1e3:.0f} ms/step): val loss {losses['val']:.4f}, "
          f"perplexity {perplexity(losses['val']):.2f}")
    _print_sample("sample after training", trainer, plan.tokenizer, args)
    print(f"\ncheckpoint: {plan.out}   loss curve: {os.path.join(plan.out, 'loss.png')}")
    print(f'sample more: python -m minitransformer sample --checkpoint {plan.out} --prompt "..."')
    return 0
