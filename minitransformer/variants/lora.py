"""LoRA, low-rank adaptation (Hu et al. 2021, arXiv 2106.09685; survey note §10.1).

Fine-tuning moves a pre-trained weight W0 (d_in, d_out) by an update. LoRA
freezes W0 and learns the update in factored form, s A B with A (d_in, r),
B (r, d_out), r much smaller than d_in and d_out, and the fixed scale s = alpha / r:

    y = x W0 + s (x A) B.

A starts random and B at zero, so the adapted layer starts out identical to
the pre-trained one. Only A and B are trained: r (d_in + d_out) numbers
instead of d_in d_out. After training, W0 + s A B can be written back into
the weight ("merging"), so inference costs nothing extra.

Two forms:

* `LoRALinear(base, r, alpha)` wraps a `Linear` and computes the low-rank path
  x A B explicitly, never forming dW.
* `add_lora(model, r, alpha, targets=("w_q", "w_v"))` adapts any 2-D weight
  used as x @ W inside a model, such as the GPT's attention projections, by
  reparametrisation: before each forward it writes W = W0 + s A B into the
  weight, and after the model's backward it turns the weight's gradient into
  A's and B's. The model itself is not changed.

In both, `named_parameters()` lists the adapters only: those are what the
optimizer trains and what `state_dict()` saves (a LoRA checkpoint is the small
adapter file). The frozen weights never receive gradient.

Left out: dropout on the adapter input, and adapters on embeddings.

Derivation:
    `add_lora` turns the weight's gradient G = dL/dW into dA = s G B^T and
    dB = s A^T G (the chain rule through W = W0 + s A B).
"""

import numpy as np

from ..core.module import Module
from ..core.parameter import Parameter
from ..core.random import as_generator
from ..layers.linear import Linear


def _check_rank(r, d_in, d_out, where):
    if not 1 <= r <= min(d_in, d_out):
        raise ValueError(f"{where} expected a rank 1 <= r <= min({d_in}, {d_out}), got r={r}")


class LoRALinear(Module):
    """y = x W0 + b0 + (alpha / r) (x A) B around a frozen `Linear`.

    Args:
        base: the pre-trained Linear(d_in -> d_out); its weight and bias stay frozen.
        r: the rank.
        alpha: scale numerator (default r, so s = 1).
        rng: seed or Generator for A ~ N(0, 1/d_in); B starts at 0.
    Parameters (the trainable ones):
        lora_a (d_in, r), lora_b (r, d_out).
    """

    def __init__(self, base, r, alpha=None, rng=None):
        if not isinstance(base, Linear):
            raise TypeError(f"LoRALinear expected a Linear to wrap, got {type(base).__name__}")
        _check_rank(r, base.d_in, base.d_out, f"LoRALinear({base!r})")
        self.base, self.r = base, r
        self.scale = (r if alpha is None else alpha) / r
        dtype = base.weight.dtype
        self.lora_a = Parameter((as_generator(rng).standard_normal((base.d_in, r)) * base.d_in ** -0.5).astype(dtype))
        self.lora_b = Parameter(np.zeros((r, base.d_out), dtype=dtype))

    def _walk_parameters(self, prefix):
        """Only the adapters are parameters; the frozen base is reached as `.base`."""
        yield prefix + "lora_a", self.lora_a
        yield prefix + "lora_b", self.lora_b

    def forward(self, x):
        """x (..., d_in) -> y (..., d_out)."""
        x = np.asarray(x)
        self._check_features(x, self.base.d_in)
        self.x2d = x.reshape(-1, self.base.d_in)                          # (N, d_in)
        ### BEGIN SOLUTION lora.forward
        y = self.x2d @ self.base.weight.data                              # 1. frozen path (N, d_out)
        if self.base.bias is not None:
            y += self.base.bias.data
        self.xa = self.x2d @ self.lora_a.data                             # 2. (N, r)
        y += self.scale * (self.xa @ self.lora_b.data)                    # 3. low-rank path
        ### END SOLUTION
        self.shape = x.shape
        return y.reshape(*x.shape[:-1], self.base.d_out)

    def backward(self, dout):
        """The gradient at x, and the adapters' gradients added to their `.grad` (the base stays frozen).

        Derivation:
            With g = dout rows and s = alpha / r:

                3. y += s (x A) B   ->  dB += s (xA)^T g,   d(xA) = s g B^T
                2. xA = x A         ->  dA += x^T d(xA),    dx gets d(xA) A^T
                1. y = x W0 + b0    ->  dx gets g W0^T; W0, b0 are frozen: no gradient

        Returns:
            dx (..., d_in).
        """
        ### BEGIN SOLUTION lora.backward
        g = dout.reshape(-1, self.base.d_out)                             # (N, d_out)
        self.lora_b.grad += self.scale * (self.xa.T @ g)                  # 3.
        dxa = self.scale * (g @ self.lora_b.data.T)                       # 3. (N, r)
        self.lora_a.grad += self.x2d.T @ dxa                              # 2.
        dx = dxa @ self.lora_a.data.T                                     # 2. (N, d_in)
        dx += g @ self.base.weight.data.T                                 # 1.
        return dx.reshape(self.shape)
        ### END SOLUTION

    def merged(self):
        """A plain Linear with weight W0 + s A B (and the base's bias): the same outputs, no adapter."""
        base = self.base
        linear = Linear(base.d_in, base.d_out, bias=base.bias is not None, dtype=base.weight.dtype)
        linear.weight.data[...] = base.weight.data + self.scale * (self.lora_a.data @ self.lora_b.data)
        if base.bias is not None:
            linear.bias.data[...] = base.bias.data
        return linear

    def __repr__(self):
        return f"LoRALinear({self.base!r}, r={self.r}, scale={self.scale:g})"


