"""Benchmark: BPE training speed, the lecture's loop against the fast trainer, with outside anchors.

On a text file (default: ../shared/data/tinyshakespeare.txt next to the
repository), split on whitespace into a word-count table:

* the reference loop (`method="reference"`), run ONCE up to the largest merge
  count, timed at each checkpoint (the first 500 of 2,000 merges are the 500
  merges), and the fast trainer, median of `--repeats` runs; the merges and
  their counts must be identical or the script fails;
* Hugging Face `tokenizers` (BpeTrainer, WhitespaceSplit pre-tokenizer, `</w>`
  suffix) and `sentencepiece` (BPE), when installed, timed from the raw text,
  with the fast trainer's time from the raw text (counting words included);
* `BPETokenizer` (byte-level, for the GPT): training, and encoding and decoding
  the whole text.

Usage:
    python benchmarks/bench_bpe.py [--text PATH] [--merges 500 2000] [--repeats 5]
        [--reference-merges N]   # time the reference on N merges and extrapolate (default: run it fully)
"""

import argparse
import io
import json
import pathlib
import statistics
import sys
import time

from minitransformer.tokenizers.bpe import (
    BPETokenizer,
    iter_merges_reference,
    learn_bpe,
    lecture_vocab,
    word_counts_from_text,
)

DEFAULT_TEXT = pathlib.Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "tinyshakespeare.txt"


def median_seconds(function, repeats):
    """Median wall-clock time of `repeats` calls, and the last result."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def time_reference(word_counts, checkpoints):
    """Run the lecture's loop once; return ({checkpoint: seconds to reach it}, merges with counts)."""
    start = time.perf_counter()
    seconds, merges = {}, []
    for step in iter_merges_reference(lecture_vocab(word_counts)):
        if step[1] < 2:
            break
        merges.append(step)
        if len(merges) in checkpoints:
            seconds[len(merges)] = time.perf_counter() - start
        if len(merges) == max(checkpoints):
            break
    return seconds, merges


def hugging_face_seconds(text, word_counts, num_merges, repeats):
    """Median seconds for `tokenizers` to learn about `num_merges` merges, and the number it learned; None if absent."""
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    except ImportError:
        return None
    # Initial symbols as HF makes them with a suffix: every character, and every word-final character + "</w>".
    alphabet = set("".join(word_counts)) | {word[-1] + "</w>" for word in word_counts}

    def train():
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        trainer = trainers.BpeTrainer(
            vocab_size=len(alphabet) + num_merges, min_frequency=2, show_progress=False, end_of_word_suffix="</w>"
        )
        tokenizer.train_from_iterator([text], trainer)
        return tokenizer

    seconds, tokenizer = median_seconds(train, repeats)
    return seconds, len(json.loads(tokenizer.to_str())["model"]["merges"])  # (seconds, merges learned)


def sentencepiece_seconds(text, word_counts, num_merges, repeats):
    """Median seconds for `sentencepiece` BPE with about `num_merges` pieces beyond the characters; None if absent."""
    try:
        import sentencepiece
    except ImportError:
        return None
    characters = len(set("".join(word_counts)))
    lines = [line for line in text.splitlines() if line.strip()]

    def train():
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=io.BytesIO(), model_type="bpe",
            vocab_size=characters + num_merges + 4, minloglevel=2,
        )

    return median_seconds(train, repeats)[0], None  # (seconds, not compared)


def anchor_columns(anchor, ours_seconds):
    """'seconds  ratio' columns for an outside library, or dashes when it is not installed."""
    if anchor is None:
        return f"{'-':>7} {'-':>8}"
    return f"{anchor[0]:>7.3f} {ours_seconds / anchor[0]:>7.2f}x"


