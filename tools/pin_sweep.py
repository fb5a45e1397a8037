"""The pinning sweep, a developer script: change each definition of the newer code in turn and name the test that catches it.

    python tools/pin_sweep.py                      # every mutation; prints the Markdown table
    python tools/pin_sweep.py --list               # the mutations only (file:line, change, tests), nothing run
    python tools/pin_sweep.py --only ppo_losses    # the mutations whose file or change matches a regular expression
    python tools/pin_sweep.py --out table.md       # the table also written to a file

Each mutation is (file, an exact fragment of its source, the fragment's replacement, the concept's tests). The
whole repository is copied to a temporary folder once; each mutation is applied to the copy, the tests are run
there (`python -m pytest -x -q -p no:cacheprovider`, niced, one BLAS thread), and the file is restored before
the next, so the working tree is never touched. A mutation is *caught* when the tests fail; the table names the
first failing test. Before the sweep every set of tests is run once unchanged: a set that fails then makes the
sweep stop (its verdicts would mean nothing).

The fragments must stay true to the code: `tests/test_pin_sweep_list.py` checks that each one still occurs
exactly once in its file and that its tests exist. A survivor is a definition no test holds; pin it in its
concept's test file against a hand computation or a paper's number, or say why no test can see it (an
equivalent mutation) and move it to `EQUIVALENT` with the reason.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTEST = ("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider")
COPY_IGNORED = shutil.ignore_patterns(".git", "__pycache__", ".hypothesis", "node_modules", "site", "*.pyc")


@dataclass(frozen=True)
class Mutation:
    file: str              # path from the repository root
    original: str          # an exact fragment of the file, found exactly once
    replacement: str
    tests: tuple           # pytest arguments: test files or node ids of the concept
    equivalent: str = ""   # why no test can see it, for a change that leaves every observable the same


def _group(file, tests, *changes):
    """Mutations of one file checked by one set of tests: each change a pair (original, replacement)."""
    return [Mutation(file, original, replacement, tuple(tests)) for original, replacement in changes]


PKG = "minitransformer/"
GRADIENT_CHECKS = "::test_backward_matches_finite_differences"   # slow; run for changes that can reach a backward


def without_gradient_checks(test_file):
    """A concept's test file without its finite-difference checks: for a change to a forward or a default."""
    return (test_file, f"--deselect={test_file}{GRADIENT_CHECKS}")


INSTRUCT = ("tests/test_instructgpt.py",)
INSTRUCT_FORWARD = without_gradient_checks("tests/test_instructgpt.py")
PPO_LOSSES = ("tests/test_ppo_losses.py",)
RANKING = ("tests/test_ranking_loss.py",)
DENOISING = ("tests/test_denoising.py",)
WORDPIECE = ("tests/test_wordpiece.py",)
SPARSE = ("tests/test_sparse_masks.py",)
RMSNORM = ("tests/test_rmsnorm.py",)
SWIGLU = ("tests/test_swiglu.py",)
SILU = ("tests/test_activations.py",)
LLAMA = without_gradient_checks("tests/test_gpt_llama.py")
RELATIVE_VALUES = ("tests/test_relative_values.py",)
GPT2_TOKENIZER = ("tests/test_gpt2_tokenizer.py", "tests/test_gpt2_bpe_training.py")
SPECIAL_TOKENS = ("tests/test_gpt2_tokenizer.py",)
HEAD_SCORES = ("tests/test_head_scores.py",)
INDUCTION = ("tests/test_induction.py",)
CONTRACT = ("tests/test_module.py",)
TILED = ("tests/test_tiled_attention.py",)
FAST_EQUALS_PLAIN = ("tests/test_fast.py::test_fast_layers_equal_their_plain_parents",
                     "tests/test_fast.py::test_fast_attention_tiled_equals_plain")
FAST_TILED = ("tests/test_tiled_attention.py", *FAST_EQUALS_PLAIN)
FAST_ATTENTION = ("tests/test_fast_forms.py", "tests/test_tiled_attention.py", *FAST_EQUALS_PLAIN)
STYLES = ("tests/test_train_command.py::test_style_llama_trains_the_llama_decoder_and_the_checkpoint_records_it",
          "tests/test_train_command.py::test_style_llama_without_d_ff_matches_the_gpt2_models_parameter_count",
          "tests/test_train_command.py::test_style_gpt2_the_default_builds_gpt2s_decoder")

