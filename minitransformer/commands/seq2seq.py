"""`python -m minitransformer seq2seq`: train an encoder-decoder to reverse strings, report held-out exact match.

On a shared machine, run with OMP_NUM_THREADS=1: the matrices are small and
BLAS threads competing for busy cores make each step several times slower.
"""

import time

HELP = "train an encoder-decoder Transformer on string reversal; print held-out exact match, BLEU and examples"


def add_arguments(parser):
    parser.add_argument("--steps", type=int, default=1000, help="training steps (batches)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (after warm-up)")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2, help="encoder blocks, and as many decoder blocks")
    parser.add_argument("--norm", choices=("post", "pre"), default="post", help="post-norm (the paper) or pre-norm")
    parser.add_argument("--no-share", action="store_true", help="separate source/target/output tables")
    parser.add_argument("--symbols", type=int, default=10, help="alphabet size")
    parser.add_argument("--min-len", type=int, default=3)
    parser.add_argument("--max-len", type=int, default=8)
    parser.add_argument("--test-size", type=int, default=1000, help="held-out sources, never seen in training")
    parser.add_argument("--beam", type=int, default=4, help="beam size for the beam-search evaluation (0: skip)")
    parser.add_argument("--examples", type=int, default=5, help="decoded test examples to print")
    parser.add_argument("--seed", type=int, default=0)


def run(args):
    import numpy as np

    from ..generation.bleu import corpus_bleu
    from ..models.seq2seq import Seq2SeqTransformer
    from ..training.encdec import evaluate_seq2seq, train_seq2seq
    from ..training.tasks import PAD, ReverseTask

    task = ReverseTask(args.symbols, args.min_len, args.max_len, n_test=args.test_size, rng=args.seed)
    share = not args.no_share
    model = Seq2SeqTransformer(task.vocab_size, task.vocab_size, args.d_model, args.heads, args.layers,
                               2 * args.d_model, args.max_len + 2, pad_id=PAD, norm=args.norm, share_embeddings=share,
                               tie_output=share, dtype=np.float32, rng=args.seed + 1)
    print(f"{model!r}: {model.num_parameters():,} parameters; task: reverse {args.min_len}-{args.max_len} "
          f"symbols over {args.symbols}, {len(task.test_sources)} held-out sources")
    started = time.perf_counter()
    train_seq2seq(model, task, args.steps, args.batch_size, args.lr, log_every=max(args.steps // 10, 1))
    print(f"trained {args.steps} steps in {time.perf_counter() - started:.0f} s")

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
