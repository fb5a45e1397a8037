"""`python -m minitransformer sample`: continue a prompt with a trained checkpoint.

Without --checkpoint it samples from the newest run under runs/ (commands/runs.py).
The options and the checkpoint are checked before the model is built: a bad
value or a malformed checkpoint is one `error: ...` line, exit status 2.
"""

import sys

from .errors import UsageError, non_negative_float, non_negative_int, positive_int

HELP = "generate text from a checkpoint written by `train` (greedy, temperature, top-k)"


def add_arguments(parser):
    parser.add_argument("--checkpoint", default=None,
                        help="directory written by `train` (default: the newest run, runs/latest)")
    parser.add_argument("--prompt", default="\n",
                        help="text to continue, cropped to the model's last max_len tokens (default: a newline)")
    parser.add_argument("--max-new-tokens", type=non_negative_int, default=300, help="tokens to generate")
    parser.add_argument("--temperature", type=non_negative_float, default=0.8, help="0 for greedy decoding")
    parser.add_argument("--top-k", type=positive_int, default=None,
                        help="sample only among the k most likely tokens (default: all tokens)")
    parser.add_argument("--num-samples", type=positive_int, default=1, help="samples to print")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the sampling")


def run(args):
    import numpy as np

    from ..generation.sampling import sample_text
    from ..training.checkpoint import (
        CheckpointError,
        check_training_meta,
        checkpoint_tokenizer,
        load_checkpoint,
        read_checkpoint,
    )
    from ..training.config import build_model
    from .runs import RUNS_DIRECTORY, latest_run

    directory = args.checkpoint if args.checkpoint is not None else latest_run()
    if directory is None:
        raise UsageError(f"no --checkpoint given and no run under {RUNS_DIRECTORY}/: train one first "
                         "(python -m minitransformer train) or pass --checkpoint DIR")
    try:
        meta, arrays = read_checkpoint(directory)
        config = check_training_meta(meta, directory)
        tokenizer = checkpoint_tokenizer(meta, directory)
        try:
            prompt = tokenizer.encode(args.prompt)
        except ValueError as error:
            raise UsageError(f"--prompt {args.prompt!r} cannot be encoded with the checkpoint's tokenizer: "
                             f"{error}") from None
        if not prompt:
            raise UsageError("--prompt is empty: sampling needs at least one token to continue")
        try:
            model = build_model(config, meta["model_config"]["vocab_size"])
        except (ValueError, TypeError) as error:
            raise CheckpointError(f"checkpoint {directory}: its train_config does not build a model: {error}") from None
        except MemoryError:                         # e.g. a hand-edited d_model of 10**9
            raise CheckpointError(f"checkpoint {directory}: its train_config asks for a model too large for this "
                                  "machine's memory (was checkpoint.json edited?)") from None
        load_checkpoint(directory, model, contents=(meta, arrays))
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(args.seed)
    for index in range(args.num_samples):
        text = sample_text(model, tokenizer, args.prompt, args.max_new_tokens, temperature=args.temperature,
                           top_k=args.top_k, rng=rng)
        print(text if args.num_samples == 1 else f"--- sample {index + 1} ---\n{text}")
    return 0
