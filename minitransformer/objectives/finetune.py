"""Fine-tuning a pre-trained GPT for classification: L3 = L2 + lambda L1 (Radford et al. 2018, §3.2; Strabel,
"Transformers", 2023, §4), the `finetune` command's run.

The model (`GPTClassifier`) and its objective (`FineTuningObjective`) are the model family's own
(models/gpt_classifier.py), re-exported here so that every objective is found in objectives/; GPT's input
transformations for structured tasks are in finetune_inputs.py.
"""

from ..models.gpt_classifier import FineTuningObjective, GPTClassifier  # noqa: F401 (see above)
from ..training.config import transformer_adam
from ..training.schedules import linear_rate
from ..training.step import train_step


def train_classifier_steps(objective, batches, steps, lr, log_every, what):
    """`steps` shared training steps (training/step.py) of `objective` on `batches()`, printing the mean loss."""
    optimizer = transformer_adam(objective.parameters(), lr=lr)
    window = []
    for step in range(steps):
        rate = linear_rate(step, lr, 50, steps)
        window.append(train_step(objective, optimizer, batches(), rate, grad_clip=1.0))
        if (step + 1) % log_every == 0:
            print(f"{what} step {step + 1:5d}  loss {sum(window) / len(window):.4f}")
            window = []
