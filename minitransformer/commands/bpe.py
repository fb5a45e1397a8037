"""`python -m minitransformer bpe`: learn the lecture's BPE merges from a text file and print them.

The text is split on whitespace into a word-count table, as in the lecture
(notes section 1.5), and `learn_bpe` prints each merge with its count. With
`--save`, a byte-level `BPETokenizer` (the one the GPT uses) is also trained on
the same text with 256 + N ids and written as JSON; its merges are over bytes
and chunks, so they differ from the printed lecture merges.

Left out on purpose: encoding files from the command line.
"""

import sys
import time

from minitransformer.tokenizers.bpe import BPETokenizer, learn_bpe, word_counts_from_text
from minitransformer.tokenizers.bpe.learn import METHODS

HELP = "learn BPE merges from a text file (the lecture's algorithm), print them with their counts, save a tokenizer"


def add_arguments(parser):
    parser.add_argument("--text", required=True, metavar="FILE", help="UTF-8 text file, split on whitespace into words")
    parser.add_argument("--merges", type=int, required=True, metavar="N", help="number of merges to learn")
    parser.add_argument("--method", choices=METHODS, default="fast", help="fast trainer or the lecture's loop")
    parser.add_argument("--min-count", type=int, default=2, help="stop when the best pair occurs fewer times")
    parser.add_argument("--save", metavar="PATH", help="also train a byte-level BPETokenizer, 256 + N ids, save it")


def run(args):
    try:
        with open(args.text, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as error:
        print(f"bpe: cannot read --text {args.text}: {error}", file=sys.stderr)
        return 2
    word_counts = word_counts_from_text(text)
    if not word_counts:
        print(f"bpe: --text {args.text} has no words", file=sys.stderr)
        return 2
    start = time.perf_counter()
    merges = learn_bpe(word_counts, args.merges, method=args.method, min_count=args.min_count, with_counts=True)
    seconds = time.perf_counter() - start
    print(f"{len(merges)} merges from {len(word_counts)} distinct words ({args.method} trainer, {seconds:.2f} s)")
    print(f"{'rank':>6} {'count':>8}  pair")
    for rank, ((left, right), count) in enumerate(merges):
        print(f"{rank:>6} {count:>8}  {left} {right}")
    if args.save:
        try:
            tokenizer = BPETokenizer.train(text, vocab_size=256 + args.merges, min_count=args.min_count)
        except ValueError as error:
            print(f"bpe: tokenizer not saved: {error}", file=sys.stderr)
            return 1
        tokenizer.save(args.save)
        print(f"saved byte-level tokenizer to {args.save}: vocab_size {tokenizer.vocab_size} (256 bytes + merges)")
    return 0
