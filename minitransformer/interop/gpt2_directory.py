"""A Hugging Face GPT-2 checkpoint folder -> the project's GPT and GPT-2's tokenizer, with NumPy alone.

What `GPT2LMHeadModel.save_pretrained` and `GPT2Tokenizer.save_pretrained` write, and what a user
downloads from the Hub for "gpt2": `config.json` (the sizes and options, read by `from_gpt2_state_dict`),
`model.safetensors` (the weights, read by `safetensors.py`), `vocab.json` and `merges.txt` (the
tokenizer, read by `tokenizers/gpt2.py`). `python -m minitransformer sample --gpt2 DIR` uses it.

Left out: the older `pytorch_model.bin` (a pickle: reading one runs code from the file), sharded
weights (`model.safetensors.index.json`), and every model type but "gpt2".
"""

import json
import os

import numpy as np

from ..tokenizers.gpt2 import GPT2Tokenizer
from .gpt2 import from_gpt2_state_dict
from .safetensors import load_safetensors

REQUIRED_FILES = ("config.json", "model.safetensors", "vocab.json", "merges.txt")


class GPT2DirectoryError(ValueError):
    """A folder that does not hold a usable Hugging Face GPT-2 checkpoint; the message names the folder and file."""


def read_config(directory):
    """The dict of `config.json`, checked to be a GPT-2's."""
    path = os.path.join(directory, "config.json")
    try:
        with open(path, encoding="utf-8") as file:
            config = json.load(file)
    except (ValueError, RecursionError) as error:
        raise GPT2DirectoryError(f"{path} is not a JSON file: {str(error)[:80]}") from None
    if not isinstance(config, dict) or config.get("model_type", "gpt2") != "gpt2":
        found = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise GPT2DirectoryError(f"{path}: expected a GPT-2 config (model_type 'gpt2'), got {found!r}")
    return config


def check_gpt2_directory(directory):
    """Raise GPT2DirectoryError unless `directory` is a folder holding every one of REQUIRED_FILES."""
    if not os.path.isdir(directory):
        raise GPT2DirectoryError(f"{directory} is not a directory")
    missing = [name for name in REQUIRED_FILES if not os.path.isfile(os.path.join(directory, name))]
    if missing:
        raise GPT2DirectoryError(f"{directory} lacks {', '.join(missing)}: a Hugging Face GPT-2 checkpoint holds "
                                 f"{', '.join(REQUIRED_FILES)}")


def load_gpt2_directory(directory, dtype=np.float32, tokenizer=None):
    """(GPT, GPT2Tokenizer) of a Hugging Face GPT-2 checkpoint folder.

    Args:
        directory: the folder holding REQUIRED_FILES.
        dtype: of the model's parameters (float32 default: GPT-2 small is 0.5 GB so; float64 for exact checks).
        tokenizer: the folder's tokenizer if the caller has read it already (else it is read here).
    Raises:
        GPT2DirectoryError (a ValueError) naming the folder or file and what is wrong, for a missing folder or
        file, a config of another model, weights that are not GPT-2's, a tokenizer that does not fit them;
        SafetensorsError and TokenizerConfigError (ValueErrors too) for a damaged weights or tokenizer file.
    """
    check_gpt2_directory(directory)
    config = read_config(directory)
    weights = load_safetensors(os.path.join(directory, "model.safetensors"))
    try:
        model = from_gpt2_state_dict(weights, config=config, dtype=dtype)
    except (KeyError, ValueError, TypeError) as error:
        message = error.args[0] if error.args else repr(error)
        raise GPT2DirectoryError(f"{directory}/model.safetensors with config.json: {message}") from None
    if tokenizer is None:
        tokenizer = GPT2Tokenizer.from_files(os.path.join(directory, "vocab.json"),
                                             os.path.join(directory, "merges.txt"))
    if tokenizer.vocab_size != model.vocab_size:
        raise GPT2DirectoryError(f"{directory}: the tokenizer has {tokenizer.vocab_size} tokens, the model "
                                 f"{model.vocab_size}; they must be equal")
    return model, tokenizer
