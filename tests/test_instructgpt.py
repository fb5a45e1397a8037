"""InstructGPT in miniature: the reward and value models, GAE, the rollout, the PPO objective, the three steps."""

import copy

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases

from minitransformer import GPT
from minitransformer.models.reward import RewardModel, ValueModel
from minitransformer.objectives.instruct import supervised_fine_tune
from minitransformer.objectives.ppo import gae, rollout, sequence_log_probs, train_ppo
from minitransformer.objectives.ranking import train_reward_model
from minitransformer.tasks.even_digits import COLON, START, VOCAB_SIZE, EvenDigitsTask


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
