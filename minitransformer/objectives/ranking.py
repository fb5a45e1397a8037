"""Ranking: the reward model's objective, learnt from pairs a labeler ranked (InstructGPT's second step; Ouyang
et al. 2022, §3.5; survey note §7, Fig. 5): loss = -log sigma(r_chosen - r_rejected) (`PairwiseRankingLoss`).

Left out: labelers ranking K > 2 answers (InstructGPT's K choose 2 pairs of one prompt in one batch).
"""

import numpy as np

from ..core.module import Module
from ..layers.ranking_loss import PairwiseRankingLoss
from ..training.loop import LoopOptions, TrainingLoop
from ..training.optim import Adam


class RankingObjective(Module):
    """The reward model's loss on a batch of ranked pairs, for `train_step`.

    Chosen and rejected sequences go through the reward model as one batch (2B, T), so that one forward's
    caches serve the one backward.
    """

    def __init__(self, reward_model):
        self.reward_model, self.loss = reward_model, PairwiseRankingLoss()

    def forward(self, chosen, rejected):
        """chosen, rejected int (B, T) -> scalar loss; the rewards are kept in `r_chosen`, `r_rejected`."""
        rewards = self.reward_model(np.concatenate([chosen, rejected]))          # (2B,)
        self.r_chosen, self.r_rejected = rewards[:len(chosen)], rewards[len(chosen):]
        return self.loss(self.r_chosen, self.r_rejected)

    def backward(self, grad=1.0):
        dr_chosen, dr_rejected = self.loss.backward(grad)
        self.reward_model.backward(np.concatenate([dr_chosen, dr_rejected]))     # (2B,)
        return None


def train_reward_model(reward_model, task, steps, batch_size=64, lr=3e-3):
    """Step 2: the pairwise ranking loss on labelers' pairs, on the one training loop. Returns (losses,
    accuracies): per step, the loss and the fraction of pairs the reward model already ranked right."""
    objective = RankingObjective(reward_model)
    accuracies = []
    loop = TrainingLoop(objective, Adam(objective.parameters(), lr=lr), lambda: task.ranked_pairs(batch_size),
                        lambda step: lr,
                        LoopOptions(grad_clip=1.0, max_steps=steps, model=reward_model, generators={"task": task.rng},
                                    nll=False, progress=False, log=False, name="train_reward_model",
                                    on_step=lambda loop: accuracies.append(
                                        float(np.mean(objective.r_chosen > objective.r_rejected)))))
    loop.fit()
    return loop.history["loss"], accuracies
