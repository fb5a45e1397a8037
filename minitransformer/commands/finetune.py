"""`python -m minitransformer finetune`: pre-train a small GPT, fine-tune it as a classifier with L3 = L2 + lambda L1.

The task is generated (tasks.majority_task): strings of 12 symbols over
{a, b, c}, labelled 1 when "a" occurs more often than "b". Pre-training is
plain next-token prediction on unlabelled strings of the same kind (L1 only);
fine-tuning adds the classification head on the last position (survey note §4).

The options are checked before the model is built (one `error: ...` line, exit
status 2): sizes must be positive, step counts and lambda at least 0
(`--pretrain-steps 0` fine-tunes from random weights, `--steps 0` evaluates
without fine-tuning), and strings need 2 symbols or more for the LM loss.

Both phases train with the one training loop: --out keeps checkpoints (of the phase under way), Ctrl-C saves
and `--resume --out DIR` continues bit for bit, a NaN stops the run (commands/resumable.py).
"""

import sys
import time

from . import resumable
from .errors import UsageError, non_negative_float, non_negative_int, positive_int

RESUMES = True          # __main__ records which options were given (args.given), for --resume (training/resuming.py)

HELP = "pre-train a small GPT, fine-tune it for classification with L3 = L2 + lambda*L1, print held-out accuracy"


def add_arguments(parser):
    parser.add_argument("--pretrain-steps", type=non_negative_int, default=200,
                        help="next-token pre-training steps (0: fine-tune from random weights)")
    parser.add_argument("--steps", type=non_negative_int, default=400, help="fine-tuning steps (0: evaluate only)")
    parser.add_argument("--lm-weight", type=non_negative_float, default=0.5,
                        help="lambda, the weight of the auxiliary LM loss")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="strings per step")
    parser.add_argument("--lr", type=non_negative_float, default=1e-3, help="peak learning rate (after warm-up)")
    parser.add_argument("--length", type=positive_int, default=12, help="symbols per string, at least 2")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the weights and the strings")
    resumable.add_arguments(parser)


def run(args):
    import numpy as np

    from ..models.gpt import GPT
    from ..objectives.finetune import GPTClassifier, fine_tuning_loop, pretraining_loop
    from ..tasks.majority import majority_task

    resumable.ranks()
    prepared = resumable.prepare(args, "finetune", add_arguments)
    if args.length < 2:
        raise UsageError(f"--length must be at least 2: the language-model loss predicts each symbol from the ones "
                         f"before it, and a string of {args.length} has no next symbol to predict")
    for note in prepared.notes:
        print(note, file=sys.stderr)
    rng = np.random.default_rng(args.seed)
    gpt = GPT(vocab_size=6, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=args.length, dtype=np.dtype(args.dtype),
              rng=args.seed + 1)
    model = GPTClassifier(gpt, 2, dtype=np.dtype(args.dtype), rng=args.seed + 2)     # its own seed: drawn first or last alike
    started = time.perf_counter()
    phase = None if prepared.contents is None else prepared.contents[0]["run"].get("phase")

    def strings():
        return majority_task(args.batch_size, args.length, rng)

    for name, make, steps in (("pre-train", pretraining_loop, args.pretrain_steps),
                              ("fine-tune", fine_tuning_loop, args.steps)):
        if name == "pre-train" and (not steps or phase == "fine-tune"):
            continue                                  # no pre-training, or it was finished before the checkpoint
        options = resumable.loop_options(args, "finetune", steps, phase=name)
        extra = (args.lm_weight,) if name == "fine-tune" else ()
        loop = make(model, strings, steps, args.lr, *extra, generators={"data": rng},
                    log=lambda line, name=name: print(f"{name} {line}", flush=True),
                    **{**options, "overwrite": options["overwrite"] or name == "fine-tune"})
        status, _ = resumable.fit(loop, "finetune", args.out, prepared.contents)
        if status is not None:
            return status
    print(f"trained in {time.perf_counter() - started:.0f} s")
    _report(model, args)
    return 0


def _report(model, args):
    """Held-out accuracy on 2000 fresh strings (their own seed), L2 and L1 there, three examples."""
    import numpy as np

    from ..objectives.finetune import FineTuningObjective
    from ..tasks.majority import majority_task

    ids, labels = majority_task(2000, args.length, np.random.default_rng(10_000 + args.seed))
    objective = FineTuningObjective(model, args.lm_weight)
    objective.forward(ids, labels)
    _, class_logits = model.forward(ids)
    accuracy = np.mean(class_logits.argmax(axis=-1) == labels)
    print(f"held-out accuracy on 2000 fresh strings: {accuracy:.1%} (chance 50%); "
          f"L2 {float(objective.l2):.4f}, L1 {float(objective.l1):.4f}")
    for row in range(3):
        text = "".join("abc"[t - 3] for t in ids[row])
        print(f"  {text}  label {labels[row]}  predicted {class_logits[row].argmax()}")
