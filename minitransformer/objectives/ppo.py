"""Reinforcement learning from a reward model with PPO: InstructGPT's third step (Ouyang et al. 2022, §3.5;
survey note §7, Fig. 5; Schulman et al. 2017 for PPO, Schulman et al. 2016 for GAE).

One iteration:

1. `rollout`: the policy completes a batch of prompts by sampling. For every completion token t the policy's
   log-probability logp_old_t, the SFT model's logp_ref_t and the value head's V_t are recorded, and the
   reward model scores the finished sequence. The per-token reward is the KL penalty
       r_t = -beta (logp_old_t - logp_ref_t),  plus the reward model's score on the last token,
   so that the policy earns reward without drifting far from the SFT model (its sum over t is a sampled
   estimate of beta * KL(policy || SFT) of the completion).
2. `gae`: advantages A_t = sum_l (gamma lambda)^l delta_{t+l}, delta_t = r_t + gamma V_{t+1} - V_t (V after
   the last token is 0), and the value head's targets, the returns R_t = A_t + V_t. The advantages are then
   whitened (mean 0, standard deviation 1 over the batch's completion tokens), as PPO implementations do.
3. `PPOObjective` is minimised for a few epochs over the same batch by the one training loop: the clipped
   surrogate of the policy plus c times the value loss (`layers/ppo_losses.py`), every gradient by hand.

Left out: InstructGPT's "PPO-ptx" term (pre-training gradients mixed in), minibatches within an epoch, an
adaptive KL coefficient, and a value head sharing the policy's body (here the value model is its own GPT).
"""

from dataclasses import dataclass

import numpy as np

from ..core.module import Module
from ..core.random import as_generator
from ..generation.sampling import generate
from ..layers.log_probs import TokenLogProbs
from ..layers.ppo_losses import ClippedSurrogateLoss, ValueLoss
from ..training.loop import LoopOptions, TrainingLoop
from ..training.optim import Adam


def gae(rewards, values, gamma=1.0, lam=0.95):
    """Generalised advantage estimation over T steps ending the episode.

    >>> gae(np.array([[0.0, 0.0, 1.0]]), np.array([[0.5, 0.5, 0.5]]), gamma=1.0, lam=0.5).round(4).tolist()
    [[0.125, 0.25, 0.5]]

    Args:
        rewards, values: (B, T); the value after the last step is 0 (the episode ends).
        gamma: discount; lam: GAE's lambda (1: Monte-Carlo returns minus V, 0: one-step TD errors).
    Returns:
        advantages (B, T).
    """
    rewards, values = np.asarray(rewards, dtype=np.float64), np.asarray(values, dtype=np.float64)
    if rewards.ndim != 2 or rewards.shape != values.shape:
        raise ValueError(f"gae expected rewards and values of one shape (B, T), got {rewards.shape} and {values.shape}")
    advantages = np.zeros_like(rewards)
    running, next_value = np.zeros(len(rewards)), np.zeros(len(rewards))
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]                # (B,) TD error
        running = delta + gamma * lam * running
        advantages[:, t], next_value = running, values[:, t]
    return advantages


def sequence_log_probs(model, ids):
    """ids int (B, T) -> (B, T - 1): log p(ids[:, t + 1] | ids[:, :t + 1]) under the language model."""
    return TokenLogProbs()(model(ids[:, :-1]), ids[:, 1:])


@dataclass
class Rollout:
    """One batch of sampled completions and what PPO needs of them; arrays (B, T - 1) are per predicted token."""
    ids: np.ndarray          # int (B, T): prompt then completion
    mask: np.ndarray         # (B, T - 1): 1 where the token predicted is a completion token
    logp_old: np.ndarray     # (B, T - 1) the sampling policy's log-probabilities
    logp_ref: np.ndarray     # (B, T - 1) the SFT model's
    values: np.ndarray       # (B, T - 1) the value head's V_t
    advantages: np.ndarray   # (B, T - 1) whitened GAE advantages (0 off the mask)
    returns: np.ndarray      # (B, T - 1) A_t + V_t before whitening, the value head's targets
    scores: np.ndarray       # (B,) the reward model's score of each sequence
    kl: np.ndarray           # (B,) sum over the completion of logp_old - logp_ref

    def batch(self):
        """The arguments of `PPOObjective.forward`."""
        return self.ids, self.mask, self.logp_old, self.advantages, self.returns


