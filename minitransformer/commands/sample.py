"""`python -m minitransformer sample`: continue a prompt with a trained checkpoint.

Without --checkpoint it samples from the newest run under runs/ (commands/runs.py).
With --gpt2 DIR it samples from a Hugging Face GPT-2 checkpoint folder instead
(interop/gpt2_directory.py: config.json, model.safetensors, vocab.json, merges.txt).
The options and the checkpoint are checked before the model is built: a bad
value or a malformed checkpoint is one `error: ...` line, exit status 2.
"""

import os
import sys

from .errors import UsageError, non_negative_float, non_negative_int, positive_int

HELP = "generate text from a checkpoint written by `train` or from GPT-2's weights (greedy, temperature, top-k)"


def add_arguments(parser):
    parser.add_argument("--checkpoint", default=None,
                        help="directory written by `train` (default: the newest run, runs/latest)")
    parser.add_argument("--gpt2", default=None, metavar="DIR",
                        help="a Hugging Face GPT-2 checkpoint folder (config.json, model.safetensors, vocab.json, "
                             "merges.txt) instead of --checkpoint")
    parser.add_argument("--prompt", default="\n",
                        help="text to continue, cropped to the model's last max_len tokens (default: a newline); "
                             "with --gpt2, <|endoftext|> in it is GPT-2's document separator (id 50256), so "
                             "--prompt '<|endoftext|>' samples a new document from nothing")
    parser.add_argument("--max-new-tokens", type=non_negative_int, default=300, help="tokens to generate")
    parser.add_argument("--temperature", type=non_negative_float, default=0.8, help="0 for greedy decoding")
    parser.add_argument("--top-k", type=positive_int, default=None,
                        help="sample only among the k most likely tokens (default: all tokens)")
    parser.add_argument("--num-samples", type=positive_int, default=1, help="samples to print")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the sampling")


def run(args):
    import numpy as np

    from ..generation.sampling import generate
    from ..training.checkpoint import CheckpointError

    if args.gpt2 is not None and args.checkpoint is not None:
        raise UsageError("--gpt2 and --checkpoint each name the model to sample from: give one of them")
    try:
        tokenizer, build = gpt2_source(args.gpt2) if args.gpt2 is not None else trained_source(args.checkpoint)
        try:
            prompt = encode_prompt(tokenizer, args.prompt, gpt2=args.gpt2 is not None)
        except ValueError as error:
            raise UsageError(f"--prompt {args.prompt!r} cannot be encoded with the model's tokenizer: "
                             f"{error}") from None
        if not prompt:
            raise UsageError("--prompt is empty: sampling needs at least one token to continue")
        model = build()                             # only now: the options and files are fine
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(args.seed)
    for index in range(args.num_samples):
        ids = generate(model, np.array(prompt), args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                       rng=rng)
        text = tokenizer.decode(ids.tolist())
        print(text if args.num_samples == 1 else f"--- sample {index + 1} ---\n{text}")
    return 0


def encode_prompt(tokenizer, prompt, gpt2):
    """The prompt's ids. The prompt is the user's own text, not text from a third party, so GPT-2's special
    tokens in it are allowed explicitly: `<|endoftext|>` is the document separator, as in GPT-2's own
    unconditional samples (the guard against them, tiktoken's default, is for text a program passes on)."""
    return tokenizer.encode(prompt, allowed_special="all") if gpt2 else tokenizer.encode(prompt)


def gpt2_source(directory):
    """(tokenizer, build) of a Hugging Face GPT-2 folder: build() reads the weights into a GPT.
    Any fault in the folder is a UsageError naming --gpt2."""
    from ..interop.gpt2_directory import check_gpt2_directory, load_gpt2_directory
    from ..tokenizers.gpt2 import GPT2Tokenizer

    def build():
        try:
            return load_gpt2_directory(directory, tokenizer=tokenizer)[0]
        except (OSError, ValueError) as error:      # the folder's own errors, SafetensorsError
            raise UsageError(f"--gpt2 {directory}: {error}") from None
        except MemoryError:
            raise UsageError(f"--gpt2 {directory}: the weights do not fit in this machine's memory") from None

    try:
        check_gpt2_directory(directory)
        tokenizer = GPT2Tokenizer.from_files(os.path.join(directory, "vocab.json"),
                                             os.path.join(directory, "merges.txt"))
    except (OSError, ValueError) as error:          # a missing folder or file, TokenizerConfigError
        raise UsageError(f"--gpt2 {directory}: {error}") from None
    return tokenizer, build


def trained_source(directory):
    """(tokenizer, build) of a checkpoint written by `train` (default: the newest run): build() makes the
    model and loads the weights. CheckpointError for a malformed checkpoint."""
    from ..training.checkpoint import (
        CheckpointError,
        checkpoint_tokenizer,
        checkpoint_train_config,
        load_checkpoint,
        read_checkpoint,
    )
    from ..training.config import build_model
    from .runs import RUNS_DIRECTORY, latest_run

    directory = directory if directory is not None else latest_run()
    if directory is None:
        raise UsageError(f"no --checkpoint given and no run under {RUNS_DIRECTORY}/: train one first "
                         "(python -m minitransformer train) or pass --checkpoint DIR")
    meta, arrays = read_checkpoint(directory)                  # read and checked once
    config = checkpoint_train_config(meta, directory)

    def build():
        try:
            model = build_model(config, meta["model_config"]["vocab_size"])
        except (ValueError, TypeError) as error:
            raise CheckpointError(f"checkpoint {directory}: its train_config does not build a model: "
                                  f"{error}") from None
        except MemoryError:                         # e.g. a hand-edited d_model of 10**9
            raise CheckpointError(f"checkpoint {directory}: its train_config asks for a model too large for this "
                                  "machine's memory (was checkpoint.json edited?)") from None
        load_checkpoint(directory, model, contents=(meta, arrays))
        return model

    return checkpoint_tokenizer(meta, directory), build
