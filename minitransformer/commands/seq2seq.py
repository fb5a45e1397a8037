"""`python -m minitransformer seq2seq`: train an encoder-decoder to reverse strings, report held-out exact match.

On a shared machine, run with OMP_NUM_THREADS=1: the matrices are small and
BLAS threads competing for busy cores make each step several times slower.

The options are checked before the model is built (one `error: ...` line, exit
status 2): sizes must be positive, --heads must divide --d-model (and the width
be even, for the sinusoidal positions), --min-len <= --max-len, and the
held-out set may take at most half of the distinct strings there are, so that
training strings remain to be drawn (otherwise drawing them would never end).
`--steps 0` evaluates the untrained model.

It trains with the one training loop: --out keeps checkpoints, Ctrl-C saves and `--resume --out DIR` continues
bit for bit, a NaN stops the run (commands/resumable.py).
"""

import sys
import time

from . import resumable
from .errors import UsageError, non_negative_float, non_negative_int, positive_int

RESUMES = True          # __main__ records which options were given (args.given), for --resume (training/resuming.py)

HELP = "train an encoder-decoder Transformer on string reversal; print held-out exact match, BLEU and examples"


def add_arguments(parser):
    parser.add_argument("--steps", type=non_negative_int, default=1000, help="training steps (batches; 0: evaluate only)")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="strings per step")
    parser.add_argument("--lr", type=non_negative_float, default=1e-3, help="peak learning rate (after warm-up)")
    parser.add_argument("--d-model", type=positive_int, default=64, help="model width, even and divisible by --heads")
    parser.add_argument("--heads", type=positive_int, default=4, help="attention heads")
    parser.add_argument("--layers", type=positive_int, default=2, help="encoder blocks, and as many decoder blocks")
    parser.add_argument("--norm", choices=("post", "pre"), default="post", help="post-norm (the paper) or pre-norm")
    parser.add_argument("--no-share", action="store_true", help="separate source/target/output tables")
    parser.add_argument("--symbols", type=positive_int, default=10, help="alphabet size")
    parser.add_argument("--min-len", type=positive_int, default=3, help="shortest string")
    parser.add_argument("--max-len", type=positive_int, default=8, help="longest string")
    parser.add_argument("--test-size", type=positive_int, default=1000, help="held-out sources, never seen in training")
    parser.add_argument("--beam", type=non_negative_int, default=4, help="beam size for the beam-search evaluation (0: skip)")
    parser.add_argument("--examples", type=non_negative_int, default=5, help="decoded test examples to print")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the weights, the task and the batches")
    resumable.add_arguments(parser)


def count_sources(symbols, min_len, max_len, enough):
    """The number of distinct strings of min_len..max_len symbols, or `enough` once it reaches that.

    Stops early so that a huge alphabet or length never builds a huge integer.
    """
    total = 0
    for length in range(min_len, max_len + 1):
        total += symbols ** length if length * symbols.bit_length() < 64 else enough
        if total >= enough:
            return enough
    return total


def check_options(args):
    """Raise UsageError for options that cannot make a run, before the model is built."""
    if args.d_model % args.heads:
        raise UsageError(f"--heads must divide --d-model, got --d-model {args.d_model} and --heads {args.heads}")
    if args.d_model % 2:
        raise UsageError(f"--d-model must be even (sinusoidal positions come in sin/cos pairs), got {args.d_model}")
    if args.min_len > args.max_len:
        raise UsageError(f"--min-len must be at most --max-len, got --min-len {args.min_len} and --max-len {args.max_len}")
    possible = count_sources(args.symbols, args.min_len, args.max_len, enough=2 * args.test_size)
    if possible < 2 * args.test_size:
        raise UsageError(f"--test-size {args.test_size} is more than half of the {possible} distinct strings of "
                         f"{args.min_len}-{args.max_len} symbols over {args.symbols}: training strings must remain "
                         f"(lower --test-size or raise --symbols or --max-len)")


def run(args):
    import numpy as np

    from ..generation.bleu import corpus_bleu
    from ..models.seq2seq import Seq2SeqTransformer
    from ..objectives.seq2seq import evaluate_loss, evaluate_seq2seq, seq2seq_loop
    from ..tasks.reverse import PAD, ReverseTask

    resumable.ranks()
    prepared = resumable.prepare(args, "seq2seq", add_arguments)
    check_options(args)
    for note in prepared.notes:
        print(note, file=sys.stderr)
    task = ReverseTask(args.symbols, args.min_len, args.max_len, n_test=args.test_size, rng=args.seed)
    share = not args.no_share
    model = Seq2SeqTransformer(task.vocab_size, task.vocab_size, args.d_model, args.heads, args.layers,
                               2 * args.d_model, args.max_len + 2, pad_id=PAD, norm=args.norm, share_embeddings=share,
                               tie_output=share, dtype=np.dtype(args.dtype), rng=args.seed + 1)
    print(f"{model!r}: {model.num_parameters():,} parameters; task: reverse {args.min_len}-{args.max_len} "
          f"symbols over {args.symbols}, {len(task.test_sources)} held-out sources")
    loop = seq2seq_loop(model, task, args.steps, args.batch_size, args.lr,
                        **resumable.loop_options(args, "seq2seq", args.steps))
    started = time.perf_counter()
    model.train()
    status, _ = resumable.fit(loop, "seq2seq", args.out, prepared.contents)
    if status is not None:
        return status
    print(f"trained {args.steps} steps in {time.perf_counter() - started:.0f} s")
    print("held-out teacher-forced loss {:.4f}, perplexity {:.3f} (per target symbol)".format(
        *evaluate_loss(model, task, task.test_sources)))

    started = time.perf_counter()
    accuracy, predictions = evaluate_seq2seq(model, task, task.test_sources)
    print(f"greedy (cached) exact match on held-out: {accuracy:.2%}  ({time.perf_counter() - started:.1f} s)")
    references = [[task.decode(task.target_of(s))] for s in task.test_sources]
    print(f"greedy BLEU-4 over symbols: {corpus_bleu([task.decode(p) for p in predictions], references):.4f}")
    if args.beam:
        started = time.perf_counter()
        beam_accuracy, _ = evaluate_seq2seq(model, task, task.test_sources, beam_size=args.beam)
        print(f"beam search (K={args.beam}) exact match on held-out: {beam_accuracy:.2%}  "
              f"({time.perf_counter() - started:.1f} s)")
    for source, prediction in list(zip(task.test_sources, predictions))[:args.examples]:
        print(f"  {task.decode(source):<16} -> {task.decode(prediction)}")
    return 0
