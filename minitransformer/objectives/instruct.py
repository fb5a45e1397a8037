"""InstructGPT in miniature: supervised fine-tuning, a reward model from ranked pairs, then PPO (Ouyang et al.
2022, Fig. 2; survey note §7, Fig. 5), on a task small enough to train in seconds.

The task (`EvenDigitsTask`, tasks/even_digits.py). A prompt is `<s> d d :`, two digits after a start token and before a colon.
The demonstrators answer with four digits that count on from the prompt's last digit (`<s> 3 4 : 5 6 7 8`), but
carelessly: each digit is right with probability `p_follow`, else a random digit. The labelers, shown two
answers to one prompt, prefer the one with more even digits (a rule the reward model must discover from the
comparisons alone). So the three steps do three different things:

1. `supervised_fine_tune`: the GPT learns the demonstrators' habits (the existing LM loss, on the answer only);
2. `train_reward_model`: a `RewardModel` learns to score answers from pairs ranked by the labelers
   (`RankingObjective`, objectives/ranking.py: the pairwise loss -log sigma(r_chosen - r_rejected));
3. `train_ppo`: the policy is tuned to the reward model with PPO (`objectives/ppo.py`), its KL to the SFT model
   held down by the per-token penalty: more even digits, at the price of counting less well.

Token layout: digits 0-9 are ids 0-9, `<s>` is 10, `:` is 11 (V = 12). Left out: the prompt distribution of a
real assistant, labelers ranking K > 2 answers, and human data of any kind.
"""


from ..layers.loss import CrossEntropyLoss
from ..training.loop import LoopOptions, TrainingLoop
from ..training.optim import Adam
from .language_model import LanguageModelObjective


def supervised_fine_tune(model, task, steps, batch_size=64, lr=3e-3):
    """Step 1: next-token cross-entropy on demonstrations, scored on the answer tokens only, on the one
    training loop. Returns the losses."""

    def demonstrations():
        ids = task.demonstrate(task.prompts(batch_size))                           # (B, T)
        targets = ids[:, 1:].copy()
        targets[:, :task.prompt_len - 1] = -1                                      # the prompt is given, not learnt
        return ids[:, :-1], targets

    objective = LanguageModelObjective(model, CrossEntropyLoss(ignore_index=-1))
    loop = TrainingLoop(objective, Adam(objective.parameters(), lr=lr), demonstrations, lambda step: lr,
                        LoopOptions(grad_clip=1.0, max_steps=steps, generators={"task": task.rng}, progress=False,
                                    log=False, name="supervised_fine_tune"))
    loop.fit()
    return loop.history["loss"]