MUTATIONS = [
    # ------------------------------------------------------------------ InstructGPT: GAE, the rollout's KL penalty, PPO
    *_group(PKG + "objectives/ppo.py", INSTRUCT_FORWARD,
            ("def gae(rewards, values, gamma=1.0, lam=0.95):", "def gae(rewards, values, gamma=0.99, lam=0.95):"),
            ("def gae(rewards, values, gamma=1.0, lam=0.95):", "def gae(rewards, values, gamma=1.0, lam=0.9):"),
            ("running, next_value = np.zeros(len(rewards)), np.zeros(len(rewards))",
             "running, next_value = np.zeros(len(rewards)), np.ones(len(rewards))"),
            ("for t in reversed(range(rewards.shape[1])):", "for t in range(rewards.shape[1]):"),
            ("delta = rewards[:, t] + gamma * next_value - values[:, t]",
             "delta = rewards[:, t] - gamma * next_value - values[:, t]"),
            ("delta = rewards[:, t] + gamma * next_value - values[:, t]",
             "delta = rewards[:, t] + next_value - values[:, t]"),
            ("delta = rewards[:, t] + gamma * next_value - values[:, t]",
             "delta = rewards[:, t] + gamma * next_value + values[:, t]"),
            ("running = delta + gamma * lam * running", "running = delta + lam * running"),
            ("running = delta + gamma * lam * running", "running = delta + gamma * running"),
            ("running = delta + gamma * lam * running", "running = delta - gamma * lam * running"),
            ("advantages[:, t], next_value = running, values[:, t]",
             "advantages[:, t], next_value = running, rewards[:, t]"),
            ("n_new, rng, kl_coef=0.1, gamma=1.0, lam=0.95):", "n_new, rng, kl_coef=0.2, gamma=1.0, lam=0.95):"),
            ("n_new, rng, kl_coef=0.1, gamma=1.0, lam=0.95):", "n_new, rng, kl_coef=0.1, gamma=0.99, lam=0.95):"),
            ("n_new, rng, kl_coef=0.1, gamma=1.0, lam=0.95):", "n_new, rng, kl_coef=0.1, gamma=1.0, lam=0.9):"),
            ("first = prompts.shape[1] - 1", "first = prompts.shape[1]"),
            ("mask[:, first:] = 1.0", "mask[:, first + 1:] = 1.0"),
            ("kl_per_token = (logp_old - logp_ref) * mask", "kl_per_token = (logp_ref - logp_old) * mask"),
            ("rewards = -kl_coef * kl_per_token", "rewards = kl_coef * kl_per_token"),
            ("rewards[:, -1] += scores", "rewards[:, -1] -= scores"),
            ("rewards[:, -1] += scores", "rewards[:, first] += scores"),
            ("gae(rewards[:, first:], values[:, first:], gamma, lam)",
             "gae(rewards[:, first:], values[:, first:], lam, gamma)"),
            ("returns = (advantages + values) * mask", "returns = (advantages - values) * mask"),
            ("returns = (advantages + values) * mask", "returns = advantages * mask"),
            ("(scored - scored.mean()) / (scored.std() + 1e-8)", "scored / (scored.std() + 1e-8)"),
            ("(scored - scored.mean()) / (scored.std() + 1e-8)", "(scored - scored.mean())"),
            ("(scored - scored.mean()) / (scored.std() + 1e-8)", "(scored - scored.mean()) / (scored.std() + 1e-4)"),
            ("def __init__(self, policy, value_model, clip=0.2, value_coef=0.5):",
             "def __init__(self, policy, value_model, clip=0.3, value_coef=0.5):"),
            ("def __init__(self, policy, value_model, clip=0.2, value_coef=0.5):",
             "def __init__(self, policy, value_model, clip=0.2, value_coef=1.0):"),
            ("return self.l_clip + self.value_coef * self.l_value", "return self.l_clip - self.value_coef * self.l_value"),
            ("batch_size=64, epochs=4, lr=1e-3,\n              kl_coef=0.1, rng=None):",
             "batch_size=64, epochs=3, lr=1e-3,\n              kl_coef=0.1, rng=None):"),
            ("batch_size=64, epochs=4, lr=1e-3,\n              kl_coef=0.1, rng=None):",
             "batch_size=64, epochs=4, lr=1e-3,\n              kl_coef=0.2, rng=None):"),
            ("batch_size=64, epochs=4, lr=1e-3,\n              kl_coef=0.1, rng=None):",
             "batch_size=64, epochs=4, lr=3e-3,\n              kl_coef=0.1, rng=None):"),
            ("batch_size=64, epochs=4, lr=1e-3,\n              kl_coef=0.1, rng=None):",
             "batch_size=32, epochs=4, lr=1e-3,\n              kl_coef=0.1, rng=None):"),
            ("lambda step: lr, LoopOptions(grad_clip=1.0, nll=False,", "lambda step: lr, LoopOptions(grad_clip=0.0, nll=False,"),
            ("rng, kl_coef=kl_coef)", "rng)"),
            ),
    *_group(PKG + "objectives/ppo.py", INSTRUCT,
            ("self.value_loss.backward(grad * self.value_coef)", "self.value_loss.backward(grad)"),
            ("self.policy.backward(dlogits)", "self.policy.backward(-dlogits)"),
            ),
    *_group(PKG + "layers/ppo_losses.py", PPO_LOSSES,
            ("if mask.sum() == 0:", "if mask.sum() < 0:"),
            ("def __init__(self, clip=0.2):", "def __init__(self, clip=0.1):"),
            ("if not 0.0 < clip < 1.0:", "if not 0.0 <= clip < 1.0:"),
            ("if not 0.0 < clip < 1.0:", "if not 0.0 < clip <= 1.0:"),
            ("self.ratio = np.exp(np.asarray(logp) - logp_old)", "self.ratio = np.exp(logp_old - np.asarray(logp))"),
            ("np.clip(self.ratio, 1.0 - self.clip, 1.0 + self.clip)", "np.clip(self.ratio, 1.0 - 2 * self.clip, 1.0 + self.clip)"),
            ("np.clip(self.ratio, 1.0 - self.clip, 1.0 + self.clip)", "np.clip(self.ratio, 1.0 - self.clip, 1.0 + 2 * self.clip)"),
            ("self.ratio * self.advantages <= clipped * self.advantages",
             "self.ratio * self.advantages < clipped * self.advantages"),
            ("objective = np.minimum(self.ratio * self.advantages", "objective = np.maximum(self.ratio * self.advantages"),
            ("float(((~self.unclipped_is_min) * self.mask).sum() / self.count)",
             "float((self.unclipped_is_min * self.mask).sum() / self.count)"),
            ("return -(objective * self.mask).sum() / self.count", "return (objective * self.mask).sum() / self.count"),
            ("return -(objective * self.mask).sum() / self.count", "return -(objective * self.mask).sum() / self.mask.size"),
            ("return -(objective * self.mask).sum() / self.count", "return -objective.sum() / self.count"),
            ("dobjective = -grad * self.mask / self.count", "dobjective = grad * self.mask / self.count"),
            ("dlogp = dratio * self.ratio", "dlogp = dratio"),
            ("return 0.5 * (self.mask * self.error ** 2).sum() / self.count",
             "return 1.0 * (self.mask * self.error ** 2).sum() / self.count"),
            ("return 0.5 * (self.mask * self.error ** 2).sum() / self.count",
             "return 0.5 * (self.error ** 2).sum() / self.count"),
            ("self.error = np.asarray(values) - returns", "self.error = returns - np.asarray(values)"),
            ("dvalues = grad * self.mask * self.error / self.count", "dvalues = 2 * grad * self.mask * self.error / self.count"),
            ("dvalues = grad * self.mask * self.error / self.count", "dvalues = grad * self.error / self.count"),
            ),
    # ------------------------------------------------------------------ InstructGPT: the reward model's ranking loss
    *_group(PKG + "layers/ranking_loss.py", RANKING,
            ("return -np.logaddexp(0.0, -x)", "return np.logaddexp(0.0, -x)"),
            ("return -np.logaddexp(0.0, -x)", "return -np.logaddexp(0.0, x)"),
            ("return np.exp(log_sigmoid(x))", "return np.exp(log_sigmoid(-x))"),
            ("self.margin = r_chosen - r_rejected", "self.margin = r_rejected - r_chosen"),
            ("return -log_sigmoid(self.margin).mean()", "return -log_sigmoid(self.margin).sum()"),
            ("dmargin = -grad * sigmoid(-self.margin) / self.margin.size",
             "dmargin = -grad * sigmoid(self.margin) / self.margin.size"),
            ("dmargin = -grad * sigmoid(-self.margin) / self.margin.size", "dmargin = -grad * sigmoid(-self.margin)"),
            ("return dmargin, -dmargin", "return -dmargin, dmargin"),
            ),
    *_group(PKG + "objectives/ranking.py", INSTRUCT_FORWARD,
            ("rewards = self.reward_model(np.concatenate([chosen, rejected]))",
             "rewards = self.reward_model(np.concatenate([rejected, chosen]))"),
            ("self.r_chosen, self.r_rejected = rewards[:len(chosen)], rewards[len(chosen):]",
             "self.r_rejected, self.r_chosen = rewards[:len(chosen)], rewards[len(chosen):]"),
            ("def train_reward_model(reward_model, task, steps, batch_size=64, lr=3e-3):",
             "def train_reward_model(reward_model, task, steps, batch_size=64, lr=1e-3):"),
            ("def train_reward_model(reward_model, task, steps, batch_size=64, lr=3e-3):",
             "def train_reward_model(reward_model, task, steps, batch_size=32, lr=3e-3):"),
            ("np.mean(objective.r_chosen > objective.r_rejected)", "np.mean(objective.r_chosen < objective.r_rejected)"),
            ),
    *_group(PKG + "objectives/ranking.py", INSTRUCT,
            ("np.concatenate([dr_chosen, dr_rejected])", "np.concatenate([dr_rejected, dr_chosen])"),
            ),
    *_group(PKG + "objectives/instruct.py", INSTRUCT_FORWARD,
            ("def supervised_fine_tune(model, task, steps, batch_size=64, lr=3e-3):",
             "def supervised_fine_tune(model, task, steps, batch_size=64, lr=1e-3):"),
            ("def supervised_fine_tune(model, task, steps, batch_size=64, lr=3e-3):",
             "def supervised_fine_tune(model, task, steps, batch_size=32, lr=3e-3):"),
            ("targets[:, :task.prompt_len - 1] = -1", "targets[:, :task.prompt_len] = -1"),
            ("targets[:, :task.prompt_len - 1] = -1", "targets[:, :task.prompt_len - 2] = -1"),
            ("grad_clip=1.0, max_steps=steps, generators={\"task\": task.rng}, progress=False",
             "grad_clip=0.0, max_steps=steps, generators={\"task\": task.rng}, progress=False"),
            ),
    *_group(PKG + "tasks/even_digits.py", INSTRUCT_FORWARD,
            ("START, COLON, VOCAB_SIZE = 10, 11, 12", "START, COLON, VOCAB_SIZE = 11, 10, 12"),
            ("def __init__(self, rng=None, p_follow=0.6, answer_len=4):",
             "def __init__(self, rng=None, p_follow=0.7, answer_len=4):"),
            ("def __init__(self, rng=None, p_follow=0.6, answer_len=4):",
             "def __init__(self, rng=None, p_follow=0.6, answer_len=5):"),
            ("digits = self.rng.integers(0, 10, size=(n, 2))", "digits = self.rng.integers(0, 9, size=(n, 2))"),
            ("digits = self.rng.integers(0, 10, size=(n, 2))", "digits = self.rng.integers(1, 10, size=(n, 2))"),
            ("steps = np.arange(1, self.answer_len + 1)", "steps = np.arange(0, self.answer_len)"),
            ("counted = (prompts[:, 2:3] + steps) % 10", "counted = (prompts[:, 1:2] + steps) % 10"),
            ("careless = self.rng.random(counted.shape) >= self.p_follow",
             "careless = self.rng.random(counted.shape) < self.p_follow"),
            ("np.where(careless, self.rng.integers(0, 10, size=counted.shape), counted)",
             "np.where(careless, self.rng.integers(0, 9, size=counted.shape), counted)"),
            ("return (self.answers(ids) % 2 == 0).sum(axis=1)", "return (self.answers(ids) % 2 == 1).sum(axis=1)"),
            ("np.arange(1, ids.shape[1] - self.prompt_len + 1)) % 10", "np.arange(0, ids.shape[1] - self.prompt_len)) % 10"),
            ("keep = difference != 0", "keep = difference >= 0"),
            ("chosen += list(np.where((difference > 0)[:, None], first, second)[keep])",
             "chosen += list(np.where((difference < 0)[:, None], first, second)[keep])"),
            ),
    *_group(PKG + "models/reward.py", INSTRUCT_FORWARD,
            ("return self.head(hidden[:, -1])[:, 0]", "return self.head(hidden[:, 0])[:, 0]"),
            ("return self.head(self.gpt.hidden(ids))[..., 0]", "return -self.head(self.gpt.hidden(ids))[..., 0]"),
            ),
    *_group(PKG + "models/reward.py", INSTRUCT,
            ("dhidden[:, -1] = self.head.backward", "dhidden[:, 0] = self.head.backward"),
            ),
    # ------------------------------------------------------------------ T5's span corruption, BART's noising functions
    *_group(PKG + "objectives/denoising.py", DENOISING,
            ("MASK = 3 ", "MASK = 4 "),
            ("N_SPECIAL = 4", "N_SPECIAL = 5"),
            ("size=parts - 1, replace=False)) + 1", "size=parts - 1, replace=True)) + 1"),
            ("def t5_noise_mask(length, rng, density=0.15, mean_span=3.0):",
             "def t5_noise_mask(length, rng, density=0.2, mean_span=3.0):"),
            ("def t5_noise_mask(length, rng, density=0.15, mean_span=3.0):",
             "def t5_noise_mask(length, rng, density=0.15, mean_span=2.0):"),
            ("n_noise = min(max(int(round(density * length)), 1), length - 1)",
             "n_noise = min(max(int(density * length), 1), length - 1)"),
            ("n_noise = min(max(int(round(density * length)), 1), length - 1)",
             "n_noise = min(max(int(round(density * length)), 0), length - 1)"),
            ("n_noise = min(max(int(round(density * length)), 1), length - 1)",
             "n_noise = min(max(int(round(density * length)), 1), length - 2)"),
            ("n_spans = min(max(int(round(n_noise / mean_span)), 1), length - n_noise)",
             "n_spans = min(max(int(n_noise / mean_span), 1), length - n_noise)"),
            ("n_spans = min(max(int(round(n_noise / mean_span)), 1), length - n_noise)",
             "n_spans = min(max(int(round(n_noise / mean_span)), 2), length - n_noise)"),
            ("np.stack([keep_lengths, noise_lengths], axis=1)", "np.stack([noise_lengths, keep_lengths], axis=1)"),
            ("is_noise = np.tile([False, True], n_spans)", "is_noise = np.tile([True, False], n_spans)"),
            ("np.roll(np.repeat(is_noise, segments), rng.integers(length))",
             "np.roll(np.repeat(is_noise, segments), 0 * rng.integers(length))"),
            ("np.roll(np.repeat(is_noise, segments), rng.integers(length))",
             "np.roll(np.repeat(is_noise, segments), rng.integers(length // 2))"),
            ("def span_corruption(ids, sentinel_ids, rng, density=0.15, mean_span=3.0):",
             "def span_corruption(ids, sentinel_ids, rng, density=0.2, mean_span=3.0):"),
            ("def span_corruption(ids, sentinel_ids, rng, density=0.15, mean_span=3.0):",
             "def span_corruption(ids, sentinel_ids, rng, density=0.15, mean_span=2.0):"),
            ("span_starts = noise & ~np.concatenate([[False], noise[:-1]])",
             "span_starts = noise & ~np.concatenate([[True], noise[:-1]])"),
            ("source, target, span = [], [], -1", "source, target, span = [], [], 0"),
            ("return source, target + [sentinel_ids[span + 1]]", "return source, target"),
            ("def token_masking(ids, mask_id, rng, rate=0.15):", "def token_masking(ids, mask_id, rng, rate=0.2):"),
            ("size=max(int(round(rate * len(ids))), 1), replace=False)\n    source",
             "size=max(int(rate * len(ids)), 1), replace=False)\n    source"),
            ("def token_deletion(ids, rng, rate=0.15):", "def token_deletion(ids, rng, rate=0.2):"),
            ("choice(len(ids), size=max(int(round(rate * len(ids))), 1), replace=False)\n    return",
             "choice(len(ids), size=max(int(rate * len(ids)), 1), replace=False)\n    return"),
            ("choice(len(ids), size=max(int(round(rate * len(ids))), 1), replace=False)\n    return",
             "choice(len(ids) - 1, size=max(int(round(rate * len(ids))), 1), replace=False)\n    return"),
            ("def infilling_spans(length, rng, rate=0.3, poisson_mean=3.0):",
             "def infilling_spans(length, rng, rate=0.15, poisson_mean=3.0):"),
            ("def infilling_spans(length, rng, rate=0.3, poisson_mean=3.0):",
             "def infilling_spans(length, rng, rate=0.3, poisson_mean=2.0):"),
            ("n_mask = min(int(np.ceil(rate * length)), length - 1)", "n_mask = min(int(round(rate * length)), length - 1)"),
            ("n_mask = min(int(np.ceil(rate * length)), length - 1)", "n_mask = min(int(np.ceil(rate * length)), length - 2)"),
            ("span_lengths.append(int(rng.poisson(poisson_mean)))",
             "span_lengths.append(int(rng.poisson(poisson_mean - 1)) + 1)"),
            ("span_lengths.append(int(rng.poisson(poisson_mean)))",
             "span_lengths.append(int(rng.geometric(1 / (poisson_mean + 1))) - 1)"),
            ("span_lengths[-1] -= sum(span_lengths) - n_mask", "span_lengths[-1] -= 0"),
            ("span_lengths = span_lengths[:n_keep] + [sum(span_lengths[n_keep:])]",
             "span_lengths = span_lengths[:n_keep + 1]"),
            ("rng.choice(n_keep + 1, size=len(span_lengths), replace=False)",
             "rng.choice(n_keep + 1, size=len(span_lengths), replace=True)"),
            ("start += keep + span", "start += keep"),
            ("def text_infilling(ids, mask_id, rng, rate=0.3, poisson_mean=3.0):",
             "def text_infilling(ids, mask_id, rng, rate=0.15, poisson_mean=3.0):"),
            ("def text_infilling(ids, mask_id, rng, rate=0.3, poisson_mean=3.0):",
             "def text_infilling(ids, mask_id, rng, rate=0.3, poisson_mean=2.0):"),
            ("transform, rng=None, n_sentinels=8):", "transform, rng=None, n_sentinels=6):"),
            ("self.offset = N_SPECIAL + n_sentinels", "self.offset = N_SPECIAL + n_sentinels + 1"),
            ("return token_deletion(ids, self.rng)", "return token_masking(ids, MASK, self.rng)"),
            ("return text_infilling(ids, MASK, self.rng)", "return text_infilling(ids, MASK, self.rng, rate=0.15)"),
            ("starts = self.rng.integers(0, len(self.stream) - self.block_size + 1, size=batch_size)",
             "starts = self.rng.integers(1, len(self.stream) - self.block_size + 1, size=batch_size)"),
            ("starts = self.rng.integers(0, len(self.stream) - self.block_size + 1, size=batch_size)",
             "starts = self.rng.integers(0, len(self.stream) - self.block_size, size=batch_size)"),
            ("if len(self.stream) < block_size:", "if len(self.stream) <= block_size:"),
            ("pad_sequences([[BOS] + target for _, target in pairs], PAD)",
             "pad_sequences([[EOS] + target for _, target in pairs], PAD)"),
            ("pad_sequences([target + [EOS] for _, target in pairs], PAD)",
             "pad_sequences([target + [BOS] for _, target in pairs], PAD)"),
            ),
    # ------------------------------------------------------------------ WordPiece
    *_group(PKG + "tokenizers/wordpiece.py", WORDPIECE,
            ('CONTINUATION = "##"', 'CONTINUATION = "#"'),
            ('UNKNOWN = "[UNK]"', 'UNKNOWN = "<unk>"'),
            ("return [word[0]] + [CONTINUATION + char for char in word[1:]]",
             "return [CONTINUATION + word[0]] + [CONTINUATION + char for char in word[1:]]"),
            ("return left + right[len(CONTINUATION):]", "return left + right"),
            ("return pair_count / (left_count * right_count)", "return pair_count / left_count"),
            ("return pair_count / (left_count * right_count)", "return pair_count / right_count"),
            ("return pair_count / (left_count * right_count)", "return pair_count / (left_count + right_count)"),
            ("return pair_count / (left_count * right_count)", "return pair_count"),
            ("piece_counts[pair[1]]), count)", "piece_counts[pair[1]]), -count)"),
            ("(key == best_key and pair < best)", "(key == best_key and pair > best)"),
            ("self.pieces[piece] += sign * frequency", "self.pieces[piece] += sign"),
            ("self.pairs[pair] += sign * frequency", "self.pairs[pair] += sign"),
            ("position += 2", "position += 1"),
            ("while len(vocab) < vocab_size:", "while len(vocab) <= vocab_size:"),
            ("for end in range(len(word), start, -1):", "for end in range(start + 1, len(word) + 1):"),
            ("piece = word[start:end] if start == 0 else CONTINUATION + word[start:end]",
             "piece = CONTINUATION + word[start:end] if start == 0 else word[start:end]"),
            ("pieces = [UNKNOWN]", "pieces.append(UNKNOWN)"),
            ("words[-1] += token[len(CONTINUATION):]", "words[-1] += token"),
            ("or vocab_size < 1:", "or vocab_size < 0:"),
            ),
    # ------------------------------------------------------------------ Longformer's dilated window
    *_group(PKG + "variants/sparse_masks.py", SPARSE,
            ("def longformer_mask(T, window, global_positions=(), dilation=1):",
             "def longformer_mask(T, window, global_positions=(), dilation=2):"),
            ("or dilation < 1:", "or dilation < 2:"),
            ("np.abs(j - i) <= (window // 2) * dilation)", "np.abs(j - i) < (window // 2) * dilation)"),
            ("np.abs(j - i) <= (window // 2) * dilation)", "np.abs(j - i) <= (window // 2))"),
            ("np.abs(j - i) <= (window // 2) * dilation)", "np.abs(j - i) <= (window // 2) * dilation + 1)"),
            ("np.abs(j - i) <= (window // 2) * dilation)", "np.abs(j - i) <= ((window + 1) // 2) * dilation)"),
            ("((j - i) % dilation == 0)", "((j - i) % (dilation + 1) == 0)"),
            ("((j - i) % dilation == 0)", "((j - i) % dilation == 1 % dilation)"),
            ("mask[:, chosen] = True", "mask[:, chosen] = mask[:, chosen]"),
            ),
    # ------------------------------------------------------------------ RMSNorm, SiLU, SwiGLU, the Llama style
    *_group(PKG + "layers/rmsnorm.py", RMSNORM,
            ("def __init__(self, d, eps=1e-5, dtype=np.float64, rng=None):",
             "def __init__(self, d, eps=1e-6, dtype=np.float64, rng=None):"),
            ("self.gamma = Parameter(np.ones(d, dtype=dtype))", "self.gamma = Parameter(np.full(d, 2.0, dtype=dtype))"),
            ("mean_square = (x ** 2).mean(axis=-1, keepdims=True)", "mean_square = x.var(axis=-1, keepdims=True)"),
            ("mean_square = (x ** 2).mean(axis=-1, keepdims=True)", "mean_square = (x ** 2).sum(axis=-1, keepdims=True)"),
            ("self.rstd = 1.0 / np.sqrt(mean_square + self.eps)", "self.rstd = 1.0 / (np.sqrt(mean_square) + self.eps)"),
            ("self.rstd = 1.0 / np.sqrt(mean_square + self.eps)", "self.rstd = 1.0 / np.sqrt(mean_square + 2 * self.eps)"),
            ("self.gamma.grad += np.sum(dout * self.xhat, axis=leading_axes)",
             "self.gamma.grad = np.sum(dout * self.xhat, axis=leading_axes)"),
            ("projection = np.mean(dxhat * self.xhat, axis=-1, keepdims=True)",
             "projection = np.sum(dxhat * self.xhat, axis=-1, keepdims=True)"),
            ("dx = self.rstd * (dxhat - self.xhat * projection)", "dx = self.rstd * (dxhat + self.xhat * projection)"),
            ),
    *_group(PKG + "layers/activations.py", SILU,
            ("self.sigmoid = 0.5 * (1 + np.tanh(0.5 * x))", "self.sigmoid = 0.5 * (1 + np.tanh(x))"),
            ("self.sigmoid = 0.5 * (1 + np.tanh(0.5 * x))", "self.sigmoid = 0.5 * (1 - np.tanh(0.5 * x))"),
            ("dy_dx = self.sigmoid * (1 + self.x * (1 - self.sigmoid))",
             "dy_dx = self.sigmoid * (1 - self.x * (1 - self.sigmoid))"),
            ("dy_dx = self.sigmoid * (1 + self.x * (1 - self.sigmoid))", "dy_dx = self.sigmoid"),
            ),
    *_group(PKG + "layers/swiglu.py", SWIGLU,
            ("def __init__(self, d_model, d_ff, bias=False,", "def __init__(self, d_model, d_ff, bias=True,"),
            ("self.w1 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng, init_std=init_std)\n"
             "        self.w3 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng, init_std=init_std)",
             "self.w3 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng, init_std=init_std)\n"
             "        self.w1 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng, init_std=init_std)"),
            ("init_std=init_std if out_std is None else out_std)", "init_std=init_std)"),
            ("self.gate = self.act(self.w1(x))", "self.gate = self.act(self.w3(x))"),
            ("self.value = self.w3(x)", "self.value = self.act(self.w3(x))"),
            ("hidden = self.gate * self.value", "hidden = self.gate + self.value"),
            ("dvalue = dhidden * self.gate", "dvalue = dhidden * self.value"),
            ("return dx_through_gate + dx_through_value", "return dx_through_gate - dx_through_value"),
            ),
    *_group(PKG + "layers/block.py", LLAMA,
            ('NORM_LAYERS = {"layernorm": LayerNorm, "rmsnorm": RMSNorm}',
             'NORM_LAYERS = {"layernorm": LayerNorm, "rmsnorm": LayerNorm}'),
            ('if activation == "swiglu":', 'if activation == "gelu":'),
            ),
    *_group(PKG + "models/gpt.py", LLAMA,
            ('LLAMA_STYLE = dict(positional="rope",', 'LLAMA_STYLE = dict(positional="alibi",'),
            ('norm_layer="rmsnorm", activation="swiglu", bias=False)', 'norm_layer="layernorm", activation="swiglu", bias=False)'),
            ('norm_layer="rmsnorm", activation="swiglu", bias=False)', 'norm_layer="rmsnorm", activation="gelu", bias=False)'),
            ('norm_layer="rmsnorm", activation="swiglu", bias=False)', 'norm_layer="rmsnorm", activation="swiglu", bias=True)'),
            ('norm_layer: str = "layernorm"', 'norm_layer: str = "rmsnorm"'),
            ("bias: bool = True ", "bias: bool = False "),
            ('kernels="plain", norm_layer="layernorm", bias=True):', 'kernels="plain", norm_layer="rmsnorm", bias=True):'),
            ('kernels="plain", norm_layer="layernorm", bias=True):', 'kernels="plain", norm_layer="layernorm", bias=False):'),
            ("self.ln_f = make_norm(norm_layer, d_model, dtype)", 'self.ln_f = make_norm("layernorm", d_model, dtype)'),
            ("norm_layer=norm_layer,\n                                        bias=bias)",
             "norm_layer=norm_layer,\n                                        bias=True)"),
            ),
    *_group(PKG + "training/config.py", STYLES,
            ('"gpt2": dict(positional="learned", norm_layer="layernorm", activation="gelu", bias=True)',
             '"gpt2": dict(positional="sinusoidal", norm_layer="layernorm", activation="gelu", bias=True)'),
            ('"gpt2": dict(positional="learned", norm_layer="layernorm", activation="gelu", bias=True)',
             '"gpt2": dict(positional="learned", norm_layer="rmsnorm", activation="gelu", bias=True)'),
            ('"gpt2": dict(positional="learned", norm_layer="layernorm", activation="gelu", bias=True)',
             '"gpt2": dict(positional="learned", norm_layer="layernorm", activation="relu", bias=True)'),
            ('"gpt2": dict(positional="learned", norm_layer="layernorm", activation="gelu", bias=True)',
             '"gpt2": dict(positional="learned", norm_layer="layernorm", activation="gelu", bias=False)'),
            ('"llama": LLAMA_STYLE}', '"llama": dict(LLAMA_STYLE, bias=True)}'),
            ('style: str = "gpt2"', 'style: str = "llama"'),
            ("**STYLES[config.style])", '**STYLES[config.style], norm="post")'),
            ("**STYLES[config.style])", '**STYLES["gpt2"])'),
            ("return max(1, round((target - count(1)) / per_unit) + 1)",
             "return max(1, round((target - count(1)) / per_unit) + 4)"),
            ),
    # ------------------------------------------------------------------ the one loop and the one way to resume
    *_group(PKG + "training/loop.py",
            ("tests/test_one_loop.py::test_the_default_evaluation_is_the_mean_training_loss_of_the_steps_after_the_last_evaluation",),
            ("if step > since]", "if step >= since]"),
            ),
    *_group(PKG + "training/harness.py",
            ("tests/test_one_loop.py::test_a_first_ctrl_c_asks_the_loop_to_stop_and_a_second_stops_at_once",),
            ("        stop.requested = True\n        signal.signal(signal.SIGINT, before)", "        stop.requested = True"),
            ),
    *_group(PKG + "training/config.py",
            ("tests/test_train_resume.py::test_every_option_resume_may_change_is_said_applied_and_kept",),
            ('"max_steps", "eval_interval", "eval_batches", "workers"', '"max_steps", "eval_interval", "workers"'),
            ),
    *_group(PKG + "training/resuming.py",
            ("tests/test_train_resume.py::test_every_option_resume_may_change_is_said_applied_and_kept",
             "tests/test_one_loop.py::test_every_option_resume_may_change_is_said_applied_and_kept"),
            ('WATCHING = ("eval_interval", "no_progress", "parallel", "worker_timeout")',
             'WATCHING = ("eval_interval", "no_progress", "worker_timeout")'),
            ("for field in TrainConfig.RESUMABLE})", 'for field in TrainConfig.RESUMABLE if field != "eval_batches"})'),
            ),
    # ------------------------------------------------------------------ Shaw et al.'s relative values
    *_group(PKG + "variants/relative_values.py", RELATIVE_VALUES,
            ("self.value_size = head_size if value_size is None else value_size", "self.value_size = head_size"),
            ("rng.standard_normal((2 * max_distance + 1, self.value_size)) * self.value_size ** -0.5",
             "rng.standard_normal((2 * max_distance + 1, self.value_size)) * self.head_size ** -0.5"),
            ("rng.standard_normal((2 * max_distance + 1, self.value_size)) * self.value_size ** -0.5",
             "rng.standard_normal((2 * max_distance + 1, self.value_size)) * self.value_size ** -1.0"),
            ("rng.standard_normal((2 * max_distance + 1, self.value_size)) * self.value_size ** -0.5",
             "rng.random((2 * max_distance + 1, self.value_size)) * self.value_size ** -0.5"),
            ("super().__init__(head_size, max_distance, causal=causal,", "super().__init__(head_size, max_distance, causal=True,"),
            ("identity = np.broadcast_to(np.eye(v.shape[-2], dtype=v.dtype)",
             "identity = np.broadcast_to(np.zeros((v.shape[-2],) * 2, dtype=v.dtype)"),
            ("self.values_rel = self.table_v.data[self.rows]", "self.values_rel = self.table_v.data[self.rows.T]"),
            ("return read[..., :self.value_size] + (self.alpha", "return read[..., :self.value_size] - (self.alpha"),
            ("dalpha_rel = (dout[..., :, None, :] @", "dalpha_rel = -(dout[..., :, None, :] @"),
            ("np.add.at(self.table_v.grad, self.rows, dvalues_rel)", "np.add.at(self.table_v.grad, self.rows.T, dvalues_rel)"),
            ("dq, dk, dv_extended[..., :self.value_size]", "dq, dk, dv_extended[..., -self.value_size:]"),
            ),
    # ------------------------------------------------------------------ GPT-2's tokenizer: byte alphabet, pattern, files, cache
    *_group(PKG + "tokenizers/gpt2.py", GPT2_TOKENIZER,
            ("'s|'t|'re|'ve|'m|'ll|'d|", "'s|'t|'re|'m|'ll|'d|"),
            (r"| ?\p{L}+|", r"|\p{L}+|"),
            (r"| ?\p{N}+|", r"| ?\p{N}|"),
            (r"| ?[^\s\p{L}\p{N}]+|", r"| ?[^\s\p{L}]+|"),
            (r'|\s+(?!\S)|\s+"""', r'|\s+"""'),
            ('END_OF_TEXT = "<|endoftext|>"', 'END_OF_TEXT = "<|end_of_text|>"'),
            ('MERGES_HEADER = "#version: 0.2"', 'MERGES_HEADER = "#version: 0.1"'),
            ("DEFAULT_CACHE_SIZE = 65536", "DEFAULT_CACHE_SIZE = 4096"),
            ('*range(ord("!"),', '*range(ord(" "),'),
            ('range(ord("!"), ord("~") + 1)', 'range(ord("!"), ord("~"))'),
            ('range(ord("¡"), ord("¬") + 1)', 'range(ord("¡"), ord("¬"))'),
            ('range(ord("®"), ord("ÿ") + 1)', 'range(ord("®"), ord("ÿ"))'),
            ("chr(256 + index)", "chr(255 + index)"),
            ("type(token_id) is int", "isinstance(token_id, int)"),
            ("!= list(range(len(vocab))):", "!= list(range(1, len(vocab) + 1)):"),
            ("unknown = [token for token in special_tokens if token not in vocab]\n    if unknown:",
             "unknown = [token for token in special_tokens if token not in vocab]\n    if len(unknown) > 1:"),
            ("if not all(part in vocab for part in pair) or pair[0] + pair[1] not in vocab:",
             "if pair[0] + pair[1] not in vocab:"),
            ("if not all(part in vocab for part in pair) or pair[0] + pair[1] not in vocab:",
             "if not all(part in vocab for part in pair):"),
            ("merge {rank} {short_repr", "merge {rank + 1} {short_repr"),
            ("enumerate(file, start=1)", "enumerate(file)"),
            ('(number == 1 and line.startswith("#version")) or not line',
             '(number == 1 and line.startswith("#version"))'),
            ('(number == 1 and line.startswith("#version")) or not line',
             '(number == 2 and line.startswith("#version")) or not line'),
            ("if len(parts) != 2 or not all(parts):", "if len(parts) != 2:"),
            ('source="GPT2Tokenizer", cache_size=DEFAULT_CACHE_SIZE):', 'source="GPT2Tokenizer", cache_size=0):'),
            ("if type(cache_size) is not int or cache_size < 0:", "if not isinstance(cache_size, int) or cache_size < 0:"),
            ("if type(cache_size) is not int or cache_size < 0:", "if type(cache_size) is not int or cache_size < 1:"),
            ("special_tokens = (END_OF_TEXT,) if END_OF_TEXT in vocab else ()", "special_tokens = ()"),
            ("self.ranks = {pair: rank for rank, pair in enumerate(merges)}",
             "self.ranks = {pair: rank for rank, pair in enumerate(merges, start=1)}"),
            ("is_text = token in self.special_tokens or any(", "is_text = any("),
            ("def from_files(cls, vocab_json, merges_txt, special_tokens=None, cache_size=DEFAULT_CACHE_SIZE):",
             "def from_files(cls, vocab_json, merges_txt, special_tokens=None, cache_size=0):"),
            ("except (ValueError, RecursionError) as error:", "except RecursionError as error:"),
            ('special_tokens, source=f"GPT2Tokenizer: {vocab_json} with {merges_txt}",', "special_tokens,"),
            ('with {merges_txt}",\n                   cache_size=cache_size)', 'with {merges_txt}")'),
            ("return set(self.special_tokens)", "return set(self.special_tokens.values())"),
            ('symbols = [self.byte_char[byte] for byte in piece.encode("utf-8", "surrogatepass")]',
             'symbols = [self.byte_char[byte] for byte in piece.encode("utf-8")]'),
            ("while len(symbols) > 1:", "while len(symbols) > 2:"),
            ("self.ranks.get(adjacent, len(self.ranks))", "self.ranks.get(adjacent, len(self.ranks) - 1)"),
            ("self.cache.move_to_end(piece)", "self.cache.move_to_end(piece, last=False)"),
            ("if self.cache_size:", "if self.cache_size > 1:"),
            ("if len(self.cache) > self.cache_size:", "if len(self.cache) >= self.cache_size:"),
            ("self.cache.popitem(last=False)", "self.cache.popitem()"),
            ("if not isinstance(text, str):", "if not isinstance(text, (str, bytes)):"),
            ('def encode(self, text, *, allowed_special=frozenset(), disallowed_special="all"):',
             'def encode(self, text, *, allowed_special="all", disallowed_special="all"):'),
            ('def encode(self, text, *, allowed_special=frozenset(), disallowed_special="all"):',
             'def encode(self, text, *, allowed_special=frozenset(), disallowed_special=()):'),
            ("enumerate(split_special(text, allowed))", "enumerate(split_special(text, allowed), start=1)"),
            ('return data.decode("utf-8", "surrogatepass")', 'return data.decode("utf-8")'),
            ('return data.decode("utf-8", "replace")', 'return data.decode("utf-8", "ignore")'),
            ("def train(cls, text, vocab_size, special_tokens=(END_OF_TEXT,), cache_size=DEFAULT_CACHE_SIZE):",
             "def train(cls, text, vocab_size, special_tokens=(), cache_size=DEFAULT_CACHE_SIZE):"),
            ("vocab_size < len(alphabet) + len(special_tokens):", "vocab_size <= len(alphabet) + len(special_tokens):"),
            ("split_special(text, special_tokens)[::2]", "split_special(text, special_tokens)"),
            ('words = [[byte_id[byte] for byte in piece.encode("utf-8", "surrogatepass")]',
             'words = [[byte_id[byte] for byte in piece.encode("utf-8")]'),
            ("ids[token] = len(tokens)", "ids[token] = len(tokens) + 1"),
            ("target = vocab_size - len(special_tokens)", "target = vocab_size"),
            ("if len(tokens) > target:", "if len(tokens) >= target:"),
            ("if len(tokens) < target:", "if len(tokens) <= target:"),
            ("del tokens[target:]", "del tokens[target + 1:]"),
            ("enumerate(tokens + list(special_tokens))", "enumerate(list(special_tokens) + tokens)"),
            ("return cls(vocab, merges, special_tokens, cache_size=cache_size)", "return cls(vocab, merges, special_tokens)"),
            ("existing = [path for path in paths if os.path.exists(path)]",
             "existing = [path for path in paths[:1] if os.path.exists(path)]"),
            ("if existing and not overwrite:", "if existing and overwrite:"),
            ("os.makedirs(directory, exist_ok=True)", "os.path.isdir(directory)"),
            ),
    # ------------------------------------------------------------------ GPT-2's strict specials: tiktoken's contract
    *_group(PKG + "tokenizers/special_tokens.py", SPECIAL_TOKENS,
            ("SPECIAL_PATTERN_SETS_KEPT = 64", "SPECIAL_PATTERN_SETS_KEPT = 1"),
            ("SPECIAL_PATTERN_SETS_KEPT = 64", "SPECIAL_PATTERN_SETS_KEPT = 32"),
            ("key=lambda token: (-len(token), token))", "key=lambda token: (len(token), token))"),
            ("key=lambda token: (-len(token), token))", "key=lambda token: -len(token))"),
            ('"|".join(re.escape(token) for token in longest_first)', '"|".join(token for token in longest_first)'),
            ('re.compile("(" + "|".join', 're.compile("(?:" + "|".join'),
            ("if not special_tokens:\n        return [text]", "if special_tokens is None:\n        return [text]"),
            ("disallowed special token {token!r}.", "disallowed special token {token}."),
            ('tokens = frozenset(special_tokens) if value == "all" else frozenset({value})',
             'tokens = frozenset(special_tokens) if value == "all" else frozenset(value)'),
            ("unknown = sorted(tokens - frozenset(special_tokens), key=repr)",
             "unknown = sorted(frozenset(special_tokens) - tokens, key=repr)"),
            ("if unknown:", "if len(unknown) > 1:"),
            ('if isinstance(disallowed_special, str) and disallowed_special == "all":',
             "if isinstance(disallowed_special, str):"),
            ("disallowed = frozenset(special_tokens) - allowed", "disallowed = frozenset(special_tokens)"),
            ("if disallowed:", "if True:"),
            ("found = special_pattern(disallowed).search(text)", "found = special_pattern(disallowed).match(text)"),
            ),
    # ------------------------------------------------------------------ induction heads: previous-token, prefix-matching, copying scores
    *_group(PKG + "models/head_scores.py", HEAD_SCORES,
            ("if alpha.ndim != 4 or alpha.shape[2] != alpha.shape[3]:", "if alpha.ndim != 4:"),
            ("if T < 2:", "if T < 1:"),
            ("alpha[:, :, np.arange(1, T), np.arange(T - 1)]", "alpha[:, :, np.arange(2, T), np.arange(1, T - 1)]"),
            ("alpha[:, :, np.arange(1, T), np.arange(T - 1)]", "alpha[:, :, np.arange(T - 1), np.arange(1, T)]"),
            ("alpha[:, :, np.arange(1, T), np.arange(T - 1)]", "alpha[:, :, np.arange(1, T), np.arange(1, T)]"),
            (".mean(axis=(0, 2))", ".mean(axis=(0, 1))"),
            ("batch, query = np.nonzero(target >= 0)", "batch, query = np.nonzero(target > 0)"),
            ("if batch.size == 0:", "if batch.size < 0:"),
            ("alpha[batch, :, query, target[batch, query]].mean(axis=0)",
             "alpha[batch, :, query, target[batch, query] - 1].mean(axis=0)"),
            ("alpha[batch, :, query, target[batch, query]].mean(axis=0)",
             "alpha[batch, :, target[batch, query], query].mean(axis=0)"),
            ("eigenvalues.real.sum() / np.abs(eigenvalues).sum()", "eigenvalues.real.sum() / np.abs(eigenvalues.real).sum()"),
            ("eigenvalues = np.linalg.eigvals(np.asarray(circuit, dtype=np.float64))",
             "eigenvalues = np.linalg.svd(np.asarray(circuit, dtype=np.float64), compute_uv=False)"),
            ("if model.ln_f is None:", "if model.ln_f is not None:"),
            ("unembedding = (embedding.T if isinstance(model.lm_head, TiedLMHead)",
             "unembedding = (embedding if isinstance(model.lm_head, TiedLMHead)"),
            ("else model.lm_head.weight.data.astype(np.float64))", "else model.lm_head.weight.data.T.astype(np.float64))"),
            ("norm_in, norm_out = _norm_matrix(block.ln1), _norm_matrix(model.ln_f)",
             "norm_in, norm_out = _norm_matrix(model.ln_f), _norm_matrix(block.ln1)"),
            ("kv = head // group", "kv = head % attn.n_kv_heads"),
            ("w_v = attn.w_v.data[:, kv * hs:(kv + 1) * hs]", "w_v = attn.w_v.data[:, head * hs:(head + 1) * hs]"),
            ("w_o = attn.w_o.data[head * hs:(head + 1) * hs]", "w_o = attn.w_o.data[kv * hs:(kv + 1) * hs]"),
            ("embedding @ norm_in @ w_v @ w_o @ norm_out @ unembedding", "embedding @ norm_in @ w_v @ w_o @ unembedding"),
            ("if not isinstance(norm, LayerNorm):", "if norm is None:"),
            ("return (np.eye(C) - np.full((C, C), 1 / C)) @ gain", "return gain @ (np.eye(C) - np.full((C, C), 1 / C))"),
            ("np.full((C, C), 1 / C)", "np.full((C, C), 1 / (C - 1))"),
            ("for layer in range(len(model.blocks))])", "for layer in range(len(model.blocks) - 1)])"),
            ("with model.evaluating():", "if True:"),
            ),
    # ------------------------------------------------------------------ induction heads: the repeated segment, its losses
    *_group(PKG + "tasks/repeated_segment.py", INDUCTION,
            ("def __init__(self, vocab_size=64, seq_len=32, min_length=4, max_length=10, rng=None):",
             "def __init__(self, vocab_size=32, seq_len=32, min_length=4, max_length=10, rng=None):"),
            ("def __init__(self, vocab_size=64, seq_len=32, min_length=4, max_length=10, rng=None):",
             "def __init__(self, vocab_size=64, seq_len=24, min_length=4, max_length=10, rng=None):"),
            ("def __init__(self, vocab_size=64, seq_len=32, min_length=4, max_length=10, rng=None):",
             "def __init__(self, vocab_size=64, seq_len=32, min_length=3, max_length=10, rng=None):"),
            ("def __init__(self, vocab_size=64, seq_len=32, min_length=4, max_length=10, rng=None):",
             "def __init__(self, vocab_size=64, seq_len=32, min_length=4, max_length=8, rng=None):"),
            ("if vocab_size < 2 or", "if vocab_size < 1 or"),
            ("not 2 <= min_length <= max_length", "not 1 <= min_length <= max_length"),
            ("not 2 <= min_length <= max_length", "not 2 <= min_length < max_length"),
            ("2 * max_length > seq_len + 1:", "2 * max_length >= seq_len + 1:"),
            ("2 * max_length > seq_len + 1:", "2 * max_length > seq_len:"),
            ("n_tokens = self.seq_len + 1", "n_tokens = self.seq_len"),
            ("self.rng.integers(self.min_length, self.max_length + 1, size=batch_size)",
             "self.rng.integers(self.min_length, self.max_length, size=batch_size)"),
            ("self.rng.integers(length, n_tokens - length + 1)", "self.rng.integers(length, n_tokens - length)"),
            ("self.rng.integers(length, n_tokens - length + 1)", "self.rng.integers(length + 1, n_tokens - length + 1)"),
            ("self.rng.integers(0, n_tokens - length - distance + 1)", "self.rng.integers(0, n_tokens - length - distance)"),
            ("self.rng.integers(0, n_tokens - length - distance + 1)", "self.rng.integers(1, n_tokens - length - distance + 1)"),
            ("self.rng.integers(0, self.vocab_size, size=(batch_size, n_tokens))",
             "self.rng.integers(0, self.vocab_size - 1, size=(batch_size, n_tokens))"),
            ("repeat = (position >= (start + distance)[:, None])", "repeat = (position > (start + distance)[:, None])"),
            ("(position < (start + distance + length)[:, None])", "(position <= (start + distance + length)[:, None])"),
            ("np.where(repeat, position - distance[:, None], position)",
             "np.where(repeat, position - distance[:, None] + 1, position)"),
            ("inside = (query >= (start + distance)[:, None])", "inside = (query >= (start + distance - 1)[:, None])"),
            ("(query < (start + distance + length - 1)[:, None])", "(query < (start + distance + length)[:, None])"),
            ("np.where(inside, query - distance[:, None] + 1, -1)", "np.where(inside, query - distance[:, None], -1)"),
            ("return np.asarray(earlier_next) >= 0", "return np.asarray(earlier_next) > 0"),
            ),
    *_group(PKG + "objectives/induction.py", INDUCTION,
            ("with model.evaluating():\n        logits = model(x)", "if True:\n        logits = model(x)"),
            ("nll = -TokenLogProbs().forward(logits, y)", "nll = TokenLogProbs().forward(logits, y)"),
            ("return float(nll[~repeated].mean()), float(nll[repeated].mean())",
             "return float(nll[repeated].mean()), float(nll[~repeated].mean())"),
            ("return float(nll[~repeated].mean()), float(nll[repeated].mean())",
             "return float(nll.mean()), float(nll[repeated].mean())"),
            ("return np.where(repeated_part(earlier_next), y, -1)", "return np.where(repeated_part(earlier_next), y, -100)"),
            ("eval_batch, eval_every=25, log=None, log_every=100, repeat_only=True):",
             "eval_batch, eval_every=20, log=None, log_every=100, repeat_only=True):"),
            ("eval_batch, eval_every=25, log=None, log_every=100, repeat_only=True):",
             "eval_batch, eval_every=25, log=None, log_every=50, repeat_only=True):"),
            ("eval_batch, eval_every=25, log=None, log_every=100, repeat_only=True):",
             "eval_batch, eval_every=25, log=None, log_every=100, repeat_only=False):"),
            ("CrossEntropyLoss(ignore_index=-1)", "CrossEntropyLoss()"),
            ("return x, repeat_targets(y, earlier_next) if repeat_only else y",
             "return x, y if repeat_only else repeat_targets(y, earlier_next)"),
            ('return {"random": random_loss, "repeated": repeated_loss}',
             'return {"random": repeated_loss, "repeated": random_loss}'),
            ("if log and (loop.step % log_every == 0 or loop.step == config.max_steps):",
             "if log and loop.step % log_every == 0:"),
            ("grad_clip=config.grad_clip, max_steps", "grad_clip=0.0, max_steps"),
            ("loop.fit(on_eval=say, evaluate_first=True)", "loop.fit(on_eval=say)"),
            ('"random_loss": evaluations[:, 1], "repeated_loss": evaluations[:, 2]',
             '"random_loss": evaluations[:, 2], "repeated_loss": evaluations[:, 1]'),
            ("half_way = (repeated_loss[0] + repeated_loss[-1]) / 2", "half_way = repeated_loss.mean()"),
            ("half_way = (repeated_loss[0] + repeated_loss[-1]) / 2", "half_way = (repeated_loss.max() + repeated_loss[-1]) / 2"),
            ("half_way = (repeated_loss[0] + repeated_loss[-1]) / 2", "half_way = (repeated_loss[0] + repeated_loss.min()) / 2"),
            ("np.argmax(repeated_loss < half_way)", "np.argmax(repeated_loss <= half_way)"),
            ),
    # ================================================================== threads per MPI rank (commands/threads.py)
    *_group(PKG + "commands/threads.py",
            ("tests/test_threads.py",
             "tests/test_train_command.py::test_a_user_error_is_one_line_exit_2_before_any_model"
             "[threads per rank above the cores]",
             "tests/test_distributed.py::test_each_rank_limits_its_blas_threads_to_its_share_of_the_cores",
             "tests/test_distributed.py::test_workers_n_runs_the_command_under_mpiexec_and_trains_as_one_process"),
            ('VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")', 'VARIABLES = ("OPENBLAS_NUM_THREADS",)'),
            ('VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")',
             'VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")'),
            ('if sys.platform == "linux":', 'if sys.platform != "win32":'),
            ("return len(os.sched_getaffinity(0))", "return os.cpu_count()"),
            ("return os.cpu_count() or 1", "return os.cpu_count()"),
            ("return os.cpu_count() or 1", "return os.cpu_count() or 2"),
            ("if threads_per_rank is not None and threads_per_rank > cores_available():",
             "if threads_per_rank is not None and threads_per_rank >= cores_available():"),
            ("if threads_per_rank is not None and threads_per_rank > cores_available():",
             "if threads_per_rank > cores_available():"),
            ("threads = threads_per_rank or max(1, cores_available() // workers)",
             "threads = threads_per_rank or max(0, cores_available() // workers)"),
            ("threads = threads_per_rank or max(1, cores_available() // workers)",
             "threads = threads_per_rank or max(1, -(-cores_available() // workers))"),
            ("threads = threads_per_rank or max(1, cores_available() // workers)",
             "threads = max(1, cores_available() // workers)"),
            ("return {**os.environ, **{variable: str(threads) for variable in VARIABLES}}",
             "return {**{variable: str(threads) for variable in VARIABLES}, **os.environ}"),
            ("return {**os.environ, **{variable: str(threads) for variable in VARIABLES}}",
             "return {variable: str(threads) for variable in VARIABLES}"),
            ("if threads_per_rank is None:\n            return None", "if threads_per_rank is None:\n            pass"),
            ("threadpool_limits(limits=threads_per_rank)", "threadpool_limits(limits=1)"),
            ("threadpool_limits(limits=threads_per_rank)", 'threadpool_limits(limits=threads_per_rank, user_api="blas")'),
            ("host = comm.Split_type(MPI.COMM_TYPE_SHARED)", "host = comm.Split_type(MPI.COMM_TYPE_HWTHREAD)"),
            ("ranks_here = host.Get_size()", "ranks_here = comm.Get_size()"),
            ("host.Free()", "host.Get_size()"),
            ("threads = threads_per_rank or max(1, cores_available() // ranks_here)",
             "threads = threads_per_rank or max(0, cores_available() // ranks_here)"),
            ("threads = threads_per_rank or max(1, cores_available() // ranks_here)",
             "threads = max(1, cores_available() // ranks_here)"),
            ("threadpool_limits(limits=threads)", "threadpool_limits(limits=threads_per_rank)"),
            ("counts = comm.allgather(_blas_threads(threadpool_info()))", "counts = [_blas_threads(threadpool_info())]"),
            ('why = ("--threads-per-rank" if threads_per_rank else',
             'why = ("--threads-per-rank" if threads_per_rank is None else'),
            ("cores on this host / {ranks_here} ranks on it", "cores on this host / {comm.Get_size()} ranks on it"),
            ("each = f\"{_threads(counts[0])} per rank\" if len(set(counts)) == 1 else",
             "each = f\"{_threads(counts[0])} per rank\" if len(counts) == 1 else"),
            ('return f"one job of {comm.Get_size()} MPI ranks', 'return f"one job of {ranks_here} MPI ranks'),
            ('counts = [pool["num_threads"] for pool in pools if pool.get("user_api") == "blas"]',
             'counts = [pool["num_threads"] for pool in pools]'),
            ("return max(counts) if counts else None", "return min(counts) if counts else None"),
            ("return max(counts) if counts else None", "return max(counts) if counts else 0"),
            ("f\"{count} BLAS thread{'s' if count != 1 else ''}\"", 'f"{count} BLAS threads"'),
            ),
    # ================================================================== class grading (exercises/classroom.py)
    # Canvas's columns and the gradebook; one student's row; the summary: each by hand, then the whole class graded
    *_group(PKG + "exercises/classroom.py", [f"tests/test_grading_class.py::test_{name}" for name in (
                "the_gradebook_is_canvass_layout_its_points_possible_the_sum_of_each_exercises_points",
                "a_class_is_graded_into_a_canvas_gradebook_each_bad_folder_costing_its_own_row")],
            ('COLUMNS = ("Student", "ID", "SIS User ID", "Section")', 'COLUMNS = ("Student", "SIS User ID", "ID", "Section")'),
            ('COLUMNS = ("Student", "ID", "SIS User ID", "Section")', 'COLUMNS = ("Student", "ID", "SIS Login ID", "Section")'),
            ("most = {exercise.name: sum(points.values()) for", "most = {exercise.name: len(points) for"),
            ('["Points Possible", "", "", "", *(f', '["Points Possible", "", "", *(f'),
            ('f"{sum(most.values()):g}"]]', 'f"{len(assignment.points):g}"]]'),
            ('lines.append([row["student"], "", row["student"], "", *',
             'lines.append([row["student"], row["student"], "", "", *'),
            ('*(f"{points.get(name, 0):g}" for name in most)', '*(f"{points.get(name, \'\')}" for name in most)'),
            ('f"{sum(points.values()):g}"])', 'f"{sum(most.values()):g}"])'),
            ),
    *_group(PKG + "exercises/classroom.py", [f"tests/test_grading_class.py::test_{name}" for name in (
                "a_students_row_names_their_folder_and_what_stopped_their_grading",
                "a_class_is_graded_into_a_canvas_gradebook_each_bad_folder_costing_its_own_row")],
            ('"student": Path(student).name, "grades": [asdict(grade)', '"student": str(student), "grades": [asdict(grade)'),
            ('"grades": [], "error": f"{type(error).__name__}: {error}"[:500]}',
             '"grades": [], "error": f"{error}"[:500]}'),
            ('"grades": [], "error": f"{type(error).__name__}: {error}"[:500]}',
             '"grades": [], "error": f"{type(error).__name__}: {error}"[:50]}'),
            ("    except ReferenceChanged:\n        raise\n", ""),
            ),
    *_group(PKG + "exercises/classroom.py", [f"tests/test_grading_class.py::test_{name}" for name in (
                "the_summary_counts_full_marks_alone_as_right_and_each_student_once",
                "a_class_is_graded_into_a_canvas_gradebook_each_bad_folder_costing_its_own_row")],
            ('[row for row in rows if not row.get("error")]', '[row for row in rows if row.get("error")]'),
            ('right = sum(g["points"] == g["max_points"] for g in mine)', 'right = sum(g["points"] > 0 for g in mine)'),
            ('f"{exercise.name}: {right} of {len(rows)} right"', 'f"{exercise.name}: {right} of {len(graded)} right"'),
            ('region.rsplit(".", 1)[1]', 'region.rsplit(".", 1)[0]'),
            ('for region in points if not g["region_points"][region])',
             'for region in points if g["region_points"][region])'),
            ('{w for case in g["cases"] for w in case.get("wrong", [])}',
             '[w for case in g["cases"] for w in case.get("wrong", [])]'),
            ('if g["status"] not in ("ok", "wrong"))', 'if g["status"] not in ("ok",))'),
            ("counter.most_common(3)", "counter.most_common(2)"),
            ("counter.most_common(3)", "counter.most_common()"),
            ('("status", statuses)) if counter))', '("status", statuses)) if counter is not None))'),
            ("if errors else []))", "if rows else []))"),
            ),
    # where the gradebook goes; who the students are; the fingerprint that resumes; the class run (on worker tasks
    # that grade nothing, then as the command runs it)
    *_group(PKG + "exercises/classroom.py",
            ("tests/test_grading_class.py::test_the_gradebook_and_the_grades_go_beside_the_class_or_beside_the_gradebook_given",),
            ("folder = Path(folder).resolve()", "folder = Path(folder)"),
            ('folder.with_name(f"{folder.name}.gradebook.csv")', 'folder.with_name(f"{folder.name}.csv")'),
            ('gradebook.with_name(f"{gradebook.stem}.grades")', 'gradebook.with_name(f"{gradebook.name}.grades")'),
            ),
    *_group(PKG + "exercises/classroom.py", [f"tests/test_grading_class.py::test_{name}" for name in (
                "the_students_are_the_sub_folders_by_name_without_hidden_ones_or_files",
                "a_gradebook_without_a_class_and_a_class_without_students_are_refused",
                "a_student_that_kills_its_grading_process_costs_its_own_row")],
            ('if p.is_dir() and not p.name.startswith(".")), key=str)', 'if not p.name.startswith(".")), key=str)'),
            ('if p.is_dir() and not p.name.startswith(".")), key=str)', "if p.is_dir()), key=str)"),
            ('if p.is_dir() and not p.name.startswith(".")), key=str)',
             'if p.is_dir() and not p.name.startswith(".")), key=str, reverse=True)'),
            ("if not found:", "if found is None:"),
            ),
    *_group(PKG + "exercises/classroom.py", [f"tests/test_grading_class.py::test_{name}" for name in (
                "a_grade_is_kept_while_the_assignment_and_every_file_graded_stay_the_same",
                "the_fingerprint_reads_one_byte_past_the_graded_size_and_follows_no_link",
                "a_class_run_again_grades_only_what_was_not_graded_or_changed")],
            ("hashlib.sha256(json.dumps(assignment.to_json(), sort_keys=True).encode())",
             "hashlib.sha256(json.dumps(assignment.reference, sort_keys=True).encode())"),
            ("for relative in sorted({regions[name][0] for name in assignment.points}):",
             "for relative in sorted({regions[name][0] for name in list(assignment.points)[:1]}):"),
            ("if (package / relative).is_file() and not (package / relative).is_symlink():",
             "if (package / relative).is_file():"),
            ("handle.read(SOURCE_LIMIT + 1)", "handle.read(SOURCE_LIMIT)"),
            ),
    *_group(PKG + "exercises/classroom.py", [f"tests/test_grading_class.py::test_{name}" for name in (
                "a_class_run_says_each_students_points_out_of_the_points_and_grades_again_only_what_it_cannot_read",
                "a_class_is_graded_by_as_many_processes_at_once_as_asked",
                "a_student_that_kills_its_grading_process_costs_its_own_row",
                "a_class_run_again_grades_only_what_was_not_graded_or_changed")],
            ("return row if isinstance(row, dict) else {}", "return row"),
            ("with suppress(OSError, ValueError):", "with suppress(OSError):"),
            ("with ProcessPoolExecutor(workers) as pool:", "with ProcessPoolExecutor(1) as pool:"),
            ("grades_dir.mkdir(exist_ok=True)", "grades_dir.mkdir()"),
            ('todo = [s for s in everyone if _saved(grades_dir, s).get("fingerprint") != prints[s]]',
             "todo = list(everyone)"),
            ("({min(jobs, len(todo) or 1)} at a time)", "({jobs} at a time)"),
            ("({min(jobs, len(todo) or 1)} at a time)", "({min(jobs, len(todo))} at a time)"),
            ('points = sum(g["points"] for g in row["grades"])', 'points = sum(g["max_points"] for g in row["grades"])'),
            ("/{sum(assignment.points.values()):g}'}", "/{len(assignment.points):g}'}"),
            ("for _ in _run_pool([student], 1, task, (assignment, *grade_args), done):", "for _ in [student]:"),
            ),
    # ================================================================== the backward contract (core/contract.py and
    # what core/module.py keeps of it): each change run against the contract's tests, tests/test_module.py
    *_group(PKG + "core/contract.py", CONTRACT,
            ("WHOLE_ARRAY_ELEMENTS = 4096 ", "WHOLE_ARRAY_ELEMENTS = 64 "),
            ("WHOLE_ARRAY_ELEMENTS = 4096 ", "WHOLE_ARRAY_ELEMENTS = 8192 "),
            ('NOT_RUN = "no forward returned"', "NOT_RUN = None"),
            ('if "forward" in cls.__dict__:', 'if "forward" in cls.__dict__ and "backward" in cls.__dict__:'),
            ('if "backward" in cls.__dict__:', 'if "backward" in cls.__dict__ and "forward" in cls.__dict__:'),
            ("for index, value in enumerate(inputs)] + list(options.items())", "for index, value in enumerate(inputs)]"),
            ("for index, value in enumerate(inputs)] + list(options.items())",
             "for index, value in enumerate(inputs, 1)] + list(options.items())"),
            ("self._input_fingerprints = watched + _fingerprints(arrays, watched)",
             "self._input_fingerprints = _fingerprints(arrays, watched)"),
            ("self._input_fingerprints = _fingerprints(arrays, [])\n", "self._input_fingerprints += _fingerprints(arrays, [])\n"),
            ("        self._output_shape = NOT_RUN                    # until this forward returns\n", ""),
            ("self._output_shape = out.shape if isinstance(out, np.ndarray) else None",
             "self._output_shape = out.shape if isinstance(out, np.ndarray) else NOT_RUN"),
            ("if entry[1]() is not out]", "if entry[1]() is not None]"),
            ("if isinstance(value, np.ndarray) and not any(value is array for array in seen)]",
             "if isinstance(value, np.ndarray) and not all(value is array for array in seen)]"),
            ("if isinstance(value, np.ndarray) and not any(value is array for array in seen)]",
             "if isinstance(value, np.ndarray) and value.ndim > 0 and not any(value is array for array in seen)]"),
            ("list(inspect.signature(backward).parameters)[1:]", "list(inspect.signature(backward).parameters)[2:]"),
            ("if type(self).backward is checking:", "if True:"),
            ("if output_shape is not None and (args or dout_name in kwargs):", "if output_shape is not None and args:"),
            ("if array is not None and fingerprint(array) != seen:", "if array is not None and fingerprint(array) is not seen:"),
            ('what = f"input {where}" if where.isdigit() else f"argument {where}="', 'what = f"input {where}"'),
            ("if array.size <= WHOLE_ARRAY_ELEMENTS:", "if array.size < WHOLE_ARRAY_ELEMENTS:"),
            ("if array.size <= WHOLE_ARRAY_ELEMENTS:", "if array.nbytes <= WHOLE_ARRAY_ELEMENTS:"),
            ("if not array.flags.c_contiguous:                    # a transposed view",
             "if array.flags.f_contiguous:                    # a transposed view"),
            ("key=lambda axis: -array.strides[axis]))", "key=lambda axis: array.strides[axis]))"),
            ("return array.take(flat_positions).tobytes()", "return array.ravel()[::array.size // 16].tobytes()"),
            ("n_rows, n_columns = math.prod(shape[:-1]), shape[-1]", "n_rows, n_columns = shape[0], shape[-1]"),
            ("_scattered(n_columns, n_rows, math.sqrt(2))", "_scattered(n_columns, n_rows, 2.0)"),
            ("_scattered(n_columns, n_rows, math.sqrt(2))", "_scattered(n_columns, n_columns, math.sqrt(2))"),
            ("_scattered(n_rows, n_columns, (1 + math.sqrt(5)) / 2)", "_scattered(n_rows, n_columns, 0.5)"),
            ("np.arange(n_columns)])", "_scattered(n_columns, n_columns, (1 + math.sqrt(5)) / 2)])"),
            ("if len(shape) > 1 else ()", "if len(shape) > 2 else ()"),
            ("return (np.arange(1, count + 1) * irrational % 1 * size)", "return (np.arange(1, count + 1) * irrational % 1 * (size - 1))"),
            ),
    *_group(PKG + "core/module.py", CONTRACT,
            ("        keep_contract(cls)\n", ""),
            ("if dtype.kind != \"f\":", "if dtype.kind not in \"fc\":"),
            ("if dtype.kind != \"f\":", "if dtype.kind not in \"fiu\":"),
            ('        self._check_float(dout, "dout")\n', ""),
            ("if np.shape(dout) != tuple(expected_shape):", "if np.size(dout) != np.prod(expected_shape):"),
            ("if np.shape(dout) != tuple(expected_shape):", "if len(np.shape(dout)) != len(expected_shape):"),
            ("if getattr(self, name, None) is None:", "if not hasattr(self, name):"),
            ),
    # ================================================================== FlashAttention-2's tiled attention, plain
    *_group(PKG + "variants/tiled_attention.py", TILED,
            ("new_max = np.maximum(row_max, scores.max(axis=-1, keepdims=True))",
             "new_max = scores.max(axis=-1, keepdims=True)"),
            ("shift = np.where(np.isfinite(new_max), new_max, 0)                  #", "shift = new_max                  #"),
            ("rescale = np.exp(row_max - shift)                                   #",
             "rescale = np.exp(row_max - new_max)                                   #"),
            ("row_sum = rescale * row_sum + weights.sum(axis=-1, keepdims=True)",
             "row_sum = row_sum + weights.sum(axis=-1, keepdims=True)"),
            ("acc = rescale * acc + weights @ values", "acc = acc + weights @ values"),
            ("seen = row_sum > 0 ", "seen = row_sum >= 0 "),
            ("safe_sum = np.where(seen, row_sum, 1)", "safe_sum = row_sum"),
            ("lse = np.where(seen, shift + np.log(safe_sum), np.inf)", "lse = np.where(seen, shift + np.log(safe_sum), -np.inf)"),
            ("lse = np.where(seen, shift + np.log(safe_sum), np.inf)", "lse = np.where(seen, shift - np.log(safe_sum), np.inf)"),
            ("def __init__(self, causal=False, scale=None, block_size=64):",
             "def __init__(self, causal=False, scale=None, block_size=128):"),
            ("def __init__(self, causal=False, scale=None, block_size=64):",
             "def __init__(self, causal=True, scale=None, block_size=64):"),
            ("or block_size < 1:", "or block_size < 0:"),
            ("if isinstance(block_size, bool) or not", "if not"),
            ("self.used_scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale",
             "self.used_scale = v.shape[-1] ** -0.5 if self.scale is None else self.scale"),
            ("self.used_scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale",
             "self.used_scale = q.shape[-1] ** -0.5 if not self.scale else self.scale"),
            ("self.q_scaled = self.used_scale * q.astype(np.result_type(q, k), copy=False)",
             "self.q_scaled = self.used_scale * q"),
            ("out = np.zeros((*q.shape[:-1], v.shape[-1]), np.result_type(self.q_scaled, v))",
             "out = np.empty((*q.shape[:-1], v.shape[-1]), np.result_type(self.q_scaled, v))"),
            ("out = np.zeros((*q.shape[:-1], v.shape[-1]), np.result_type(self.q_scaled, v))",
             "out = np.zeros((*q.shape[:-1], v.shape[-1]), self.q_scaled.dtype)"),
            ("lse = np.full((*q.shape[:-1], 1), np.inf, self.q_scaled.dtype)",
             "lse = np.full((*q.shape[:-1], 1), -np.inf, self.q_scaled.dtype)"),
            ("lse = np.full((*q.shape[:-1], 1), np.inf, self.q_scaled.dtype)",
             "lse = np.zeros((*q.shape[:-1], 1), self.q_scaled.dtype)"),
            ("lse = np.full((*q.shape[:-1], 1), np.inf, self.q_scaled.dtype)",
             "lse = np.full((*q.shape[:-1], 1), np.inf, q.dtype)"),
            ("row_max = np.full((*q_i.shape[:-1], 1), -np.inf, dtype=q_i.dtype)",
             "row_max = np.zeros((*q_i.shape[:-1], 1), dtype=q_i.dtype)"),
            ("np.result_type(q_i, self.v))   #       o", "self.v.dtype)   #       o"),
            ("row_sum = np.zeros_like(row_max)", "row_sum = np.ones_like(row_max)"),
            ("D = (dout * self.out).sum(axis=-1, keepdims=True)", "D = dout.sum(axis=-1, keepdims=True)"),
            ("ds_type = np.result_type(q_scaled, v, dout)", "ds_type = np.result_type(q_scaled, dout)"),
            ("return ds_type, ds_type, np.result_type(q_scaled, dout)", "return ds_type, ds_type, np.result_type(v, dout)"),
            ("dq_scaled = np.zeros(self.q.shape, dq_type)", "dq_scaled = np.zeros(self.q.shape, self.q.dtype)"),
            ("dv = np.zeros(self.v.shape, dv_type)", "dv = np.zeros(self.v.shape, self.v.dtype)"),
            ("weights_ij = np.exp(scores_ij - self.lse[..., rows, :])", "weights_ij = np.exp(scores_ij + self.lse[..., rows, :])"),
            ("dv_j = dv_j + np.swapaxes(weights_ij, -1, -2) @ dout_i", "dv_j = np.swapaxes(weights_ij, -1, -2) @ dout_i"),
            ("dscores_ij = weights_ij * (dweights_ij - D[..., rows, :])", "dscores_ij = weights_ij * (dweights_ij + D[..., rows, :])"),
            ("dscores_ij = weights_ij * (dweights_ij - D[..., rows, :])", "dscores_ij = weights_ij * dweights_ij"),
            ("dq_scaled[..., rows, :] += dscores_ij @ k_j", "dq_scaled[..., rows, :] = dscores_ij @ k_j"),
            ("dk_j = dk_j + np.swapaxes(dscores_ij, -1, -2) @ q_i", "dk_j = dk_j + np.swapaxes(dscores_ij, -1, -2) @ self.q[..., rows, :]"),
            ("dq = self.used_scale * dq_scaled", "dq = dq_scaled"),
            ("scores_ij = scores_ij + self.bias[..., rows, cols]", "scores_ij = scores_ij + self.bias[..., cols, rows]"),
            ("scores_ij = np.where(self.mask[..., rows, cols], scores_ij, -np.inf)",
             "scores_ij = np.where(self.mask[..., rows, cols], scores_ij, -1e9)"),
            ("query_blocks = blocks(Tq, block_size, start=max(0, -offset))", "query_blocks = blocks(Tq, block_size, start=max(0, offset))"),
            ("before = blocks(max(0, offset), block_size)", "before = blocks(max(0, offset - 1), block_size)"),
            ("key_blocks = before + [slice(rows.start + offset, rows.stop + offset)",
             "key_blocks = before + [slice(rows.start + offset, rows.stop + offset - 1)"),
            ("side = query_blocks[0].stop - query_blocks[0].start if query_blocks else 0",
             "side = query_blocks[-1].stop - query_blocks[-1].start if query_blocks else 0"),
            ("keys_seen_by=[range(n_before + i + 1) for i in range(n_rows)]", "keys_seen_by=[range(n_before + i) for i in range(n_rows)]"),
            ("keys_seen_by=[range(n_before + i + 1) for i in range(n_rows)]",
             "keys_seen_by=[range(n_before + i + 2) for i in range(n_rows)]"),
            ("queries_seeing=[range(max(0, j - n_before), n_rows)", "queries_seeing=[range(max(0, j - n_before + 1), n_rows)"),
            ("queries_seeing=[range(max(0, j - n_before), n_rows)", "queries_seeing=[range(0, n_rows)"),
            ("diagonal_of=[n_before + i for i in range(n_rows)]", "diagonal_of=[n_before + i + 1 for i in range(n_rows)]"),
            ("return self.diagonal_of[i] == j", "return self.diagonal_of[i] <= j"),
            ("[slice(first, min(first + block_size, stop)) for first", "[slice(first, first + block_size) for first"),
            ("for first in range(start, stop, block_size)]", "for first in range(start, stop - 1, block_size)]"),
            ('        layer._check_float(bias, "bias")\n', ""),
            ("mask = None if mask is None else np.broadcast_to(mask, scores_shape)", "mask = mask"),
            ),
    # ================================================================== its fast form (fast/tiled_attention.py)
    *_group(PKG + "fast/tiled_attention.py", FAST_TILED,
            ("new_max = np.maximum(row_max, np.max(scores, axis=-1, keepdims=True))",
             "new_max = np.max(scores, axis=-1, keepdims=True)"),
            ("    shift = np.where(np.isfinite(new_max), new_max, 0)\n    scores -= shift",
             "    shift = new_max\n    scores -= shift"),
            ("rescale = np.exp(row_max - shift)                                           # exp(m - m')",
             "rescale = np.exp(row_max - new_max)                                           # exp(m - m')"),
            ("row_sum = rescale * row_sum + sum_last_axis(weights)", "row_sum = row_sum + sum_last_axis(weights)"),
            ("    acc *= rescale\n", ""),
            ("acc += weights @ values", "acc = weights @ values"),
            ("    workers = None\n", "    workers = 1\n"),
            ("np.where(mask, 0, -np.inf).astype(self.q_scaled.dtype)", "np.where(mask, -np.inf, 0).astype(self.q_scaled.dtype)"),
            ("costs = [len(keys) for keys in self.tiling.keys_seen_by]", "costs = [1 for keys in self.tiling.keys_seen_by]"),
            ("costs = [len(queries) for queries in self.tiling.queries_seeing]",
             "costs = [1 for queries in self.tiling.queries_seeing]"),
            ("dk = np.empty_like(self.k, dtype=dk_type)", "dk = np.empty_like(self.k)"),
            ("dv = np.empty_like(self.v, dtype=dv_type)", "dv = np.empty_like(self.v)"),
            ("dq_scaled = np.zeros_like(self.q, dtype=dq_type)", "dq_scaled = np.zeros_like(self.q)"),
            ("empty = np.zeros_like(self.q, dtype=dq_type)", "empty = np.ones_like(self.q, dtype=dq_type)"),
            ("dk_j = np.zeros((*k_j.shape[:-1], self.k.shape[-1]), dk_type)",
             "dk_j = np.zeros((*k_j.shape[:-1], self.k.shape[-1]), self.k.dtype)"),
            ("dv_j = np.zeros((*k_j.shape[:-1], self.v.shape[-1]), dv_type)",
             "dv_j = np.zeros((*k_j.shape[:-1], self.v.shape[-1]), self.v.dtype)"),
            ("        for terms in others:\n            dq_scaled += terms\n", ""),
            ("dq_scaled *= self.used_scale ", "dq_scaled *= 1.0 "),
            ("del self.D, self.dout, self.v_t", "del self.D"),
            ("weights_ij -= self.lse[..., rows, :]", "weights_ij += self.lse[..., rows, :]"),
            ("dscores_ij -= self.D[..., rows, :]", "dscores_ij += self.D[..., rows, :]"),
            ("dq_scaled[..., rows, :] += dscores_ij @ k_j", "dq_scaled[..., rows, :] = dscores_ij @ k_j"),
            ("dk_j += np.swapaxes(dscores_ij, -1, -2) @ q_i", "dk_j = np.swapaxes(dscores_ij, -1, -2) @ q_i"),
            ("return blas_threads() if self.workers is None else self.workers", "return 1 if self.workers is None else self.workers"),
            ("parts, loads = [[] for _ in range(max(1, n_parts))], [0] * max(1, n_parts)",
             "parts, loads = [[] for _ in range(n_parts)], [0] * max(1, n_parts)"),
            ("key=lambda index: -costs[index])", "key=lambda index: costs[index])"),
            ("least = loads.index(min(loads))", "least = loads.index(max(loads))"),
            ("loads[least] += costs[index]", "loads[least] += 1"),
            ("return [part for part in parts if part]", "return parts"),
            ("if len(parts) <= 1:", "if len(parts) < 1:"),
            ("with _blas().limit(limits=1):", "with _blas().limit(limits=2):"),
            ("            wait(others)                                # no thread", "            pass                                # no thread"),
            ("return max([1] + [controller.num_threads", "return min([1] + [controller.num_threads"),
            ("os.register_at_fork(after_in_child=_pool.cache_clear)", "pass"),
            ("FAST_FORMS = {TiledAttention: FastTiledAttention}", "FAST_FORMS = {}"),
            ),
    # ================================================================== the fast dense attention (fast/attention.py)
    *_group(PKG + "fast/attention.py", FAST_ATTENTION,
            ("TILED_FROM = 256 ", "TILED_FROM = 512 "),
            ("TILE_SIZE = 128 ", "TILE_SIZE = 64 "),
            ("WIDE_TILES_FROM = 1024 ", "WIDE_TILES_FROM = 2048 "),
            ("WIDE_TILE_SIZE = 256\n", "WIDE_TILE_SIZE = 512\n"),
            ("    tile_size = TILE_SIZE\n", "    tile_size = WIDE_TILE_SIZE\n"),
            ("np.where(causal_mask(Tq, Tk), 0.0, -np.inf)", "np.where(causal_mask(Tk, Tq).T, 0.0, -np.inf)"),
            ("    bias.flags.writeable = False\n", ""),
            ("scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale\n        Tq, Tk",
             "scale = v.shape[-1] ** -0.5 if self.scale is None else self.scale\n        Tq, Tk"),
            ("tile = self.tile_for(Tk)", "tile = self.tile_for(Tq)"),
            ("self.tiled, self.alpha = FastTiledAttention(self.causal, self.scale, tile), None",
             "self.tiled = FastTiledAttention(self.causal, self.scale, tile)"),
            ("self.tiled, self.alpha = FastTiledAttention(self.causal, self.scale, tile), None",
             "self.tiled, self.alpha = FastTiledAttention(self.causal, None, tile), None"),
            ("        self.tiled = None\n", ""),
            ("scores *= scale ", "scores /= scale "),
            ("if self.causal and mask is None:", "if self.causal:"),
            ("if Tk < self.tiled_from:", "if Tk <= self.tiled_from:"),
            ("return self.wide_tile_size if Tk >= self.wide_tiles_from else self.tile_size",
             "return self.wide_tile_size if Tk > self.wide_tiles_from else self.tile_size"),
            ("return self.wide_tile_size if Tk >= self.wide_tiles_from else self.tile_size",
             "return self.tile_size if Tk >= self.wide_tiles_from else self.wide_tile_size"),
            ("dv = np.matmul(np.swapaxes(self.alpha, -1, -2), dout,", "dv = np.matmul(np.swapaxes(self.alpha, -1, -2), -dout,"),
            ("out=np.empty_like(self.v, dtype=np.result_type(self.alpha, dout)))", "out=np.empty_like(self.v))"),
            ("dscores *= self.used_scale", "dscores *= self.used_scale ** 2"),
            ("dq = np.matmul(dscores, self.k, out=np.empty_like(self.q, dtype=np.result_type(dscores, self.k)))",
             "dq = np.matmul(dscores, self.k, out=np.empty_like(self.q))"),
            ("FAST_FORMS = {ScaledDotProductAttention: FastScaledDotProductAttention}", "FAST_FORMS = {}"),
            ),
]

