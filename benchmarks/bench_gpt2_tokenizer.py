"""Benchmark: GPT2Tokenizer's encoding speed against tiktoken's GPT-2 encoding (goal: within 50x).

The text is CPython's help text (`pydoc_data.topics`, every topic joined: about 0.47 MB of prose, code
and tables, shipped with Python). Both tokenizers are built offline from GPT-2's two files
(`../shared/data/gpt2/` next to the repository, or `--gpt2 DIR`), their ids must be identical or the
script fails, and each encoding is timed `--repeats` times; the report gives the medians and their
ratio. GPT2Tokenizer is timed twice: with an empty cache (cleared before each repetition: the first
text it sees) and warm (the same tokenizer again: every pre-token is cached).

Usage:
    python benchmarks/bench_gpt2_tokenizer.py [--gpt2 DIR] [--repeats 5]
"""

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))         # bench_decoding's median_seconds

from bench_decoding import median_seconds  # noqa: E402

from minitransformer.tokenizers.gpt2 import END_OF_TEXT, GPT2Tokenizer, bytes_to_unicode

DEFAULT_GPT2 = pathlib.Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "gpt2"
TIKTOKEN_GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def help_text():
    """CPython's help topics, joined in key order."""
    from pydoc_data.topics import topics
    return "\n\n".join(topics[key] for key in sorted(topics))


def tiktoken_encoding(tokenizer):
    import tiktoken

    char_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    ranks = {bytes(char_byte[c] for c in token): i for token, i in tokenizer.vocab.items() if token != END_OF_TEXT}
    return tiktoken.Encoding("gpt2-offline", pat_str=TIKTOKEN_GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={END_OF_TEXT: tokenizer.vocab[END_OF_TEXT]})




def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpt2", default=str(DEFAULT_GPT2), help="folder with vocab.json and merges.txt")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    folder = pathlib.Path(args.gpt2)
    tokenizer = GPT2Tokenizer.from_files(folder / "vocab.json", folder / "merges.txt")
    reference = tiktoken_encoding(tokenizer)
    text = help_text()
    ids = tokenizer.encode_ordinary(text)
    if ids != reference.encode_ordinary(text):
        print("error: GPT2Tokenizer and tiktoken disagree on the help text", file=sys.stderr)
        return 1

    def encode_cold():
        tokenizer.cache.clear()
        tokenizer.encode_ordinary(text)
    ours_cold = median_seconds(encode_cold, args.repeats)
    ours_warm = median_seconds(lambda: tokenizer.encode_ordinary(text), args.repeats)
    theirs = median_seconds(lambda: reference.encode_ordinary(text), args.repeats)
    print(f"text: pydoc_data.topics, {len(text.encode()):,} bytes, {len(ids):,} tokens (identical ids)")
    print(f"tiktoken                  {theirs * 1e3:8.1f} ms  ({len(text.encode()) / theirs / 1e6:.2f} MB/s)")
    print(f"GPT2Tokenizer, cold cache {ours_cold * 1e3:8.1f} ms  ratio {ours_cold / theirs:5.1f}x")
    print(f"GPT2Tokenizer, warm cache {ours_warm * 1e3:8.1f} ms  ratio {ours_warm / theirs:5.1f}x")
    print(f"(medians of {args.repeats} repetitions; goal: within 50x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
