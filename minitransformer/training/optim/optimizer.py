"""What every optimizer shares: parameter groups, per-parameter state, and saving that state.

An optimizer holds a list of *groups*; each group is a dict with its
`params` and its own `weight_decay`. `parameter_groups(model, ...)` builds the
usual two groups from the flags each layer sets on its parameters
(`Parameter.decay`, `Parameter.embedding`): matrices that are decayed, and the
parameters that are not (biases, LayerNorm's gamma and beta, and embedding
tables unless asked), the split that AdamW papers and nanoGPT use: decaying a
bias or a LayerNorm gain towards zero has no regularising meaning, it only
shifts or shrinks features.

Speed: a model has dozens of small parameters, and an update written per
parameter costs a dozen NumPy calls for each of them. So the optimizer moves
each group's parameters into one contiguous buffer (`data`, and one for `grad`)
and leaves every `Parameter` holding views into it: the objects, names, shapes
and values are unchanged, and one update over the group's buffer is exactly
the per-parameter update, applied to all of them at once (`flatten=False`
keeps the per-parameter loop; tests/test_optim.py shows both agree bit for
bit). The buffer is updated in chunks of CHUNK elements: a dozen passes over
a 3 MB buffer would stream it through memory a dozen times, while a chunk's
arrays stay in the L2 cache for all of them. Replacing `param.data` by a new array after the optimizer is built would
cut it off from the buffer; `step()` then raises instead of silently skipping it.

The learning rate is the attribute `lr`, set by the trainer from a schedule
before each `step()`. State (moments, momentum buffers, the step count) is
kept per parameter in the order of the groups, so `state_dict()` and
`load_state_dict()` round-trip bit-exactly for checkpoints.

Left out: closures, sparse gradients, per-group learning rates.
"""

import numpy as np