def rollout(policy, reference, reward_model, value_model, prompts, n_new, rng, kl_coef=0.1, gamma=1.0, lam=0.95):
    """Sample completions of `prompts` (int (B, P)) of `n_new` tokens and score them (module docstring, 1-2)."""
    prompts = np.asarray(prompts)
    ids = generate(policy, prompts, n_new, rng=rng)                                # (B, P + n)
    with policy.evaluating(), reference.evaluating(), value_model.evaluating(), reward_model.evaluating():
        logp_old, logp_ref = sequence_log_probs(policy, ids), sequence_log_probs(reference, ids)   # (B, T - 1)
        values, scores = value_model(ids[:, :-1]), reward_model(ids)              # (B, T - 1), (B,)
    first = prompts.shape[1] - 1                                                   # predicts the first new token
    mask = np.zeros_like(logp_old)
    mask[:, first:] = 1.0
    kl_per_token = (logp_old - logp_ref) * mask
    rewards = -kl_coef * kl_per_token
    rewards[:, -1] += scores
    advantages = np.zeros_like(logp_old)
    advantages[:, first:] = gae(rewards[:, first:], values[:, first:], gamma, lam)
    returns = (advantages + values) * mask
    scored = advantages[:, first:]
    advantages[:, first:] = (scored - scored.mean()) / (scored.std() + 1e-8)
    return Rollout(ids, mask, logp_old, logp_ref, values, advantages, returns, scores, kl_per_token.sum(axis=1))


class PPOObjective(Module):
    """L = L_clip(policy) + value_coef * L_V(value model), one scalar for `train_step`.

    Args:
        policy: the GPT being trained (ids (B, T) -> logits (B, T, V)).
        value_model: a ValueModel (ids (B, T) -> values (B, T)).
        clip: PPO's eps.  value_coef: c.
    """

    def __init__(self, policy, value_model, clip=0.2, value_coef=0.5):
        self.policy, self.value_model, self.value_coef = policy, value_model, value_coef
        self.log_probs, self.policy_loss, self.value_loss = TokenLogProbs(), ClippedSurrogateLoss(clip), ValueLoss()

    def forward(self, ids, mask, logp_old, advantages, returns):
        """ids int (B, T); the rest (B, T - 1) as in `Rollout` -> scalar loss; parts in `l_clip`, `l_value`."""
        logp = self.log_probs(self.policy(ids[:, :-1]), ids[:, 1:])                  # (B, T - 1)
        self.l_clip = self.policy_loss(logp, logp_old, advantages, mask)
        self.l_value = self.value_loss(self.value_model(ids[:, :-1]), returns, mask)
        return self.l_clip + self.value_coef * self.l_value

    def backward(self, grad=1.0):
        """The clipped loss through the log-probabilities into the policy; the value loss into the value model."""
        dlogits, _ = self.log_probs.backward(self.policy_loss.backward(grad))         # (B, T - 1, V)
        self.policy.backward(dlogits)
        self.value_model.backward(self.value_loss.backward(grad * self.value_coef))
        return None

    def __repr__(self):
        return f"PPOObjective({self.policy!r}, {self.value_model!r}, value_coef={self.value_coef})"


def train_ppo(policy, reference, reward_model, value_model, task, iterations, batch_size=64, epochs=4, lr=1e-3,
              kl_coef=0.1, rng=None):
    """Step 3: `iterations` of rollout then `epochs` PPO steps on it, those through the one training loop.
    Returns a dict of per-iteration lists: score (the reward model's mean), kl (mean per sequence),
    true_reward, counting, l_clip, l_value."""
    rng = as_generator(rng)
    objective = PPOObjective(policy, value_model)
    rollouts = []                                       # the batch the loop's next steps train on
    loop = TrainingLoop(objective, Adam(objective.parameters(), lr=lr), lambda: rollouts[-1].batch(),
                        lambda step: lr, LoopOptions(grad_clip=1.0, nll=False, progress=False, log=False,
                                                     name="train_ppo"))
    history = {name: [] for name in ("score", "kl", "true_reward", "counting", "l_clip", "l_value")}
    for _ in range(iterations):
        batch = rollout(policy, reference, reward_model, value_model, task.prompts(batch_size), task.answer_len,
                        rng, kl_coef=kl_coef)
        rollouts[:] = [batch]
        for name, value in (("score", batch.scores.mean()), ("kl", batch.kl.mean()),
                            ("true_reward", task.true_reward(batch.ids).mean()),
                            ("counting", task.counting_accuracy(batch.ids))):
            history[name].append(float(value))
        loop.fit(max_steps=loop.step + epochs)
        history["l_clip"].append(float(objective.l_clip))
        history["l_value"].append(float(objective.l_value))
    return history
