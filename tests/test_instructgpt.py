"""InstructGPT in miniature: the reward and value models, GAE, the rollout, the PPO objective, the three steps."""

import copy

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases

from minitransformer import GPT
from minitransformer.layers.ppo_losses import ClippedSurrogateLoss, ValueLoss
from minitransformer.layers.ranking_loss import PairwiseRankingLoss
from minitransformer.models.reward import RewardModel, ValueModel
from minitransformer.objectives import ppo
from minitransformer.objectives.instruct import supervised_fine_tune
from minitransformer.objectives.ppo import PPOObjective, gae, rollout, sequence_log_probs, train_ppo
from minitransformer.objectives.ranking import RankingObjective, train_reward_model
from minitransformer.tasks.even_digits import COLON, START, VOCAB_SIZE, EvenDigitsTask
from minitransformer.training import harness  # the loop's step calls train_step there


@pytest.mark.parametrize("case", catalogue_cases("RewardModel", "ValueModel", "PPOObjective"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


def _gpt(seed=0, d_model=16):
    return GPT(VOCAB_SIZE, d_model, 2, 1, 2 * d_model, 8, rng=seed)


def test_the_reward_is_the_value_head_at_the_last_position():
    reward_model = RewardModel(_gpt(), rng=1)
    value_model = ValueModel(reward_model.gpt, rng=2)
    value_model.head = reward_model.head
    ids = np.random.default_rng(0).integers(0, VOCAB_SIZE, size=(3, 6))
    assert np.allclose(reward_model(ids), value_model(ids)[:, -1])
    changed = ids.copy()
    changed[:, -1] = (changed[:, -1] + 1) % VOCAB_SIZE
    assert np.allclose(value_model(ids)[:, :-1], value_model(changed)[:, :-1])        # V_t sees tokens <= t only
    with pytest.raises(TypeError, match="RewardModel expected a GPT, got str"):
        RewardModel("gpt")


def test_the_ranking_objective_scores_chosen_against_rejected():
    reward_model = RewardModel(_gpt(), rng=1)
    chosen, rejected = EvenDigitsTask(rng=0).ranked_pairs(4)
    objective = RankingObjective(reward_model)
    expected = PairwiseRankingLoss()(reward_model(chosen), reward_model(rejected))
    assert objective(chosen, rejected) == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(objective.r_chosen, reward_model(chosen), rtol=1e-12)


def test_gae_is_the_discounted_sum_of_td_errors():
    rng = np.random.default_rng(0)
    rewards, values, gamma, lam = rng.standard_normal((2, 5)), rng.standard_normal((2, 5)), 0.9, 0.8
    next_values = np.concatenate([values[:, 1:], np.zeros((2, 1))], axis=1)
    deltas = rewards + gamma * next_values - values
    expected = [[sum((gamma * lam) ** k * deltas[b, t + k] for k in range(5 - t)) for t in range(5)] for b in range(2)]
    assert np.allclose(gae(rewards, values, gamma, lam), expected)
    monte_carlo = np.cumsum(rewards[:, ::-1], axis=1)[:, ::-1] - values                 # lambda = gamma = 1
    assert np.allclose(gae(rewards, values, 1.0, 1.0), monte_carlo)
    with pytest.raises(ValueError, match=r"gae expected rewards and values of one shape \(B, T\)"):
        gae(rewards, values[:, :3])


def test_a_rollout_of_the_reference_itself_has_no_kl_and_whitened_advantages():
    task, policy = EvenDigitsTask(rng=0), _gpt()
    reward_model, value_model = RewardModel(_gpt(1), rng=1), ValueModel(_gpt(2), rng=2)
    batch = rollout(policy, copy.deepcopy(policy), reward_model, value_model, task.prompts(16), 4, rng=0)
    assert batch.ids.shape == (16, 8) and batch.mask.shape == (16, 7)
    assert np.array_equal(batch.ids[:, 0], np.full(16, START)) and np.array_equal(batch.ids[:, 3], np.full(16, COLON))
    assert batch.mask[:, :3].sum() == 0 and batch.mask[:, 3:].min() == 1
    assert np.allclose(batch.kl, 0.0) and np.allclose(batch.logp_old, batch.logp_ref)
    assert np.allclose(batch.logp_old, sequence_log_probs(policy, batch.ids))
    assert np.allclose(batch.scores, reward_model(batch.ids))
    scored = batch.advantages[:, 3:]
    assert abs(scored.mean()) < 1e-9 and scored.std() == pytest.approx(1.0)
    assert np.all(batch.advantages[:, :3] == 0) and np.all(batch.returns[:, :3] == 0)


def test_log_probs_of_a_sequence_by_hand():
    """log p(ids[t + 1] | ids[:t + 1]) from the model run on each prefix alone, one position at a time."""
    model, ids = _gpt(4), np.random.default_rng(1).integers(0, VOCAB_SIZE, size=(2, 6))
    for t in range(5):
        logits = model(ids[:, :t + 1])[:, -1]                                          # (B, V)
        expected = logits[np.arange(2), ids[:, t + 1]] - np.log(np.exp(logits).sum(axis=1))
        np.testing.assert_allclose(sequence_log_probs(model, ids)[:, t], expected, rtol=1e-10)


def test_a_rollout_by_hand_with_the_default_coefficients():
    """Rewards -0.1 (logp_old - logp_ref) per completion token plus the score on the last; GAE with gamma 1 and
    lambda 0.95 as a double sum; returns A + V before whitening; then A whitened over the completion tokens."""
    task, policy, reference = EvenDigitsTask(rng=2), _gpt(0), _gpt(5)
    batch = rollout(policy, reference, RewardModel(_gpt(1), rng=1), ValueModel(_gpt(2), rng=2), task.prompts(6), 4,
                    rng=0)
    kl = batch.logp_old[:, 3:] - batch.logp_ref[:, 3:]                               # (B, 4) the completion
    rewards = -0.1 * kl
    rewards[:, -1] += batch.scores
    values = batch.values[:, 3:]
    deltas = rewards + np.concatenate([values[:, 1:], np.zeros((6, 1))], axis=1) - values
    advantages = np.array([[sum(0.95 ** k * deltas[b, t + k] for k in range(4 - t)) for t in range(4)]
                           for b in range(6)])
    np.testing.assert_allclose(batch.kl, kl.sum(axis=1), rtol=1e-12)
    assert np.all(np.abs(batch.kl) > 1e-3)                                            # the reference differs
    np.testing.assert_allclose(batch.returns[:, 3:], advantages + values, rtol=1e-10)
    whitened = (advantages - advantages.mean()) / advantages.std()
    np.testing.assert_allclose(batch.advantages[:, 3:], whitened, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(gae(deltas + values - np.concatenate([values[:, 1:], np.zeros((6, 1))], axis=1),
                                   values), advantages, rtol=1e-10)                    # gae's own defaults


def test_the_ppo_objective_defaults_are_clip_0_2_and_value_coefficient_0_5():
    """L = L_clip(eps = 0.2) + 0.5 L_V, each computed by its own loss on the same log-probabilities and values."""
    policy, value_model = _gpt(0), ValueModel(_gpt(2), rng=2)
    objective = PPOObjective(policy, value_model)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB_SIZE, size=(3, 6))
    logp = sequence_log_probs(policy, ids)
    logp_old, advantages = logp + rng.normal(0, 0.3, logp.shape), rng.standard_normal(logp.shape)
    returns, mask = rng.standard_normal(logp.shape), (rng.random(logp.shape) < 0.7).astype(float)
    loss = objective(ids, mask, logp_old, advantages, returns)
    l_clip = ClippedSurrogateLoss(0.2)(logp, logp_old, advantages, mask)
    l_value = ValueLoss()(value_model(ids[:, :-1]), returns, mask)
    assert loss == pytest.approx(l_clip + 0.5 * l_value, rel=1e-12)
    assert ClippedSurrogateLoss(0.1)(logp, logp_old, advantages, mask) != pytest.approx(l_clip)   # eps shows


def test_the_task_draws_uniform_digits_and_follows_the_count_at_rate_0_6():
    """Prompts `<s> d d :` = [10, d, d, 11] with d uniform in 0..9; each answer digit (4 of them) right with
    probability 0.6, else uniform in 0..9, so right with 0.6 + 0.4 / 10 = 0.64 (20,000 digits: standard error
    0.0034, tolerance 0.015)."""
    task = EvenDigitsTask(rng=0)
    ids = task.demonstrate(task.prompts(5000))
    assert ids.shape == (5000, 8) and (START, COLON, VOCAB_SIZE) == (10, 11, 12)
    assert np.all(ids[:, 0] == 10) and np.all(ids[:, 3] == 11)
    digits = ids[:, 1:3].ravel()                                                    # 10,000 prompt digits
    assert np.abs(np.bincount(digits, minlength=10) / digits.size - 0.1).max() < 0.015  # standard error 0.003
    assert abs(task.counting_accuracy(ids) - 0.64) < 0.015
    careless = EvenDigitsTask(rng=1, p_follow=0.0)
    answers = careless.answers(careless.demonstrate(careless.prompts(5000))).ravel()   # 20,000 random digits
    assert np.abs(np.bincount(answers, minlength=10) / answers.size - 0.1).max() < 0.01   # standard error 0.0021
    assert abs(task.true_reward(np.array([[10, 1, 2, 11, 0, 3, 8, 8]]))[0] - 3) == 0    # 0, 8, 8 are even


def test_fine_tuning_scores_the_answer_only_and_ppo_uses_its_defaults(monkeypatch):
    """SFT's targets are -1 (ignored) where the prompt is predicted; train_ppo rolls out with kl_coef 0.1 and
    takes 4 PPO steps per rollout, with clip 0.2."""
    steps, rollouts = [], []
    real_rollout, real_step = ppo.rollout, harness.train_step

    def recording_step(objective, optimizer, batch, *rest):            # every step goes through the one loop
        steps.append((objective, batch))
        return real_step(objective, optimizer, batch, *rest)
    monkeypatch.setattr(harness, "train_step", recording_step)
    supervised_fine_tune(_gpt(0), EvenDigitsTask(rng=0), steps=1, batch_size=5)
    ids, targets = steps[0][1]
    assert ids.shape == (5, 7) and np.all(targets[:, :3] == -1)
    full = np.concatenate([ids, targets[:, -1:]], axis=1)                             # the demonstration
    np.testing.assert_array_equal(targets[:, 3:], full[:, 4:])                        # every answer digit scored
    monkeypatch.setattr(ppo, "rollout", lambda *args, **kwargs: rollouts.append(kwargs) or real_rollout(
        *args, **kwargs))
    steps.clear()
    train_ppo(_gpt(0), _gpt(0), RewardModel(_gpt(1), rng=1), ValueModel(_gpt(2), rng=2), EvenDigitsTask(rng=0),
              iterations=2, batch_size=4, rng=0)
    assert [call["kl_coef"] for call in rollouts] == [0.1, 0.1] and len(steps) == 2 * 4
    assert steps[0][0].policy_loss.clip == 0.2 and steps[0][0].value_coef == 0.5


def test_the_three_steps_default_to_batches_of_64_their_rates_and_clipping_at_1(monkeypatch):
    """Called without them, each step trains on batches of 64 with its gradient clipped to norm 1: fine-tuning
    and the reward model at rate 3e-3, PPO at 1e-3 (4 steps on one rollout)."""
    calls, real_step = [], harness.train_step

    def recording_step(objective, optimizer, batch, lr, grad_clip, *rest):
        calls.append((type(objective).__name__, len(batch[0]), lr, grad_clip))
        return real_step(objective, optimizer, batch, lr, grad_clip, *rest)
    monkeypatch.setattr(harness, "train_step", recording_step)
    task = EvenDigitsTask(rng=0)
    supervised_fine_tune(_gpt(0), task, steps=1)
    train_reward_model(RewardModel(_gpt(1), rng=1), task, steps=1)
    train_ppo(_gpt(0), _gpt(0), RewardModel(_gpt(1), rng=1), ValueModel(_gpt(2), rng=2), task, iterations=1, rng=0)
    assert calls == [("LanguageModelObjective", 64, 3e-3, 1.0), ("RankingObjective", 64, 3e-3, 1.0),
                     *[("PPOObjective", 64, 1e-3, 1.0)] * 4]


def test_the_task_demonstrates_counting_and_labelers_prefer_even_digits():
    task = EvenDigitsTask(rng=0, p_follow=1.0)
    ids = task.demonstrate(task.prompts(5))
    assert task.counting_accuracy(ids) == 1.0
    assert np.array_equal(ids[:, 4], (ids[:, 2] + 1) % 10)
    chosen, rejected = EvenDigitsTask(rng=1).ranked_pairs(50)
    assert np.all(task.true_reward(chosen) > task.true_reward(rejected))
    assert np.array_equal(chosen[:, :4], rejected[:, :4])                                # one prompt per pair


def test_the_three_steps_learn_on_a_tiny_model():
    """SFT lowers the loss; the reward model learns to rank; PPO raises the true reward, paying KL."""
    task = EvenDigitsTask(rng=0)
    policy = _gpt(0)
    losses = supervised_fine_tune(policy, task, steps=40, batch_size=32, lr=1e-2)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3
    sft = copy.deepcopy(policy)
    reward_model = RewardModel(copy.deepcopy(sft), rng=1)
    losses, accuracies = train_reward_model(reward_model, task, steps=40, batch_size=32, lr=1e-2)
    assert np.mean(accuracies[-5:]) > 0.85 and np.mean(losses[-5:]) < 0.4
    history = train_ppo(policy, sft, reward_model, ValueModel(copy.deepcopy(sft), rng=2), task, iterations=8,
                        batch_size=32, epochs=4, lr=1e-2, rng=3)
    assert history["kl"][0] == pytest.approx(0.0, abs=1e-9)                         # the first rollout is the SFT model
    assert np.mean(history["true_reward"][-2:]) > history["true_reward"][0] + 0.5
    assert history["kl"][-1] > 0.0