CHUNK = 1 << 15             # elements updated at a time: data, grad, moments and temporaries fit in L2 cache


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

    def __init__(self, params, lr, weight_decay=0.0, flatten=True):
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        self.groups = [{"params": list(group["params"]),
                        "weight_decay": float(group.get("weight_decay", weight_decay))} for group in params]
        self.lr = float(lr)
        self.step_count = 0
        self.state = []                                # per parameter: {name: array}, views when flat
        for group in self.groups:
            flat = flatten and group["params"] and len({p.data.dtype for p in group["params"]}) == 1
            group["data"], group["grad"] = _flatten(group["params"]) if flat else (None, None)
            group["state"] = {name: np.zeros_like(group["data"]) for name in self.state_names} if flat else None
            for param, (start, stop) in zip(group["params"], _spans(group["params"])):
                self.state.append({name: group["state"][name][start:stop].reshape(param.shape) if flat
                                   else np.zeros_like(param.data) for name in self.state_names})

    def parameters(self):
        return [param for group in self.groups for param in group["params"]]

    def gradients(self):
        """Every parameter's gradient, as arrays to modify in place: one flat buffer per flat group."""
        return [grad for group in self.groups
                for grad in ([group["grad"]] if group["grad"] is not None else [p.grad for p in group["params"]])]

    def step(self, grad_scale=1.0, part=None):
        """Apply one update to every parameter from its `.grad` (which is left as it is).

        Args:
            grad_scale: a factor the update applies to every gradient first, as if `.grad` had been
                multiplied by it (global-norm clipping passes max_norm / norm here: one pass fewer
                over the gradients than scaling them in place).
            part: None, or (k, n): update only the k-th of n equal slices of each flat group's
                buffer (`part_slice`). Each element's update depends on that element alone, so n
                processes that share the buffers can each update one part (parallel.py). The
                step count advances either way.
        """
        if part is not None:
            self._require_flat("step(part=...)")
        self.step_count += 1
        index = 0
        for group in self.groups:
            if group["data"] is not None:
                self._check_flat(group)
                span = part_slice(group["data"].size, part)
                for start in range(span.start, span.stop, CHUNK):      # chunks small enough to stay in cache
                    chunk = slice(start, min(start + CHUNK, span.stop))
                    self._update(group["data"][chunk], group["grad"][chunk],
                                 {name: buffer[chunk] for name, buffer in group["state"].items()},
                                 group["weight_decay"], grad_scale)
                index += len(group["params"])
                continue
            for param in group["params"]:
                self._update(param.data, param.grad, self.state[index], group["weight_decay"], grad_scale)
                index += 1

    def buffers(self):
        """Each flat group's buffers, as [{"data": ..., "grad": ..., and each state name: ...}] (1-D arrays)."""
        self._require_flat("buffers")
        return [{"data": group["data"], "grad": group["grad"], **group["state"]} for group in self.groups]

    def move_buffers(self, allocate):
        """Copy every flat buffer (data, grad and state) into a new one made by `allocate(size, dtype)`.

        Values, parameters and state are unchanged; the parameters and the state hold views into
        the new buffers. `DataParallel` uses it to put them in memory that worker processes share.
        """
        self._require_flat("move_buffers")
        moved = []
        for old in self.buffers():
            moved.append({name: allocate(array.size, array.dtype) for name, array in old.items()})
            for name, array in old.items():
                moved[-1][name][...] = array
        self.bind_buffers(moved)

    def bind_buffers(self, buffers):
        """Make this optimizer and its parameters use the given flat buffers, without copying.

        Args:
            buffers: a list with one dict per group, of the form `buffers()` returns. The values
                the parameters and the state had are dropped: they read what the buffers hold.
        """
        self._require_flat("bind_buffers")
        if len(buffers) != len(self.groups):
            raise ValueError(f"{type(self).__name__}.bind_buffers: expected {len(self.groups)} groups of buffers, "
                             f"got {len(buffers)}")
        index = 0
        for group, given in zip(self.groups, buffers):
            if set(given) != {"data", "grad", *self.state_names}:
                raise ValueError(f"{type(self).__name__}.bind_buffers: expected buffers "
                                 f"{sorted({'data', 'grad', *self.state_names})}, got {sorted(given)}")
            size = sum(param.size for param in group["params"])
            for name in self.state_names:
                if given[name].shape != (size,):
                    raise ValueError(f"{type(self).__name__}.bind_buffers: expected a flat {name!r} buffer of "
                                     f"{size} elements, got shape {given[name].shape}")
            bind_to_buffers(group["params"], given["data"], given["grad"])
            group["data"], group["grad"] = given["data"], given["grad"]
            group["state"] = {name: given[name] for name in self.state_names}
            for param, (start, stop) in zip(group["params"], _spans(group["params"])):
                for name in self.state_names:
                    self.state[index][name] = given[name][start:stop].reshape(param.shape)
                index += 1

    def _require_flat(self, method):
        if any(group["data"] is None for group in self.groups):
            raise ValueError(f"{type(self).__name__}.{method}: every group must be flat "
                             "(one dtype, flatten=True), got a group that is not")

    def _update(self, data, grad, state, weight_decay, grad_scale):
        """Update `data` in place from grad_scale * `grad` and the buffers in `state` (arrays of one shape)."""
        raise NotImplementedError

    def _check_flat(self, group):
        for param in group["params"]:
            if param.data.base is not group["data"] or param.grad.base is not group["grad"]:
                raise RuntimeError(f"{type(self).__name__}: a {param!r} had its .data or .grad replaced after the "
                                   "optimizer was built; assign in place (param.data[...] = ...) or rebuild it")

    def zero_grad(self):
        for group in self.groups:
            if group["grad"] is not None:
                group["grad"][...] = 0
            else:
                for param in group["params"]:
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
                buffers[name][...] = state[f"state.{index}.{name}"]
        self.step_count = int(state["step_count"])
        self.lr = float(state["lr"])


def part_slice(size, part):
    """The k-th of n near-equal slices of range(size), for part = (k, n); all of it for part = None."""
    if part is None:
        return slice(0, size)
    k, n = part
    if not 0 <= k < n:
        raise ValueError(f"part_slice expected part (k, n) with 0 <= k < n, got {part}")
    return slice(k * size // n, (k + 1) * size // n)


def _spans(params):
    """(start, stop) of each parameter in its group's flat buffer."""
    spans, start = [], 0
    for param in params:
        spans.append((start, start + param.size))
        start += param.size
    return spans


def _flatten(params):
    """Copy the parameters' data and grad into two flat buffers and make each Parameter hold views into them."""
    size = sum(param.size for param in params)
    data, grad = np.empty(size, params[0].data.dtype), np.empty(size, params[0].data.dtype)
    for param, (start, stop) in zip(params, _spans(params)):
        data[start:stop] = param.data.reshape(-1)
        grad[start:stop] = param.grad.reshape(-1)
    bind_to_buffers(params, data, grad)
    return data, grad


def bind_to_buffers(params, data, grad):
    """Make each Parameter's .data and .grad views into the flat buffers `data` and `grad`, without copying.

    The values the parameters had are dropped: afterwards they read whatever the buffers hold, in the
    order of `params` (the layout `_flatten` writes)."""
    size = sum(param.size for param in params)
    if data.shape != (size,) or grad.shape != (size,):
        raise ValueError(f"bind_to_buffers: expected flat buffers of {size} elements, got {data.shape} and {grad.shape}")
    for param, (start, stop) in zip(params, _spans(params)):
        param.data = data[start:stop].reshape(param.shape)        # views: the layers see the same values
        param.grad = grad[start:stop].reshape(param.shape)
