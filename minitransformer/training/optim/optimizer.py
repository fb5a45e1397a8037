"""What every optimizer shares: parameter groups, per-parameter state, and saving that state.

An optimizer holds a list of *groups*; each group is a dict with its
`params` and its own `weight_decay`. `parameter_groups(model, ...)` builds the
usual two groups from the flags each layer sets on its parameters
(`Parameter.decay`, `Parameter.embedding`): matrices that are decayed, and the
parameters that are not (biases, LayerNorm's gamma and beta, and embedding
tables unless asked), the split that AdamW papers and nanoGPT use: decaying a
bias or a LayerNorm gain towards zero has no regularising meaning, it only
shifts or shrinks features.

`step()` walks the parameters one at a time and hands each, with its own
state (moments, velocity), to the subclass's `_update`, which writes the
paper's update rule one line per step. The learning rate is the attribute
`lr`, set by the trainer from a schedule before each `step()`. State is kept
per parameter in the order of the groups, so `state_dict()` and
`load_state_dict()` round-trip bit-exactly for checkpoints.

The speed form (one flat buffer for all parameters, updated in cache-sized
chunks, the clipping factor folded into the update) is `optim/fast.py`, a
subclass proven equal to this one (tests/test_optim.py).

Left out: closures, sparse gradients, per-group learning rates.
"""

import numpy as np

from .clipping import clip_grad_norm


def parameter_groups(model, weight_decay, decay_embeddings=False):
    """Split a model's parameters into a decayed and a non-decayed group.

    Args:
        model: a Module.
        weight_decay: the decay of the first group.
        decay_embeddings: also decay embedding tables (nanoGPT does: it decays every 2-D tensor).
    Returns:
        [{"params": decayed, "weight_decay": weight_decay}, {"params": the rest, "weight_decay": 0.0}]
    """
    decayed, plain = [], []
    for _, param in model.named_parameters():
        decays = param.decay and (decay_embeddings or not param.embedding)
        (decayed if decays else plain).append(param)
    return [{"params": decayed, "weight_decay": float(weight_decay)}, {"params": plain, "weight_decay": 0.0}]


class Optimizer:
    """Base class: holds groups and per-parameter state; subclasses write `_update`.

    Args:
        params: a list of Parameters, or a list of group dicts {"params": [...], "weight_decay": w}.
        lr: the learning rate (the trainer overwrites it each step from a schedule).
        weight_decay: default decay for groups that do not give their own.
    """

    state_names = ()                                   # per-parameter buffers, e.g. ("m", "v")

    def __init__(self, params, lr, weight_decay=0.0):
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        self.groups = [{"params": list(group["params"]),
                        "weight_decay": float(group.get("weight_decay", weight_decay))} for group in params]
        self.lr = float(lr)
        self.step_count = 0
        self.state = [{name: np.zeros_like(param.data) for name in self.state_names}    # per parameter
                      for param in self.parameters()]

    @property
    def rule(self):
        """The update rule's name, what a checkpoint records: the class name ("AdamW"); a fast form gives its
        plain parent's, since it computes the same numbers (a checkpoint does not know which form wrote it)."""
        return type(self).__name__

    def parameters(self):
        return [param for group in self.groups for param in group["params"]]

    def gradients(self):
        """Every parameter's gradient (the arrays themselves)."""
        return [param.grad for param in self.parameters()]

    def clip_gradients(self, max_norm):
        """Global-norm clipping of every gradient, in place (`clip_grad_norm`); returns the norm before it."""
        return clip_grad_norm(self.parameters(), max_norm)

    def step(self):
        """Apply one update to every parameter from its `.grad` (which is left as it is)."""
        self.step_count += 1
        index = 0
        for group in self.groups:
            for param in group["params"]:
                self._update(param, self.state[index], group["weight_decay"])
                index += 1

    def _update(self, param, state, weight_decay):
        """Update `param.data` in place from `param.grad`; `state` is its dict of buffers (replaced or updated)."""
        raise NotImplementedError

    def zero_grad(self):
        for param in self.parameters():
            param.zero_grad()

    def state_dict(self):
        """{"step_count", "lr", "state.<i>.<name>": array}: everything `step()` depends on."""
        state = {"step_count": self.step_count, "lr": self.lr}
        for index, buffers in enumerate(self.state):
            for name, array in buffers.items():
                state[f"state.{index}.{name}"] = array.copy()
        return state

    def load_state_dict(self, state):
        """Restore a `state_dict()`; every buffer must exist with the right shape, or nothing is loaded."""
        expected = {f"state.{i}.{name}": buffers[name].shape
                    for i, buffers in enumerate(self.state) for name in buffers}
        given = {key for key in state if key.startswith("state.")}
        if given != set(expected):
            raise KeyError(f"{type(self).__name__}: optimizer state does not match; "
                           f"missing {sorted(set(expected) - given)[:5]}, unexpected {sorted(given - set(expected))[:5]}")
        for key, shape in expected.items():
            if np.shape(state[key]) != shape:
                raise ValueError(f"{type(self).__name__}: {key} expected shape {shape}, got {np.shape(state[key])}")
        for index, buffers in enumerate(self.state):
            for name in buffers:
                buffers[name][...] = state[f"state.{index}.{name}"]     # in place: a fast form's views stay views
        self.step_count = int(state["step_count"])
        self.lr = float(state["lr"])
