"""The optimizers' fast form: Adam and AdamW over one flat buffer, in cache-sized chunks, clipping folded in.

The plain `Adam._update` (adam.py) writes the paper's lines per parameter: a
model of 4 layers has 50 parameters, each update a dozen NumPy calls and a
dozen new arrays. This subclass computes the same numbers with three tricks,
and nothing else:

1. One buffer. The constructor copies every parameter's data and grad into
   two flat buffers (`data`, `grad`) and leaves each `Parameter` holding views
   into them: the objects, names, shapes and values are unchanged. The moments
   are flat too, and `state` (what `state_dict` saves) holds views into them,
   so a checkpoint does not know which form wrote it. The groups are
   contiguous spans of the buffer, each with its weight decay.
2. Chunks. The buffer is updated CHUNK elements at a time, in place, with one
   scratch array: a dozen passes over a 3 MB buffer would stream it through
   memory a dozen times, while a chunk's arrays stay in the L2 cache.
3. Clipping folded in. `clip_gradients` computes the norm (one dot product)
   and keeps the factor s; the next `step()` multiplies it into the update's
   constants (m gets (1 - beta1) s g, v gets (1 - beta2) s^2 g^2), so the
   gradients are never rewritten. The bias corrections become two scalars:
   w -= (lr sqrt(b2) / b1) m / (sqrt(v) + eps sqrt(b2)), b1 = 1 - beta1^t, b2 = 1 - beta2^t.

`step(span=(start, stop))` updates one span of the buffer only: a ZeRO-1 rank
updates its shard (training/distributed.py). `keep_moments(start, stop)` makes
the optimizer keep the moments of that span alone (ZeRO-1's memory saving: a
rank holds 2/N of P moments instead of 2 P); its `state_dict()` is then made
from the whole moments that `gather_state` hands to rank 0 (`gathered`), and
`load_state_dict()` keeps the span's part of a whole state. Replacing `param.data` by a new
array after the optimizer is built would cut it off from the buffer; `step()`
then raises instead of silently skipping it.

The plain AdamW makes new temporaries, fresh memory every step; this one updates
each group's flat buffer in place, in cache-sized chunks, which is what makes it
faster (the figure: benchmarks/README.md, "What the code's docstrings point to"). tests/test_optim.py proves the two equal to float rounding
over several steps, with both weight decay groups and clipping, in float64 and
float32.
"""

import math

import numpy as np

from .adam import Adam, AdamW
from .clipping import clip_factor

CHUNK = 1 << 15             # elements updated at a time: data, grad, moments and the scratch fit in L2 cache


