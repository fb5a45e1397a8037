# %% [markdown]
# # 18. InstructGPT in miniature: fine-tuning, a reward model, and PPO
#
# **The claim.** Greg Strabel, *Transformers* (survey note, 2023), §7 and Fig. 5, after Ouyang et al. (2022),
# "Training language models to follow instructions with human feedback": a pre-trained GPT is (1) fine-tuned on
# demonstrations (SFT), (2) a reward model is trained on completions that labelers ranked, and (3) the policy is
# optimised against that reward model with PPO, a per-token KL penalty keeping it near the SFT model.
#
# **Here.** All three steps, every gradient written by hand (`minitransformer/objectives/instruct.py`,
# `objectives/ppo.py`, `models/reward.py`, `layers/ranking_loss.py`, `layers/ppo_losses.py`; the gradient checks
# are in `gradcheck/cases/rlhf.py`), on a task small enough for a notebook. A prompt is `<s> d d :`;
# demonstrators answer with four digits that count on from the prompt's last digit, but carelessly (each digit
# right with probability 0.6). Labelers, shown two answers, prefer the one with more **even** digits; the reward
# model has to discover that rule from the comparisons alone.
#
# **Exercise** (2 points): the reward PPO maximises, before step 3. Its cells carry nbgrader's metadata: in a
# student copy (`python -m minitransformer exercises make --only penalised_reward --notebooks`, or an nbgrader
# release) the answer is blank and a locked check cell, with hidden tests of the numbers, grades it.

# %%
import copy

import matplotlib.pyplot as plt
import numpy as np

from minitransformer import GPT, generate
from minitransformer.models.reward import RewardModel, ValueModel
from minitransformer.objectives.instruct import supervised_fine_tune
from minitransformer.objectives.ppo import train_ppo
from minitransformer.objectives.ranking import train_reward_model
from minitransformer.tasks.even_digits import VOCAB_SIZE, EvenDigitsTask

task = EvenDigitsTask(rng=0)


def show(ids, rows=4):
    """Prompt digits | answer digits, for a few rows."""
    for row in ids[:rows]:
        print(" ".join(map(str, row[1:3])), "|", " ".join(map(str, row[4:])))

# %% [markdown]
# ## Step 1: supervised fine-tuning
# The existing language-model loss (`LanguageModelObjective`), scored on the answer tokens only.

# %%
policy = GPT(VOCAB_SIZE, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=8, rng=0)
test_prompts = task.prompts(256)
before = generate(policy, test_prompts, 4, rng=1)
sft_losses = supervised_fine_tune(policy, task, steps=80, batch_size=32, lr=1e-2)
after_sft = generate(policy, test_prompts, 4, rng=1)
print(f"SFT loss {np.mean(sft_losses[:5]):.2f} -> {np.mean(sft_losses[-5:]):.2f}; digits counting on: "
      f"{task.counting_accuracy(before):.2f} before, {task.counting_accuracy(after_sft):.2f} after "
      f"(the demonstrations: {task.counting_accuracy(task.demonstrate(test_prompts)):.2f})")
assert np.mean(sft_losses[-5:]) < np.mean(sft_losses[:5]) - 0.3
assert task.counting_accuracy(after_sft) > task.counting_accuracy(before) + 0.1
show(after_sft)
sft = copy.deepcopy(policy)                      # the reference of the KL penalty, and the start of the other two

# %% [markdown]
# ## Step 2: the reward model
# A copy of the SFT GPT with a scalar head on the last position, trained with the pairwise ranking loss
# $-\log \sigma(r_\mathrm{chosen} - r_\mathrm{rejected})$ on pairs of demonstrations the labelers ranked.

# %%
reward_model = RewardModel(copy.deepcopy(sft), rng=1)
rm_losses, rm_accuracy = train_reward_model(reward_model, task, steps=80, batch_size=32, lr=1e-2)
chosen, rejected = EvenDigitsTask(rng=99).ranked_pairs(500)                       # pairs never trained on
held_out_accuracy = np.mean(reward_model(chosen) > reward_model(rejected))
samples = task.demonstrate(task.prompts(500))
correlation = np.corrcoef(reward_model(samples), task.true_reward(samples))[0, 1]
print(f"ranking loss {np.mean(rm_losses[:5]):.3f} -> {np.mean(rm_losses[-5:]):.3f}; held-out pairs ranked right: "
      f"{held_out_accuracy:.3f}; correlation of the score with the number of even digits: {correlation:.3f}")
assert held_out_accuracy > 0.9 and correlation > 0.9

# %% [markdown]
# ## Step 3: PPO against the reward model
# The reward of an answer $y_1 \dots y_T$ to a prompt $x$ is the reward model's score $r(x, y)$ minus $\beta$ times
# the log-ratio of the policy to the SFT model, token by token (Ouyang et al. 2022, eq. 2; Strabel §7):
#
# $$R(x, y) = r(x, y) - \beta \sum_{t=1}^{T} \big(\log \pi(y_t \mid x, y_{<t}) - \log \pi_\mathrm{SFT}(y_t \mid x, y_{<t})\big).$$
#
# PPO wants it per token: token $t$ gets $-\beta(\log \pi - \log \pi_\mathrm{SFT})$ of its own, and the last token
# also gets the score $r(x, y)$, which only the whole answer has.
#
# **Exercise** (2 points). Write `penalised_rewards(scores, logp, logp_sft, beta)`: `scores` of shape $(B,)$,
# the log-probabilities `logp` and `logp_sft` of each answer's tokens, $(B, T)$; return the per-token rewards,
# $(B, T)$. The check tests one answer by hand; its hidden tests check the sums, the last token and a batch.