def print_training_table(text, word_counts, merge_counts, reference_times, reference_merges, repeats):
    """One row per merge count: reference, fast, their ratio, identical output, the anchors."""
    reference_rate = len(reference_merges) / max(reference_times.values())
    print(f"{'merges':>6} {'reference s':>12} {'fast s':>8} {'speed-up':>9} {'identical':>9}"
          f" {'fast+count s':>12} {'HF s':>7} {'fast/HF':>8} {'spm s':>7} {'fast/spm':>8}")
    for num_merges in merge_counts:
        learn_from_table = lambda: learn_bpe(word_counts, num_merges, with_counts=True)  # noqa: E731
        fast_seconds, fast_merges = median_seconds(learn_from_table, repeats)
        from_text_seconds, _ = median_seconds(lambda: learn_bpe(word_counts_from_text(text), num_merges), repeats)
        if num_merges in reference_times:
            reference_seconds, note = reference_times[num_merges], " "
        else:
            reference_seconds, note = num_merges / reference_rate, "*"
        compared = min(num_merges, len(reference_merges))
        identical = fast_merges[:compared] == reference_merges[:compared]
        if not identical:
            sys.exit(f"bench_bpe: fast and reference merges differ within the first {compared} merges")
        hugging_face = hugging_face_seconds(text, word_counts, num_merges, repeats)
        spm = sentencepiece_seconds(text, word_counts, num_merges, repeats)
        print(f"{num_merges:>6} {reference_seconds:>11.2f}{note} {fast_seconds:>8.3f}"
              f" {reference_seconds / fast_seconds:>8.0f}x {str(identical):>9} {from_text_seconds:>12.3f}"
              f" {anchor_columns(hugging_face, from_text_seconds)} {anchor_columns(spm, from_text_seconds)}")
        if hugging_face and hugging_face[1] != num_merges:
            print(f"{'':>6} (Hugging Face learned {hugging_face[1]} merges)")


def print_tokenizer_timings(text, merge_counts, repeats):
    """Train the byte-level tokenizer, then encode and decode the whole text with a fresh chunk cache."""
    for num_merges in merge_counts:
        train_seconds, tokenizer = median_seconds(lambda: BPETokenizer.train(text, vocab_size=256 + num_merges), 1)
        encode_seconds, ids = median_seconds(lambda: BPETokenizer(tokenizer.merges).encode(text), repeats)
        decode_seconds, decoded = median_seconds(lambda: tokenizer.decode(ids), repeats)
        print(f"  vocab_size {tokenizer.vocab_size}: train {train_seconds:.2f} s,"
              f" encode whole text {encode_seconds:.2f} s ({len(ids)} tokens,"
              f" {len(text.encode()) / len(ids):.2f} bytes/token), decode {decode_seconds:.2f} s,"
              f" round trip {'exact' if decoded == text else 'BROKEN'}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", type=pathlib.Path, default=DEFAULT_TEXT)
    parser.add_argument("--merges", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reference-merges", type=int, help="time the reference on this many merges only")
    args = parser.parse_args(argv)
    if not args.text.exists():
        sys.exit(f"bench_bpe: no text at {args.text}; pass --text PATH")
    text = args.text.read_text(encoding="utf-8")
    word_counts = word_counts_from_text(text)
    print(f"text: {args.text.resolve()} ({len(text.encode()) / 1e6:.2f} MB, {len(word_counts)} distinct words)")

    checkpoints = set(args.merges) if args.reference_merges is None else {args.reference_merges}
    reference_times, reference_merges = time_reference(word_counts, checkpoints)
    print(f"reference loop: run once to {len(reference_merges)} merges,"
          f" {len(reference_merges) / max(reference_times.values()):.1f} merges/s\n")
    print_training_table(text, word_counts, args.merges, reference_times, reference_merges, args.repeats)
    if args.reference_merges is not None:
        print(f"* estimated from the reference's rate over its first {args.reference_merges} merges")
    print("\nbyte-level BPETokenizer (for the GPT):")
    print_tokenizer_timings(text, args.merges, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
