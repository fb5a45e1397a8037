"""Where the tests find GPT-2's tokenizer files, and tiktoken's GPT-2 encoding built offline from them.

The files are read by path, never committed: `<repo>/../shared/data/gpt2/` (vocab.json, merges.txt), or
the folder named by the environment variable MINITRANSFORMER_SHARED_DATA (a data folder holding gpt2/),
for a checkout that does not sit next to shared/. A test that needs them skips, naming what is missing.
"""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("MINITRANSFORMER_SHARED_DATA", REPO.parent / "shared" / "data"))
GPT2_DIR = SHARED_DATA / "gpt2"
VOCAB, MERGES = GPT2_DIR / "vocab.json", GPT2_DIR / "merges.txt"
MISSING = [str(path) for path in (VOCAB, MERGES) if not path.is_file()]
requires_gpt2_files = pytest.mark.skipif(bool(MISSING), reason=f"GPT-2's tokenizer files are missing: {MISSING} "
                                         "(or set MINITRANSFORMER_SHARED_DATA to the folder holding gpt2/)")

try:
    import tiktoken
except ImportError:
    tiktoken = None
requires_tiktoken = pytest.mark.skipif(tiktoken is None, reason='tiktoken is missing: pip install -e ".[gpt2]"')
# tiktoken's own pattern for GPT-2 (tiktoken_ext/openai_public.py), not ours: an independent reference
TIKTOKEN_GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def tiktoken_gpt2(vocab):
    """tiktoken's GPT-2 encoding, built offline: each token's bytes ranked by its id (vocab: GPT2Tokenizer.vocab)."""
    from minitransformer.tokenizers.gpt2 import END_OF_TEXT, bytes_to_unicode

    char_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    ranks = {bytes(char_byte[c] for c in token): token_id for token, token_id in vocab.items() if token != END_OF_TEXT}
    return tiktoken.Encoding("gpt2-offline", pat_str=TIKTOKEN_GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={END_OF_TEXT: vocab[END_OF_TEXT]})