class LoRAAdapter(Module):
    """The factors A (d_in, r), B (r, d_out) of one adapted weight, and the frozen W0."""

    def __init__(self, target, weight, r, scale, rng):
        d_in, d_out = weight.shape
        _check_rank(r, d_in, d_out, f"LoRA on {target}")
        self.target, self.weight, self.scale = target, weight, scale
        self.frozen = weight.data.copy()                                  # W0, not a parameter
        self.lora_a = Parameter((rng.standard_normal((d_in, r)) * d_in ** -0.5).astype(weight.dtype))
        self.lora_b = Parameter(np.zeros((r, d_out), dtype=weight.dtype))

    def _walk_parameters(self, prefix):
        """The adapted weight belongs to the model (and is frozen); only A and B are parameters here."""
        yield prefix + "lora_a", self.lora_a
        yield prefix + "lora_b", self.lora_b

    def delta(self):
        """s A B, (d_in, d_out)."""
        return self.scale * (self.lora_a.data @ self.lora_b.data)

    def __repr__(self):
        return f"LoRAAdapter({self.target}, r={self.lora_a.shape[1]})"


class LoRAModel(Module):
    """A model whose chosen weights are W0 + s A B, trained through A and B only (see `add_lora`)."""

    def __init__(self, model, r, alpha=None, targets=("w_q", "w_v"), rng=None):
        rng = as_generator(rng)
        self.model, self.r = model, r
        scale = (r if alpha is None else alpha) / r
        self.adapters = [LoRAAdapter(name, param, r, scale, rng) for name, param in model.named_parameters()
                         if name.rsplit(".", 1)[-1] in targets and param.data.ndim == 2]
        if not self.adapters:
            raise ValueError(f"add_lora found no 2-D weight named one of {tuple(targets)} in {model!r}")
        model.zero_grad()

    def _walk_parameters(self, prefix):
        """Only the adapters are parameters (`adapters.<i>.lora_a`, ...); the model is frozen."""
        for index, adapter in enumerate(self.adapters):
            yield from adapter._walk_parameters(f"{prefix}adapters.{index}.")

    def forward(self, *inputs):
        """Write W = W0 + s A B into every adapted weight, then run the model unchanged."""
        for adapter in self.adapters:
            adapter.weight.data[...] = adapter.frozen + adapter.delta()
        return self.model.forward(*inputs)

    def backward(self, dout):
        """The model's backward, then the adapted weights' gradients turned into the adapters'.

        The model's gradients are scratch space and are cleared again afterwards.

        Derivation:
            With G = dL/dW, which the model's own backward leaves in each adapted weight's .grad:

                W = W0 + s A B   ->   dA += s G B^T,   dB += s A^T G,   W0 frozen.
        """
        dinputs = self.model.backward(dout)
        for adapter in self.adapters:
            grad = adapter.weight.grad                                    # (d_in, d_out) dL/dW
            adapter.lora_a.grad += adapter.scale * (grad @ adapter.lora_b.data.T)
            adapter.lora_b.grad += adapter.scale * (adapter.lora_a.data.T @ grad)
        self.model.zero_grad()
        return dinputs

    def merge(self):
        """Write W0 + s A B into the model for good and return the plain model."""
        for adapter in self.adapters:
            adapter.weight.data[...] = adapter.frozen + adapter.delta()
        return self.model

    def __repr__(self):
        targets = sorted({adapter.target.rsplit(".", 1)[-1] for adapter in self.adapters})
        return f"LoRAModel({self.model!r}, r={self.r}, targets={targets})"


def add_lora(model, r, alpha=None, targets=("w_q", "w_v"), rng=None):
    """Wrap `model` so that every 2-D weight whose name ends in one of `targets` is adapted.

    Args:
        model: any Module whose adapted weights are used as x @ W (the GPT's
            attention projections w_q, w_k, w_v, w_o; a Linear's `weight`).
        r, alpha: rank and scale numerator (s = alpha / r; default alpha = r).
        targets: last components of the parameter names to adapt.
        rng: seed or Generator for the A factors.
    Returns:
        LoRAModel; train its `parameters()`, call `.merge()` at the end.
    """
    return LoRAModel(model, r, alpha=alpha, targets=targets, rng=rng)