# Changes no test can see, each with the reason; the sweep still makes them, and its table says if one is caught
EQUIVALENT = [
    Mutation(PKG + "layers/ppo_losses.py", "mask = np.ones(shape) if mask is None",
             "mask = np.full(shape, 2.0) if mask is None", PPO_LOSSES,
             equivalent="the mask enters both losses and their gradients only as mask / sum(mask), so a mask of "
                        "any constant value scores every position alike"),
    Mutation(PKG + "tokenizers/gpt2.py", "if self.cache_size:", "if True:", GPT2_TOKENIZER,
             equivalent="with cache_size 0 each entry is stored and at once dropped (one entry is more than 0), so "
                        "the cache stays empty and every pre-token goes through bpe, as with the guard; only time differs"),
    # class grading (exercises/classroom.py)
    Mutation(PKG + "exercises/classroom.py", 'open(partial, "w", newline="", encoding="utf-8")',
             'open(partial, "w", encoding="utf-8")',
             ("tests/test_grading_class.py::test_the_gradebook_is_canvass_layout_its_points_possible_the_sum_of_each_"
              "exercises_points",),
             equivalent="the gradebook is written on Linux alone (exercises grade refuses other systems before it "
                        "reads anything), where text mode translates no newline: csv's \\r\\n is written either way"),
    Mutation(PKG + "exercises/classroom.py", 'lines, graded = [], [row for row in rows if not row.get("error")]',
             "lines, graded = [], list(rows)",
             ("tests/test_grading_class.py::test_the_summary_counts_full_marks_alone_as_right_and_each_student_once",),
             equivalent="a row with an error holds no grades (grade_student's and the died process's rows both say "
                        '"grades": []), so the rows it leaves out add nothing to any count; "N of M right" counts '
                        "every row either way"),
    # ------------------------------------------------------------------ the backward contract, tiled attention
    Mutation(PKG + "core/contract.py", "if array.flags.c_contiguous:", "if False:", CONTRACT,
             equivalent="fancy indexing (array[positions]) reads the same elements as take(flat_positions) on a "
                        "contiguous array, in the same order; take is only faster"),
    Mutation(PKG + "core/contract.py", "@functools.lru_cache(maxsize=256)", "@functools.lru_cache(maxsize=0)", CONTRACT,
             equivalent="the cache only keeps the positions of a shape for the next call; without it they are "
                        "computed again, the same numbers"),
    Mutation(PKG + "variants/tiled_attention.py", "shift = np.where(row_max > -np.inf, row_max, 0)", "shift = row_max",
             TILED,
             equivalent="row_max is -inf only in a row that saw no finite score, whose row_sum is 0, so `seen` is "
                        "False there and np.where takes +inf; -inf + log(1) raises no floating-point warning"),
    Mutation(PKG + "variants/tiled_attention.py", "np.full((*q_i.shape[:-1], 1), -np.inf, dtype=q_i.dtype)",
             "np.full((*q_i.shape[:-1], 1), -np.inf, dtype=self.q.dtype)", TILED,
             equivalent="m and l are rebound after every block, np.maximum promoting the first block's maximum to "
                        "the scores' dtype; a query block that sees no key block keeps m = -inf and l = 0, exact in "
                        "either dtype, and gets out 0 and lse +inf either way (o's dtype does not follow m's)"),
    Mutation(PKG + "variants/tiled_attention.py", "self.tiling.diagonal_mask[:size, :size]",
             "self.tiling.diagonal_mask[-size:, -size:]", TILED,
             equivalent="the diagonal mask is a square lower-triangular matrix, and every square block on its "
                        "diagonal, the top-left corner or the bottom-right one, is the same lower-triangular mask"),
    Mutation(PKG + "fast/tiled_attention.py", "self.diagonal_bias[:size, :size]", "self.diagonal_bias[-size:, -size:]",
             FAST_TILED,
             equivalent="as in the plain form: every square block on the diagonal of a lower-triangular bias is "
                        "the same lower-triangular bias"),
    Mutation(PKG + "fast/tiled_attention.py", "_pool(len(parts) - 1).submit", "_pool(len(parts)).submit", FAST_TILED,
             equivalent="the pool gets one thread more than it is given parts; the spare thread stays idle, and the "
                        "same parts run in the same order (dq's terms summed as before)"),
    Mutation(PKG + "fast/tiled_attention.py", "np.where(mask, 0, -np.inf).astype(self.q_scaled.dtype)",
             "np.where(mask, 0, -np.inf)", FAST_TILED,
             equivalent="the bias is only added in place to the scores (`scores_ij += ...`), which keeps the "
                        "scores' dtype; 0 and -inf are exact in float32 and float64, so the sums are the same"),
    Mutation(PKG + "fast/attention.py", "bias = np.asfortranarray(np.where(causal_mask(Tq, Tk), 0.0, -np.inf).astype(dtype))",
             "bias = np.where(causal_mask(Tq, Tk), 0.0, -np.inf).astype(dtype)", FAST_ATTENTION,
             equivalent="only the bias's memory layout changes (C order instead of the scores' column order); "
                        "`scores += bias` adds the same numbers, only more slowly"),
]
MUTATIONS += EQUIVALENT


