"""`python -m minitransformer mlm`: a short BERT-style masked-LM run on characters; the loss falls, masks get filled.

The default corpus is the English help text inside CPython (`pydoc_data.topics`,
see data/README.md); `--text FILE` trains on a file instead. Tokens are
characters; ids 0-3 are [PAD], [MASK], [CLS], [SEP]. Each example is
[CLS] chunk_a [SEP] chunk_b [SEP]; with `--nsp`, chunk_b follows chunk_a in the
text half of the time and is a random chunk otherwise, and a second head
predicts which (the Kumar slides' second objective).

The options and the text are checked before the model is built: a missing,
binary or too short --text, a size that is not positive, or a --d-model that 4
heads do not divide is one `error: ...` line with exit status 2. `--steps 0`
evaluates the untrained model.

It trains with the one training loop: --out keeps checkpoints, Ctrl-C saves and `--resume --out DIR` continues
bit for bit, a NaN stops the run (commands/resumable.py).
"""

import sys
import time

from . import resumable
from .errors import UsageError, non_negative_float, non_negative_int, positive_int, read_text_file

RESUMES = True          # __main__ records which options were given (args.given), for --resume (training/resuming.py)

N_HEADS = 4

HELP = "train a small BERT-style masked language model on characters; print the loss and filled-in masks"

def add_arguments(parser):
    parser.add_argument("--text", default=None, metavar="FILE",
                        help="UTF-8 training text file (default: CPython's pydoc help text)")
    parser.add_argument("--steps", type=non_negative_int, default=1500, help="training steps (0: evaluate only)")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="examples per step")
    parser.add_argument("--chunk", type=positive_int, default=8, help="characters per half-example")
    parser.add_argument("--d-model", type=positive_int, default=64, help=f"model width, a multiple of {N_HEADS} (heads)")
    parser.add_argument("--layers", type=positive_int, default=2, help="encoder blocks")
    parser.add_argument("--lr", type=non_negative_float, default=1e-3, help="peak learning rate (after warm-up)")
    parser.add_argument("--norm", choices=("post", "pre"), default="post", help="post-norm (BERT) or pre-norm")
    parser.add_argument("--positional", choices=("learned", "sinusoidal"), default="learned",
                        help="position table")
    parser.add_argument("--nsp", action="store_true", help="also train the next-sentence head")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the weights, batches and masks")
    resumable.add_arguments(parser)


def run(args):
    import numpy as np

    from ..models.bert import BertMLM
    from ..objectives.masked_lm import PAD, CharCorpus, masked_lm_loop
    from ..training.data import default_corpus

    size = resumable.ranks()[1]
    prepared = resumable.prepare(args, "mlm", add_arguments)
    if args.nsp and size > 1:
        raise UsageError("--nsp under mpiexec: data parallelism is not offered with the next-sentence head (its two "
                         "terms are means over different counts); run it in one process")
    if args.d_model % N_HEADS:
        raise UsageError(f"--d-model must be a multiple of {N_HEADS} (the number of heads), got {args.d_model}")
    for note in prepared.notes:
        print(note, file=sys.stderr)
    rng = np.random.default_rng(args.seed)
    text = default_corpus() if args.text is None else read_text_file(args.text)
    if not text:
        raise UsageError(f"--text {args.text} is empty")
    corpus = CharCorpus(text, args.chunk, rng)
    try:
        corpus.check_length("the default corpus" if args.text is None else f"--text {args.text}")
    except ValueError as error:
        raise UsageError(str(error)) from None
    model = BertMLM(corpus.vocab_size, args.d_model, N_HEADS, args.layers, 4 * args.d_model, 2 * args.chunk + 3,
                    pad_id=PAD, nsp=args.nsp, norm=args.norm, positional=args.positional, dtype=np.dtype(args.dtype),
                    rng=args.seed + 1)
    print(f"{model!r}: {model.num_parameters():,} parameters, {corpus.vocab_size} tokens, "
          f"{len(corpus.parts['train']):,} training characters")
    loop = masked_lm_loop(model, corpus, rng, args.steps, args.batch_size, args.lr, args.nsp,
                          **resumable.loop_options(args, "mlm", args.steps))
    started = time.perf_counter()
    status, _ = resumable.fit(loop, "mlm", args.out, prepared.contents)
    if status is not None:
        return status
    print(f"trained in {time.perf_counter() - started:.0f} s")

    _evaluate(model, corpus, rng, args.nsp)
    return 0


def _evaluate(model, corpus, rng, nsp):
    """Print the held-out masked-token loss, perplexity and accuracy (and NSP accuracy), and three filled examples."""
    import numpy as np

    from ..layers.loss import CrossEntropyLoss
    from ..models.bert import mask_tokens
    from ..objectives.masked_lm import MASK, SPECIALS
    from ..training.metrics import perplexity

    model.eval()
    ids, follows = corpus.batch(500, part="test")
    inputs, targets, chosen = mask_tokens(ids, rng, MASK, len(SPECIALS), corpus.vocab_size)
    out = model(inputs)
    token_logits = out[0] if nsp else out
    predicted = token_logits.argmax(axis=-1)
    held_out_loss = float(CrossEntropyLoss(ignore_index=-1)(token_logits, targets))
    print(f"held-out masked-token loss {held_out_loss:.3f}, perplexity {perplexity(held_out_loss):.2f} "
          f"(uniform over the {corpus.vocab_size} tokens: {corpus.vocab_size})")
    most_common = np.bincount(corpus.parts["train"]).argmax()
    print(f"held-out masked-token accuracy: {np.mean(predicted[chosen] == ids[chosen]):.1%} "
          f"(always guessing {corpus.show([most_common])!r}: {np.mean(ids[chosen] == most_common):.1%})")
    if nsp:
        print(f"held-out next-sentence accuracy: {np.mean(out[1].argmax(axis=-1) == follows):.1%} (chance 50%)")
    masked = ids.copy()
    masked[chosen] = MASK
    logits = model(masked)
    filled = np.where(chosen, (logits[0] if nsp else logits).argmax(axis=-1), ids)
    for row in range(3):
        print(f"  original {corpus.show(ids[row])}\n  masked   {corpus.show(masked[row])}\n"
              f"  filled   {corpus.show(filled[row])}")
