"""InstructGPT in miniature: supervised fine-tuning, a reward model from ranked pairs, then PPO (Ouyang et al.
2022, Fig. 2; survey note §7, Fig. 5), on a task small enough to train in seconds.

The task (`EvenDigitsTask`). A prompt is `<s> d d :`, two digits after a start token and before a colon.
The demonstrators answer with four digits that count on from the prompt's last digit (`<s> 3 4 : 5 6 7 8`), but
carelessly: each digit is right with probability `p_follow`, else a random digit. The labelers, shown two
answers to one prompt, prefer the one with more even digits (a rule the reward model must discover from the
comparisons alone). So the three steps do three different things:

1. `supervised_fine_tune`: the GPT learns the demonstrators' habits (the existing LM loss, on the answer only);
2. `train_reward_model`: a `RewardModel` learns to score answers from pairs ranked by the labelers
   (`RankingObjective`, the pairwise loss -log sigma(r_chosen - r_rejected));
3. `train_ppo`: the policy is tuned to the reward model with PPO (`training/ppo.py`), its KL to the SFT model
   held down by the per-token penalty: more even digits, at the price of counting less well.

Token layout: digits 0-9 are ids 0-9, `<s>` is 10, `:` is 11 (V = 12). Left out: the prompt distribution of a
real assistant, labelers ranking K > 2 answers, and human data of any kind.
"""

import numpy as np

from ..core.module import Module
from ..core.random import as_generator
from ..layers.loss import CrossEntropyLoss
from ..layers.ranking_loss import PairwiseRankingLoss
from .objectives import LanguageModelObjective
from .optim import Adam
from .ppo import PPOObjective, rollout
from .step import train_step

START, COLON, VOCAB_SIZE = 10, 11, 12


class EvenDigitsTask:
    """Prompts, careless demonstrations, labelers' preferences and the hidden rule (module docstring).

    Args:
        rng: seed or Generator for every draw.
        p_follow: the chance that a demonstrated digit counts on correctly.
        answer_len: digits per answer.
    """

    prompt_len = 4

    def __init__(self, rng=None, p_follow=0.6, answer_len=4):
        self.rng, self.p_follow, self.answer_len = as_generator(rng), p_follow, answer_len

    def prompts(self, n):
        """int (n, 4): `<s> d d :`."""
        digits = self.rng.integers(0, 10, size=(n, 2))
        return np.concatenate([np.full((n, 1), START), digits, np.full((n, 1), COLON)], axis=1)

    def demonstrate(self, prompts):
        """prompts (n, 4) -> int (n, 4 + answer_len): each answer counts on from the last prompt digit, carelessly."""
        steps = np.arange(1, self.answer_len + 1)
        counted = (prompts[:, 2:3] + steps) % 10                                   # (n, answer_len)
        careless = self.rng.random(counted.shape) >= self.p_follow
        answers = np.where(careless, self.rng.integers(0, 10, size=counted.shape), counted)
        return np.concatenate([prompts, answers], axis=1)

    def answers(self, ids):
        return np.asarray(ids)[:, self.prompt_len:]

    def true_reward(self, ids):
        """(n,) the labelers' hidden rule: how many digits of the answer are even."""
        return (self.answers(ids) % 2 == 0).sum(axis=1)

    def counting_accuracy(self, ids):
        """The fraction of answer digits equal to the count from the prompt's last digit (d + 1, d + 2, ...)."""
        ids = np.asarray(ids)
        counted = (ids[:, 2:3] + np.arange(1, ids.shape[1] - self.prompt_len + 1)) % 10
        return float(np.mean(self.answers(ids) == counted))

    def ranked_pairs(self, n):
        """(chosen, rejected) int (n, T): two demonstrations of one prompt, ranked by the labelers (ties redrawn)."""
        chosen, rejected = [], []
        while len(chosen) < n:
            prompts = self.prompts(n)
            first, second = self.demonstrate(prompts), self.demonstrate(prompts)
            difference = self.true_reward(first) - self.true_reward(second)
            keep = difference != 0
            chosen += list(np.where((difference > 0)[:, None], first, second)[keep])
            rejected += list(np.where((difference > 0)[:, None], second, first)[keep])
        return np.array(chosen[:n]), np.array(rejected[:n])


def supervised_fine_tune(model, task, steps, batch_size=64, lr=3e-3):
    """Step 1: next-token cross-entropy on demonstrations, scored on the answer tokens only. Returns the losses."""
    objective = LanguageModelObjective(model, CrossEntropyLoss(ignore_index=-1))
    optimizer = Adam(objective.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        ids = task.demonstrate(task.prompts(batch_size))                           # (B, T)
        targets = ids[:, 1:].copy()
        targets[:, :task.prompt_len - 1] = -1                                      # the prompt is given, not learnt
        losses.append(train_step(objective, optimizer, (ids[:, :-1], targets), lr, 1.0))
    return losses


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
    """Step 2: the pairwise ranking loss on labelers' pairs. Returns (losses, accuracies): per step, the
    loss and the fraction of pairs the reward model already ranked right."""
    objective = RankingObjective(reward_model)
    optimizer = Adam(objective.parameters(), lr=lr)
    losses, accuracies = [], []
    for _ in range(steps):
        losses.append(train_step(objective, optimizer, task.ranked_pairs(batch_size), lr, 1.0))
        accuracies.append(float(np.mean(objective.r_chosen > objective.r_rejected)))
    return losses, accuracies


def train_ppo(policy, reference, reward_model, value_model, task, iterations, batch_size=64, epochs=4, lr=1e-3,
              kl_coef=0.1, rng=None):
    """Step 3: `iterations` of rollout then `epochs` PPO steps on it. Returns a dict of per-iteration lists:
    score (the reward model's mean), kl (mean per sequence), true_reward, counting, l_clip, l_value."""
    rng = as_generator(rng)
    objective = PPOObjective(policy, value_model)
    optimizer = Adam(objective.parameters(), lr=lr)
    history = {name: [] for name in ("score", "kl", "true_reward", "counting", "l_clip", "l_value")}
    for _ in range(iterations):
        batch = rollout(policy, reference, reward_model, value_model, task.prompts(batch_size), task.answer_len,
                        rng, kl_coef=kl_coef)
        for name, value in (("score", batch.scores.mean()), ("kl", batch.kl.mean()),
                            ("true_reward", task.true_reward(batch.ids).mean()),
                            ("counting", task.counting_accuracy(batch.ids))):
            history[name].append(float(value))
        for _ in range(epochs):
            train_step(objective, optimizer, batch.batch(), lr, 1.0)
        history["l_clip"].append(float(objective.l_clip))
        history["l_value"].append(float(objective.l_value))
    return history