# %% [solution] penalised_reward_per_token
def penalised_rewards(scores, logp, logp_sft, beta):
    """Per-token rewards (B, T): -beta (logp - logp_sft) on every token, plus the score (B,) on the last."""
    ### BEGIN SOLUTION
    rewards = -beta * (logp - logp_sft)         # (B, T)
    rewards[:, -1] += scores
    return rewards
    ### END SOLUTION

# %% [check 2] check_penalised_reward_per_token
one = penalised_rewards(np.array([2.0]), np.log([[0.5, 0.25, 0.5]]), np.log([[0.5, 0.5, 0.25]]), 0.1)
assert np.shape(one) == (1, 3), f"the rewards have shape {np.shape(one)}, expected (B, T) = (1, 3)"
assert np.allclose(one, [[0.0, 0.1 * np.log(2), 2.0 - 0.1 * np.log(2)]]), "rewards of the answer by hand"
### BEGIN HIDDEN TESTS
hidden = np.random.default_rng(11)
scores_h, logp_h, logp_sft_h = hidden.standard_normal(6), -hidden.random((6, 5)) * 3, -hidden.random((6, 5)) * 3
rewards_h = penalised_rewards(scores_h, logp_h.copy(), logp_sft_h.copy(), 0.3)
assert np.shape(rewards_h) == (6, 5)
assert np.allclose(rewards_h.sum(axis=1), scores_h - 0.3 * (logp_h - logp_sft_h).sum(axis=1), rtol=1e-12)
assert np.allclose(rewards_h[:, :-1], -0.3 * (logp_h - logp_sft_h)[:, :-1], rtol=1e-12)
assert np.allclose(penalised_rewards(scores_h, logp_h.copy(), logp_h.copy(), 0.3)[:, -1], scores_h)
assert np.allclose(penalised_rewards(np.zeros(6), logp_h.copy(), logp_sft_h.copy(), 0.0), 0)
### END HIDDEN TESTS

# %% [markdown]
# Each PPO iteration samples 32 answers, scores them so, estimates advantages with GAE, and takes four steps on the
# clipped surrogate plus the value loss. Two runs from the same SFT model: a weak KL penalty ($\beta = 0.02$) and
# a strong one ($\beta = 0.3$).

# %%
runs, policies = {}, {}
for beta in (0.02, 0.3):
    policies[beta] = copy.deepcopy(sft)
    runs[beta] = train_ppo(policies[beta], sft, reward_model, ValueModel(copy.deepcopy(sft), rng=2), task,
                           iterations=12, batch_size=32, epochs=4, lr=1e-2, kl_coef=beta, rng=3)
for beta, history in runs.items():
    print(f"beta {beta}: even digits {history['true_reward'][0]:.2f} -> {history['true_reward'][-1]:.2f}, "
          f"KL {history['kl'][0]:.2f} -> {history['kl'][-1]:.2f}, "
          f"counting {history['counting'][0]:.2f} -> {history['counting'][-1]:.2f}")
for history in runs.values():
    assert np.mean(history["true_reward"][-3:]) > history["true_reward"][0] + 1.0          # reward rises
assert np.mean(runs[0.3]["kl"][-3:]) < np.mean(runs[0.02]["kl"][-3:])                  # the penalty holds KL down

fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
for beta, history in runs.items():
    axes[0].plot(history["true_reward"], label=f"β = {beta}")
    axes[1].plot(history["kl"], label=f"β = {beta}")
    axes[2].plot(history["counting"], label=f"β = {beta}")
for ax, label in zip(axes, ["even digits per answer (of 4)", "KL(policy ‖ SFT) per answer (nats)",
                            "digits that count on"]):
    ax.set_xlabel("PPO iteration")
    ax.set_ylabel(label)
    ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# The reward the labelers would give rises to nearly 4 even digits in 4 in both runs; the KL to the SFT model
# grows with it, less under the stronger penalty. What the reward model does not see, counting, is given up:
# the policy finds answers the rule likes better than the demonstrations, which is the point of step 3, and
# also its danger (the reward model is only a proxy for what people want; the KL penalty is what keeps the
# policy near text the SFT model would write).

#
# ## Samples before and after
# The same four prompts (digits of the prompt | the answer), from the SFT model and from the policy after PPO
# with $\beta = 0.3$.

# %%
after_ppo = generate(policies[0.3], test_prompts, 4, rng=1)
print("SFT model:")
show(after_sft)
print("after PPO:")
show(after_ppo)
print(f"even digits per answer: SFT {task.true_reward(after_sft).mean():.2f}, after PPO "
      f"{task.true_reward(after_ppo).mean():.2f}")
assert task.true_reward(after_ppo).mean() > task.true_reward(after_sft).mean() + 1.0
