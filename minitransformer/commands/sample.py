"""`python -m minitransformer sample`: continue a prompt with a trained checkpoint."""

import sys

HELP = "generate text from a checkpoint written by `train` (greedy, temperature, top-k)"


def add_arguments(parser):
    parser.add_argument("--checkpoint", required=True, help="directory written by `train --out`")
    parser.add_argument("--prompt", default="\n", help="text to continue (cropped to the model's last max_len tokens)")
    parser.add_argument("--max-new-tokens", type=int, default=300)
    parser.add_argument("--temperature", type=float, default=0.8, help="0 for greedy decoding")
    parser.add_argument("--top-k", type=int, default=None, help="sample only among the k most likely tokens")
    parser.add_argument("--num-samples", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)


def run(args):
    import numpy as np

    from ..generation.sampling import sample_text
    from ..tokenizers import tokenizer_from_config
    from ..training.checkpoint import CheckpointError, load_checkpoint, read_checkpoint
    from ..training.config import TrainConfig, build_model

    try:
        meta, _ = read_checkpoint(args.checkpoint)
        tokenizer = tokenizer_from_config(meta["tokenizer"])
        model = build_model(TrainConfig(**meta["train_config"]), meta["model_config"]["vocab_size"])
        load_checkpoint(args.checkpoint, model)
        rng = np.random.default_rng(args.seed)
        for index in range(args.num_samples):
            text = sample_text(model, tokenizer, args.prompt, args.max_new_tokens, temperature=args.temperature,
                               top_k=args.top_k, rng=rng)
            print(text if args.num_samples == 1 else f"--- sample {index + 1} ---\n{text}")
    except (CheckpointError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
