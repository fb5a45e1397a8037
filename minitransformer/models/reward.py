"""A GPT with a scalar head: InstructGPT's reward model and PPO's value head (Ouyang et al. 2022, §3.5;
survey note §7, Fig. 5).

    ids (B, T) -> GPT.hidden -> (B, T, C) -> Linear(C, 1) -> (B, T)     ValueModel: V_t at every position
                                          -> last position -> (B,)      RewardModel: one score per sequence

InstructGPT starts the reward model from the fine-tuned (SFT) model with its unembedding layer replaced by a
projection to one number; here the GPT passed in is that model (a copy of the SFT GPT), and its LM head is
simply not used. The reward is read at the last position, the only one that has seen the whole completion.
Left out: padding (every sequence of a batch has the same length, so the last position is the last token).
"""

import numpy as np

from ..core.module import Module
from ..core.random import as_generator
from ..layers.linear import Linear
from .gpt import GPT


class ValueModel(Module):
    """A GPT and a scalar head at every position: ids int (B, T) -> values (B, T).

    Args:
        gpt: the GPT body (its parameters are trained too; its LM head is unused).
        dtype, rng: for the new head.
    """

    def __init__(self, gpt, dtype=np.float64, rng=None):
        if not isinstance(gpt, GPT):
            raise TypeError(f"{type(self).__name__} expected a GPT, got {type(gpt).__name__}")
        self.gpt = gpt
        self.head = Linear(gpt.config["d_model"], 1, dtype=dtype, rng=as_generator(rng))

    @property
    def vocab_size(self):
        return self.gpt.vocab_size

    def forward(self, ids):
        """ids int (B, T) -> values (B, T)."""
        return self.head(self.gpt.hidden(ids))[..., 0]                    # (B, T, C) -> (B, T, 1) -> (B, T)

    def backward(self, dvalues):
        """dvalues (B, T) -> None; dhidden = dvalues W_head^T at every position."""
        self.gpt.hidden_backward(self.head.backward(np.asarray(dvalues)[..., None]))
        return None

    def __repr__(self):
        return f"{type(self).__name__}({self.gpt!r})"


class RewardModel(ValueModel):
    """A GPT and a scalar head on the last position: ids int (B, T) -> rewards (B,)."""

    def forward(self, ids):
        """ids int (B, T) -> rewards (B,): the head applied to the last position's hidden state only."""
        hidden = self.gpt.hidden(ids)                                     # (B, T, C)
        self.hidden_shape = hidden.shape
        return self.head(hidden[:, -1])[:, 0]                             # (B, C) -> (B, 1) -> (B,)

    def backward(self, drewards):
        """drewards (B,) -> None; only the last position's hidden state receives a gradient."""
        dhidden = np.zeros(self.hidden_shape, dtype=self.head.weight.dtype)   # (B, T, C)
        dhidden[:, -1] = self.head.backward(np.asarray(drewards)[:, None])    # (B, C)
        self.gpt.hidden_backward(dhidden)
        return None