# ----------------------------------------------------------------------------------------------- reading the list
def test_path(test):
    """The file of a pytest argument (a file, a node id, or --deselect=node id)."""
    return test.removeprefix("--deselect=").split("::")[0]


def line_of(mutation, root=REPO):
    """The 1-based line where the fragment starts; ValueError unless it occurs exactly once."""
    text = (root / mutation.file).read_text(encoding="utf-8")
    count = text.count(mutation.original)
    if count != 1:
        raise ValueError(f"{mutation.file}: the fragment {mutation.original!r} occurs {count} times (expected once)")
    return text[:text.index(mutation.original)].count("\n") + 1


def describe(mutation):
    """The change as one Markdown cell: `original` -> `replacement`, newlines shown as ⏎."""
    def code(text):
        return "`" + " ".join(part.strip() for part in text.split("\n")).replace("|", "\\|") + "`"
    return f"{code(mutation.original)} → {code(mutation.replacement)}"


def selected(pattern):
    return [m for m in MUTATIONS if not pattern or re.search(pattern, f"{m.file} {m.original} {m.replacement}")]


# ----------------------------------------------------------------------------------------------- running
def run_tests(root, tests, timeout):
    """(passed, first failing node id or a short reason) for pytest on `tests` in `root`."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    shutil.rmtree(root / ".hypothesis", ignore_errors=True)        # no replay of another mutation's failures
    command = ["nice", "-n", "10", sys.executable, *PYTEST, *tests]
    try:
        result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout, encoding="utf-8")
    except subprocess.TimeoutExpired:
        return False, f"timeout after {timeout} s"
    if result.returncode == 0:
        return True, ""
    found = re.search(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", result.stdout, re.MULTILINE)
    return False, found[1] if found else f"pytest exit status {result.returncode}: " + result.stdout[-200:].strip()


def sweep(mutations, timeout, log):
    """Rows (file:line, change, verdict) with every mutation applied in turn to a copy of the repository."""
    with tempfile.TemporaryDirectory(prefix="pin_sweep-") as folder:
        root = Path(folder) / "repo"
        shutil.copytree(REPO, root, ignore=COPY_IGNORED)
        for tests in sorted({m.tests for m in mutations}):
            passed, failure = run_tests(root, tests, timeout)
            if not passed:
                sys.exit(f"pin_sweep: the unchanged tests fail ({failure}); fix them before sweeping")
        rows = []
        for number, mutation in enumerate(mutations, 1):
            path, start = root / mutation.file, time.monotonic()
            original = path.read_text(encoding="utf-8")
            line = line_of(mutation, root)
            try:
                path.write_text(original.replace(mutation.original, mutation.replacement), encoding="utf-8")
                passed, failure = run_tests(root, mutation.tests, timeout)
            finally:
                path.write_text(original, encoding="utf-8")
            verdict = failure if not passed else f"equivalent: {mutation.equivalent}" if mutation.equivalent \
                else "SURVIVED"
            if mutation.equivalent and not passed:
                verdict += " (listed as equivalent: move it back to MUTATIONS)"
            rows.append((f"{mutation.file}:{line}", describe(mutation), verdict))
            log(f"[{number}/{len(mutations)}] {mutation.file}:{line} {verdict} ({time.monotonic() - start:.0f} s)")
    return rows


def table(rows):
    lines = ["| file:line | change | caught by (first failing test) |", "| --- | --- | --- |"]
    lines += [f"| {where} | {change} | {verdict.replace('|', '&#124;')} |" for where, change, verdict in rows]
    survived = sum(verdict == "SURVIVED" for *_, verdict in rows)
    equivalent = sum(verdict.startswith("equivalent: ") for *_, verdict in rows)
    lines += ["", f"{len(rows)} mutations tried: {len(rows) - survived - equivalent} caught, {equivalent} equivalent "
                  f"(no test can see them), {survived} survived."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", metavar="PATTERN", help="only mutations whose file or change matches this regex")
    parser.add_argument("--list", action="store_true", help="list the mutations; run nothing")
    parser.add_argument("--out", metavar="FILE", help="also write the table to FILE")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per pytest run (default 300)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("pin_sweep: stopped"))   # the copy restored and removed
    mutations = selected(args.only)
    if not mutations:
        parser.error(f"--only {args.only!r} matches no mutation")
    if args.list:
        for mutation in mutations:
            print(f"{mutation.file}:{line_of(mutation)}\t{describe(mutation)}\t{' '.join(mutation.tests)}")
        return 0
    rows = sweep(mutations, args.timeout, log=lambda message: print(message, file=sys.stderr, flush=True))
    text = table(rows)
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
