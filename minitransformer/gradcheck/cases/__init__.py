"""The gradient-check catalogue: every layer and model with inputs to check it on.

* `layers.py`: the lecture's layers and the GPT;
* `variants.py`: the attention and position variants;
* `encdec.py`: the encoder family, BERT, the encoder-decoder, fine-tuning;
* `rlhf.py`: InstructGPT's reward model, ranking loss and PPO;
* `finetune.py`: GPT fine-tuning on transformed inputs (entailment, similarity, multiple choice).

Each file holds a list `CASES` of `GradcheckCase(name, label, build)` (`case.py`, with the helpers every
catalogue builds its cases with); `all_cases()` joins them in that order.
"""

from . import encdec, finetune, layers, rlhf, variants
from .case import GradcheckCase


def all_cases():
    """Every registered gradient-check case: the core layers, then the variants, then the encoder family."""
    return list(layers.CASES) + list(variants.CASES) + list(encdec.CASES) + list(rlhf.CASES) + list(finetune.CASES)


__all__ = ["GradcheckCase", "all_cases"]
