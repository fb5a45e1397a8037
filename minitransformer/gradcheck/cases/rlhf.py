"""Gradient checks of InstructGPT's pieces: the reward model and its ranking loss, the per-token
log-probabilities, PPO's clipped surrogate and value loss, and the whole PPO objective through a policy GPT.

PPO's clipped objective has kinks where the ratio r = exp(logp - logp_old) meets 1 +- eps; the cases keep every
ratio at least 0.01 away from them (`_away_from_clip_edges`), and have ratios on both sides of the clip range
and advantages of both signs, so every branch of the min is checked.
"""

import numpy as np

from ...layers.log_probs import TokenLogProbs
from ...layers.ppo_losses import ClippedSurrogateLoss, ValueLoss
from ...layers.ranking_loss import PairwiseRankingLoss
from ...models.gpt import GPT
from ...models.reward import RewardModel, ValueModel
from ...objectives.ppo import PPOObjective, sequence_log_probs
from .case import GradcheckCase, perturb

CLIP = 0.2


def _away_from_clip_edges(fixed, moved):
    """Shift `moved` so that no ratio exp(+-(moved - fixed)) lies within 0.01 of 1 - CLIP or 1 + CLIP."""
    near = np.zeros(np.shape(fixed), dtype=bool)
    for ratio in (np.exp(moved - fixed), np.exp(fixed - moved)):
        near |= (np.abs(ratio - (1 - CLIP)) < 0.01) | (np.abs(ratio - (1 + CLIP)) < 0.01)
    return moved + near * 0.05


def _ranking_case(B):
    def build(rng):
        return PairwiseRankingLoss(), [rng.standard_normal(B) * 2, rng.standard_normal(B) * 2], None
    return build


def _clipped_case(shape, masked):
    """The rollout's numbers (logp_old, advantages, mask) are fixed by the case, not drawn from `rng`: the
    grader rebuilds a case with its own generator and hands it only the inputs (`exercises/runner.py`)."""
    def build(rng):
        fixed = np.random.default_rng(30)
        logp_old, advantages = -fixed.uniform(0.1, 3.0, size=shape), fixed.standard_normal(shape)
        mask = fixed.random(shape) < 0.7 if masked else None
        logp = _away_from_clip_edges(logp_old, logp_old + rng.uniform(-0.6, 0.6, size=shape))   # ratios 0.55 .. 1.8
        loss = ClippedSurrogateLoss(CLIP)
        return loss, [logp], lambda logp: loss.forward(logp, logp_old, advantages, mask)
    return build


def _value_loss_case(shape):
    def build(rng):
        fixed = np.random.default_rng(31)                      # fixed targets, as in _clipped_case
        loss, returns, mask = ValueLoss(), fixed.standard_normal(shape), fixed.random(shape) < 0.6
        return loss, [rng.standard_normal(shape)], lambda values: loss.forward(values, returns, mask)
    return build


def _tiny_gpt(rng):
    return perturb(GPT(vocab_size=7, d_model=8, n_heads=2, n_layers=1, d_ff=12, max_len=6, rng=rng), rng, 0.3)


def _scalar_head_case(cls):
    def build(rng):
        model = perturb(cls(_tiny_gpt(rng), rng=rng), rng, 0.3)
        return model, [rng.integers(0, 7, size=(3, 5))], None
    return build


def _ppo_case(rng):
    """The PPO objective end to end: rollout data fixed, the policy's and value model's parameters checked."""
    policy, value_model = _tiny_gpt(rng), perturb(ValueModel(_tiny_gpt(rng), rng=rng), rng, 0.3)
    ids = rng.integers(0, 7, size=(3, 6))
    logp = sequence_log_probs(policy, ids)                                               # (3, 5)
    logp_old = _away_from_clip_edges(logp, logp + rng.uniform(-0.6, 0.6, size=logp.shape))
    mask = np.zeros_like(logp)
    mask[:, 2:] = 1.0                                                                    # the completion
    advantages, returns = rng.standard_normal(logp.shape), rng.standard_normal(logp.shape)
    objective = PPOObjective(policy, value_model, clip=CLIP, value_coef=0.5)
    return objective, [ids], lambda ids: objective.forward(ids, mask, logp_old, advantages, returns)


CASES = [
    GradcheckCase("PairwiseRankingLoss", "r (6,)", _ranking_case(6)),
    GradcheckCase("PairwiseRankingLoss", "r (1,)", _ranking_case(1)),
    GradcheckCase("TokenLogProbs", "logits (2, 3, 5)", lambda rng: (TokenLogProbs(), [rng.standard_normal((2, 3, 5)) * 2,
                                                                                    rng.integers(0, 5, (2, 3))], None)),
    GradcheckCase("ClippedSurrogateLoss", "logp (4, 6), every token", _clipped_case((4, 6), masked=False)),
    GradcheckCase("ClippedSurrogateLoss", "logp (3, 7), masked", _clipped_case((3, 7), masked=True)),
    GradcheckCase("ValueLoss", "values (4, 5), masked", _value_loss_case((4, 5))),
    GradcheckCase("RewardModel", "ids (3, 5), 1 layer", _scalar_head_case(RewardModel)),
    GradcheckCase("ValueModel", "ids (3, 5), 1 layer", _scalar_head_case(ValueModel)),
    GradcheckCase("PPOObjective", "policy and value GPTs, ids (3, 6)", _ppo_case),
]
