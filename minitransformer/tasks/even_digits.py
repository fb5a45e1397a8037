"""InstructGPT's toy task, generated: prompts, careless demonstrations, labelers who prefer even digits.

A prompt is `<s> d d :`, two digits after a start token and before a colon. The demonstrators answer with four
digits that count on from the prompt's last digit (`<s> 3 4 : 5 6 7 8`), but carelessly: each digit is right with
probability `p_follow`, else a random digit. The labelers, shown two answers to one prompt, prefer the one with
more even digits (a rule the reward model must discover from the comparisons alone). objectives/instruct.py
trains on it.

Token layout: digits 0-9 are ids 0-9, `<s>` is 10, `:` is 11 (V = 12).
"""

import numpy as np

from ..core.random import as_generator

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
