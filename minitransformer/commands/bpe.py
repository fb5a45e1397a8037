"""`python -m minitransformer bpe`: learn the lecture's BPE merges from a text file and print them.

The text is split on whitespace into a word-count table, as in the lecture
(notes section 1.5), and `learn_bpe` prints each merge with its count.

`--save PATH` writes a different thing, and says so: the byte-level
`BPETokenizer` that `train --tokenizer bpe` uses, trained on the same text with
256 + N ids. It learns its own N merges, over bytes and over chunks that keep
a word's trailing space (tokenizers/bpe/tokenizer.py), so they are not the
character merges printed above (which end words with `</w>`); the command
prints the first few of its merges to show the difference. An existing file is
not replaced unless `--force` is given.

Every user error (a missing or binary --text, a text without words, --merges 0,
a --save path that is a directory or already a file) is one `error: ...` line
with exit status 2, found before any merge is learned.

Left out on purpose: encoding files from the command line.
"""

import time

from .errors import UsageError, check_output_file, positive_int, read_text_file

HELP = "learn BPE merges from a text file (the lecture's algorithm), print them with their counts, save a tokenizer"
SHOWN_TOKENIZER_MERGES = 5


def add_arguments(parser):
    from ..tokenizers.bpe.learn import METHODS

    parser.add_argument("--text", required=True, metavar="FILE", help="UTF-8 text file, split on whitespace into words")
    parser.add_argument("--merges", type=positive_int, required=True, metavar="N", help="number of merges to learn")
    parser.add_argument("--method", choices=METHODS, default="fast", help="fast trainer or the lecture's loop")
    parser.add_argument("--min-count", type=positive_int, default=2, help="stop when the best pair occurs fewer times")
    parser.add_argument("--save", metavar="PATH",
                        help="also train the byte-level BPETokenizer that `train --tokenizer bpe` uses (256 + N ids) "
                             "and save it as JSON; it learns its own merges over bytes, not the ones printed "
                             "(default: save nothing)")
    parser.add_argument("--force", action="store_true", help="let --save replace an existing file")


def _readable(token):
    """A token's bytes as text for display: `'e '`, or `'\\xc3'` for part of a character."""
    return repr(token.decode("utf-8", "backslashreplace"))


def run(args):
    from ..tokenizers.bpe import BPETokenizer, learn_bpe, word_counts_from_text

    if args.save is not None:
        check_output_file(args.save, "--save", force=args.force)
    text = read_text_file(args.text)
    word_counts = word_counts_from_text(text)
    if not word_counts:
        raise UsageError(f"--text {args.text} has no words (it is empty or only whitespace)")
    start = time.perf_counter()
    merges = learn_bpe(word_counts, args.merges, method=args.method, min_count=args.min_count, with_counts=True)
    seconds = time.perf_counter() - start
    tokenizer = None
    if args.save is not None:                  # trained before anything is printed, so a failure is the only output
        try:
            tokenizer = BPETokenizer.train(text, vocab_size=256 + args.merges, min_count=args.min_count)
        except ValueError as error:
            raise UsageError(f"--save: the byte-level tokenizer cannot have {args.merges} merges: {error} "
                             "(lower --merges or --min-count)") from None
    stopped = "" if len(merges) == args.merges else f"; stopped early: no pair occurs {args.min_count}+ times"
    print(f"{len(merges)} merges from {len(word_counts)} distinct words ({args.method} trainer, {seconds:.2f} s"
          f"{stopped})")
    print(f"{'rank':>6} {'count':>8}  pair")
    for rank, ((left, right), count) in enumerate(merges):
        print(f"{rank:>6} {count:>8}  {left} {right}")
    if tokenizer is not None:
        tokenizer.save(args.save)
        first = ", ".join(f"{_readable(tokenizer.vocab[left])} + {_readable(tokenizer.vocab[right])}"
                          for left, right in tokenizer.merges[:SHOWN_TOKENIZER_MERGES])
        print(f"\nsaved to {args.save}: the byte-level BPETokenizer of `train --tokenizer bpe` (vocab_size "
              f"{tokenizer.vocab_size} = 256 bytes + {len(tokenizer.merges)} merges).\nIt learned its own merges, "
              f"over bytes, with a word's trailing space in place of </w>; they are not the merges printed above. "
              f"Its first {min(SHOWN_TOKENIZER_MERGES, len(tokenizer.merges))}: {first}")
    return 0