class FastAdam(Adam):
    """`Adam` on one flat buffer (see the module docstring); same arguments."""

    rule = "Adam"

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **kwargs)
        parameters = self.parameters()
        dtypes = {param.data.dtype for param in parameters}
        if len(dtypes) != 1:
            raise ValueError(f"{type(self).__name__} expected parameters of one dtype, got {sorted(map(str, dtypes))}")
        self.data, self.grad = _flatten(parameters)
        self.moments = {name: np.zeros_like(self.data) for name in self.state_names}
        self.moment_span = (0, self.data.size)           # the part of the buffer whose moments are kept
        self.gathered = None                             # kept part only: the whole moments, to save once
        self.spans, start = [], 0                        # (start, stop, weight_decay) of each group
        for group in self.groups:
            stop = start + sum(param.size for param in group["params"])
            self.spans.append((start, stop, group["weight_decay"]))
            start = stop
        self.state = self._views(self.moments)
        self.grad_scale = 1.0                            # the clipping factor the next step() applies

    def _views(self, moments):
        """Each parameter's {name: view of its part of the whole flat `moments`}: what `state_dict` saves."""
        parameters = self.parameters()
        return [{name: moments[name][start:stop].reshape(param.shape) for name in self.state_names}
                for param, (start, stop) in zip(parameters, _offsets(parameters))]

    @property
    def sharded(self):
        return self.moment_span != (0, self.data.size)

    def keep_moments(self, start, stop):
        """Keep the moments of elements [start, stop) of the buffer only (a ZeRO-1 rank's shard); `step`
        then updates that span alone. `state` is None: the whole state exists only when gathered."""
        if not 0 <= start <= stop <= self.data.size:
            raise ValueError(f"{type(self).__name__}.keep_moments expected 0 <= start <= stop <= "
                             f"{self.data.size}, got ({start}, {stop})")
        low = start - self.moment_span[0]
        self.moments = {name: moment[low:low + stop - start].copy() for name, moment in self.moments.items()}
        self.moment_span, self.state, self.gathered = (start, stop), None, None

    def state_nbytes(self):
        """Bytes of the optimizer state this process holds (the moments kept, and any gathered whole ones)."""
        held = list(self.moments.values()) + list((self.gathered or {}).values())
        return sum(array.nbytes for array in held)

    def state_dict(self):
        """As `Optimizer.state_dict`; with a kept part, from the `gathered` whole moments, which it releases."""
        if not self.sharded:
            return super().state_dict()
        if self.gathered is None:
            raise RuntimeError(f"{type(self).__name__}.state_dict: this optimizer keeps the moments of "
                               f"{self.moment_span} only; gather the whole moments first "
                               "(DataParallel.gather_state, on the rank that saves)")
        self.state, self.gathered = self._views(self.gathered), None
        try:
            return super().state_dict()
        finally:
            self.state = None

    def load_state_dict(self, state):
        """As `Optimizer.load_state_dict` (`state` is whole); with a kept part, keeps that part of it."""
        if not self.sharded:
            return super().load_state_dict(state)
        (start, stop), whole = self.moment_span, {name: np.zeros_like(self.data) for name in self.state_names}
        self.state = self._views(whole)
        try:
            super().load_state_dict(state)                # checks every buffer before writing any
        finally:
            self.state = None
        for name, moment in self.moments.items():
            moment[...] = whole[name][start:stop]

    def gradients(self):
        return [self.grad]

    def zero_grad(self):
        self.grad[...] = 0

    def clip_gradients(self, max_norm):
        """Find the clipping factor (`clip_factor`) and keep it for the next `step()`; `.grad` is not touched."""
        norm, self.grad_scale = clip_factor([self.grad], max_norm)
        return norm

    def step(self, span=None):
        """One Adam(W) step over the part whose moments are kept (all of the buffer unless `keep_moments` was
        called), or over `span` = (start, stop) within it (a ZeRO-1 shard)."""
        self._check_views()
        start, stop = self.moment_span if span is None else span
        if not self.moment_span[0] <= start <= stop <= self.moment_span[1]:
            raise ValueError(f"{type(self).__name__}.step: span ({start}, {stop}) is outside the part whose "
                             f"moments are kept, {self.moment_span}")
        self.step_count += 1
        for group_start, group_stop, weight_decay in self.spans:
            for chunk_start in range(max(start, group_start), min(stop, group_stop), CHUNK):
                chunk = slice(chunk_start, min(chunk_start + CHUNK, stop, group_stop))
                self._update_chunk(chunk, weight_decay)
        self.grad_scale = 1.0

    def _update_chunk(self, chunk, weight_decay):
        kept = slice(chunk.start - self.moment_span[0], chunk.stop - self.moment_span[0])
        w, g, m, v = self.data[chunk], self.grad[chunk], self.moments["m"][kept], self.moments["v"][kept]
        s = self.grad_scale
        if weight_decay and self.decoupled:
            w *= 1.0 - self.lr * weight_decay                          # AdamW: w <- w - lr lambda w
        elif weight_decay:
            g, s = g * s + weight_decay * w, 1.0                       # Adam + L2: g <- s g + lambda w
        scratch = np.multiply(g, (1.0 - self.beta1) * s)              # the one temporary of the update
        m *= self.beta1                                                # m <- beta1 m + (1 - beta1) s g
        m += scratch
        np.multiply(g, g, out=scratch)
        scratch *= (1.0 - self.beta2) * s * s
        v *= self.beta2                                                # v <- beta2 v + (1 - beta2) s^2 g^2
        v += scratch
        bias1, bias2 = 1.0 - self.beta1 ** self.step_count, 1.0 - self.beta2 ** self.step_count
        step = np.sqrt(v, out=scratch)                                 # the corrections folded into scalars
        step += self.eps * math.sqrt(bias2)
        np.divide(m, step, out=step)
        step *= self.lr * math.sqrt(bias2) / bias1
        w -= step

    def _check_views(self):
        for param in self.parameters():
            if param.data.base is not self.data or param.grad.base is not self.grad:
                raise RuntimeError(f"{type(self).__name__}: a {param!r} had its .data or .grad replaced after the "
                                   "optimizer was built; assign in place (param.data[...] = ...) or rebuild it")


class FastAdamW(FastAdam, AdamW):
    """`AdamW` on one flat buffer: decoupled weight decay, the default 0.01 as in PyTorch."""

    rule = "AdamW"


FAST_FORMS = {Adam: FastAdam, AdamW: FastAdamW}


def _offsets(params):
    """(start, stop) of each parameter in the flat buffer."""
    spans, start = [], 0
    for param in params:
        spans.append((start, start + param.size))
        start += param.size
    return spans


def _flatten(params):
    """Copy the parameters' data and grad into two flat buffers and make each Parameter hold views into them."""
    size = sum(param.size for param in params)
    data, grad = np.empty(size, params[0].data.dtype), np.empty(size, params[0].data.dtype)
    for param, (start, stop) in zip(params, _offsets(params)):
        data[start:stop] = param.data.reshape(-1)
        grad[start:stop] = param.grad.reshape(-1)
        param.data = data[start:stop].reshape(param.shape)        # views: the layers see the same values
        param.grad = grad[start:stop].reshape(param.shape)
    return data, grad
