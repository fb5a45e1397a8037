# %% [markdown]
# # 4. Backpropagation by hand: softmax, LayerNorm, attention, cross-entropy
#
# **Sources.** The softmax of Greg Strabel, "Transformers" (2023), §1.2, Definition 1.1, and of Jonathan
# May, "Transformer Language Models", lecture notes 2025, §1.1; LayerNorm as the notes (§1.3, footnote 9)
# and Si Wu's slides "Transformers" (CS 6120, Northeastern, "Layer Norm") define it; attention as in the
# notes' §1.1 and the "most important formula" of Sachin Kumar's slides "Language Modeling III:
# Transformers" (CSE 5525, Ohio State, 2025); cross-entropy as the loss of next-token prediction that Kumar's
# slides name ("Loss Function: cross-entropy"). None of the lectures derives a backward pass; this notebook does,
# one step at a time, and checks each derivation against central differences (`numerical_gradient`) and the
# package's gradient checker (`check_module`).
#
# Notation (the package's, docs/guide/notation.md): `dout` is the gradient of the loss with respect to a
# layer's output (the upstream gradient), and `backward(dout)` returns the gradient with respect to its input;
# the gradient at any quantity is `d` + its name (`dx`, `dalpha`, `dscores`). The attention scores are $S$,
# their scale $\text{scale} = 1/\sqrt{d_k}$, the attention weights $\alpha$; LayerNorm's steps are the mean
# $\mu$, the centred $c$, the variance $\sigma^2$, $\mathrm{rstd} = 1/\sqrt{\sigma^2 + \varepsilon}$ and $\hat{x}$.
#
# **Exercises.** Each derivation is an exercise: a cell whose answer sits between the two solution
# markers, followed by a locked check cell worth points, which compares the answer with central
# differences; hidden tests (nbgrader's, left out of a student copy) check the numbers. In this (reference)
# notebook the answers are filled in; in a student copy
# (`python -m minitransformer exercises make --notebooks`, or an nbgrader release) they are blank and
# the notebook runs up to the first one. The cells carry nbgrader's metadata, so an nbgrader course can
# release and autograde them (9 points). A copy made to derive (`exercises make --notebooks --derive`) also
# leaves out the cells that derive an assigned layer, such as section 4's derivation of cross-entropy.

# %%
import matplotlib.pyplot as plt
import numpy as np

from minitransformer import LayerNorm, ScaledDotProductAttention, Softmax, check_module, numerical_gradient, softmax
from minitransformer.layers.loss import CrossEntropyLoss
from minitransformer.layers.softmax import softmax_backward

rng = np.random.default_rng(0)
np.set_printoptions(precision=4, suppress=True)

# %% [markdown]
# ## 1. Softmax: the Jacobian, and why we never build it
# With $y = \operatorname{softmax}(x)$,
#
# $$y_i = \frac{e^{x_i}}{\sum_j e^{x_j}}.$$
#
# **Exercise 1** (1 point). Write
# * `J`, the $T \times T$ Jacobian, $J_{ij} = \partial y_i / \partial x_j$, from `y` alone;
# * `dx_softmax`, the backward pass $J^\top \mathrm{dout}$, *without* building $J$: $O(T)$ instead of
#   $O(T^2)$. That is what the package's `softmax_backward` computes.

# %% [markdown] derives=softmax
# A hint. Both the numerator and the sum depend on $x$, so the quotient rule has two cases:
# $\partial y_i / \partial x_i$, where the numerator and the sum both move, and $\partial y_i / \partial x_j$ for
# $j \ne i$, where only the sum moves. Both can be written with the $y$'s alone, and $J^\top \mathrm{dout}$ then
# takes one multiply, one dot product and one subtraction.

# %%
x = rng.standard_normal(5)
y = softmax(x)
dout = rng.standard_normal(5)

# %% [solution] softmax_jacobian
### BEGIN SOLUTION
# dy_i/dx_i = y_i - y_i^2 and dy_i/dx_j = -y_i y_j (j != i): J = diag(y) - y y^T
J = np.diag(y) - np.outer(y, y)
# J^T dout = (diag(y) - y y^T) dout = y * (dout - (y . dout))
dx_softmax = y * (dout - y @ dout)
### END SOLUTION

# %% [check 1] check_softmax_jacobian
assert np.shape(J) == (5, 5), f"J has shape {np.shape(J)}, expected (5, 5)"
assert np.shape(dx_softmax) == (5,), f"dx_softmax has shape {np.shape(dx_softmax)}, expected (5,)"
### BEGIN HIDDEN TESTS
J_numeric = np.array([numerical_gradient(lambda i=i: softmax(x)[i], x) for i in range(len(x))])   # row i: dy_i/dx
assert np.allclose(J, J_numeric, atol=1e-8), f"J differs from central differences by {np.abs(J - J_numeric).max():.1e}"
assert np.allclose(dx_softmax, J_numeric.T @ dout, atol=1e-8), "dx_softmax is not J^T dout"
### END HIDDEN TESTS

# %% [markdown]
# $J$ is symmetric and its rows sum to 0 (adding a constant to every x changes nothing). The package's
# `softmax_backward` gives the same product, and the checker agrees with it on a batch of rows:

# %%
print("J\n", J)
assert np.allclose(J, J.T) and np.allclose(J.sum(axis=1), 0)
assert np.allclose(dx_softmax, softmax_backward(y, dout))
report = check_module(Softmax(), [rng.standard_normal((3, 4, 6))])
print(report.inputs[0].describe())
report.assert_ok(1e-7)

# %% [markdown]
# ## 2. LayerNorm's backward, step by step
# The forward pass over one vector $x$ of length $C$, as the package's `LayerNorm.forward` numbers it:
#
# $$\text{1. } \mu = \tfrac{1}{C}\textstyle\sum_i x_i \quad \text{2. } c = x - \mu \quad
# \text{3. } \sigma^2 = \tfrac{1}{C}\textstyle\sum_i c_i^2 \quad \text{4. } \mathrm{rstd} = 1/\sqrt{\sigma^2 + \varepsilon} \quad
# \text{5. } \hat{x} = c \cdot \mathrm{rstd} \quad \text{6. } y = \gamma \hat{x} + \beta$$
#
# **Exercise 2a** (1 point). Compute the intermediate values `mean`, `centered`, `var`, `rstd` and `xhat` of
# steps 1 to 5 for the vector `x` below, one line per step, named as the package's `LayerNorm.forward` names
# them; the backward needs them. The check compares $\gamma \hat{x} + \beta$ with the package's layer.

# %%
C, eps = 6, 1e-5
layer = LayerNorm(C, eps=eps)
layer.gamma.data[...] = rng.standard_normal(C)
layer.beta.data[...] = rng.standard_normal(C)
gamma, beta = layer.gamma.data, layer.beta.data
x = rng.standard_normal(C)
dout = rng.standard_normal(C)

# %% [solution] layernorm_forward_steps
### BEGIN SOLUTION
mean = x.mean()                                  # 1.
centered = x - mean                              # 2.
var = (centered * centered).mean()               # 3.
rstd = 1 / np.sqrt(var + eps)                    # 4.
xhat = centered * rstd                           # 5.
### END SOLUTION

# %% [check 1] check_layernorm_forward_steps
assert np.shape(xhat) == (C,) and np.shape(centered) == (C,), "centered and xhat are vectors of length C"
assert np.isclose(np.mean(centered), 0) and np.isclose(np.mean(xhat), 0), "centered and xhat should have mean 0"
### BEGIN HIDDEN TESTS
assert np.allclose(gamma * xhat + beta, layer(x)), "gamma * xhat + beta differs from the package's LayerNorm"
assert np.isclose(mean, np.mean(x)) and np.isclose(var, np.var(x)) and np.isclose(rstd, 1 / np.sqrt(np.var(x) + eps))
### END HIDDEN TESTS

# %% [markdown]
# **Exercise 2b** (2 points). Undo the steps in reverse, one line per step. With $g := \partial L / \partial \hat{x}$:
#
# * undo 6: the parameter gradients `dgamma`, `dbeta`, and `g`;
# * undo 5: $\hat{x}$ depends on $c$ directly and through $\mathrm{rstd}$ (which depends on $\sigma^2$, which
#   depends on $c$): `dcentered_direct`, the direct path's share of $\partial L / \partial c$, and `drstd`, the
#   gradient at $\mathrm{rstd}$;
# * undo 4: `dvar`, the gradient at $\sigma^2$;
# * undo 3: `dcentered`, the direct share plus the share $\sigma^2 = \operatorname{mean}(c^2)$ sends back;
# * undo 2 and 1: `dx_by_hand`, the gradient at $x$;
# * then collect the terms into one expression in $g$, $\hat{x}$ and $\mathrm{rstd}$: `dx_one_line`.
#
# The check compares `g`, `drstd` and `dcentered_direct` with central differences of the steps they undo, and
# `dgamma`, `dbeta`, `dx_by_hand` and `dx_one_line` with central differences of the package's layer.

# %% [solution] layernorm_backward_steps
### BEGIN SOLUTION
dgamma, dbeta = dout * xhat, dout                  # undo 6: y = gamma xhat + beta (one vector: nothing to sum over)
g = dout * gamma                                   #         dL/dxhat
dcentered_direct = g * rstd                        # undo 5: xhat = centered rstd, the direct path to centered
drstd = np.sum(g * centered)                       #         and the path to rstd
dvar = drstd * (-0.5) * rstd ** 3                  # undo 4: rstd = (var + eps)^(-1/2)
dcentered = dcentered_direct + 2 * centered / C * dvar   # undo 3: var = mean(centered^2) sends 2 centered / C dvar back
dx_by_hand = dcentered - dcentered.mean()          # undo 2 and 1: centered = x - mean(x)
dx_one_line = rstd * (g - g.mean() - xhat * np.mean(g * xhat))
### END SOLUTION

# %% [check 2] check_layernorm_backward_steps
assert all(np.shape(a) == (C,) for a in (dgamma, dbeta, g, dcentered_direct, dcentered, dx_by_hand, dx_one_line)), \
    "vectors of length C"
assert np.ndim(drstd) == 0 and np.ndim(dvar) == 0, "drstd and dvar are numbers: rstd and var are"
### BEGIN HIDDEN TESTS
xhat_, rstd_, centered_, x_ = xhat.copy(), np.array([rstd]), centered.copy(), x.copy()   # copies for central differences
assert np.allclose(g, numerical_gradient(lambda: np.sum(dout * (gamma * xhat_ + beta)), xhat_)), "g is wrong"
assert np.allclose(drstd, numerical_gradient(lambda: np.sum(dout * (gamma * centered * rstd_[0] + beta)), rstd_)[0]), \
    "drstd is wrong"
assert np.allclose(dcentered_direct, numerical_gradient(lambda: np.sum(dout * (gamma * centered_ * rstd + beta)), centered_)), \
    "dcentered_direct is wrong"
dx_numeric = numerical_gradient(lambda: np.sum(dout * layer(x_)), x_)
assert np.allclose(dx_by_hand, dx_numeric), f"dx_by_hand is off by {np.abs(dx_by_hand - dx_numeric).max():.1e}"
assert np.allclose(dx_one_line, dx_numeric), f"dx_one_line is off by {np.abs(dx_one_line - dx_numeric).max():.1e}"
assert np.allclose(dgamma, numerical_gradient(lambda: np.sum(dout * layer(x)), layer.gamma.data)), "dgamma is wrong"
assert np.allclose(dbeta, numerical_gradient(lambda: np.sum(dout * layer(x)), layer.beta.data)), "dbeta is wrong"
### END HIDDEN TESTS

# %% [markdown]
# The package's `LayerNorm.backward` computes the one-line form on every row at once. The step-by-step
# version agrees with it, and the checker compares the layer with finite differences on a batch:

# %%
layer.zero_grad()
layer(x)
dx_package = layer.backward(dout)
print("step by step:", dx_by_hand, "\npackage:     ", dx_package)
assert np.allclose(dx_by_hand, dx_package) and np.allclose(dgamma, layer.gamma.grad)

layernorm_report = check_module(LayerNorm(C), [rng.standard_normal((2, 3, C))])
for comparison in layernorm_report.inputs + layernorm_report.params:
    print(comparison.describe())
layernorm_report.assert_ok(1e-7)

# %% [markdown]
# ## 3. Attention's backward
# Forward (the package's `ScaledDotProductAttention`, numbered as in its source):
#
# $$\text{1-2. } S = \text{scale} \cdot q k^\top \;\; (\text{scale} = 1/\sqrt{d_k}) \quad
# \text{3. masked entries} \leftarrow -\infty \quad \text{4. } \alpha = \operatorname{softmax}(S) \text{ row by row}
# \quad \text{5. } \mathrm{out} = \alpha v$$
#
# **Exercise 3** (2 points). Undo the steps, one line each, with plain NumPy on the single sequence
# below (`alpha` is the package's $\alpha$ for it):
# * undo 5: `dalpha` and `dv` (the two factors of a matrix product swap roles);
# * undo 4: `dscores`, the gradient at $S$: softmax's backward row by row (section 1);
# * undo 3: a masked entry has $\alpha = 0$, so its `dscores` is 0 already: no code of its own;
# * undo 1-2: the scale, then `dq` and `dk`.
#
# The check compares `dalpha` with central differences of step 5, and `dq`, `dk`, `dv` with central
# differences of the package's attention (causal).

# %%
T, d_k, d_v = 4, 3, 2
q, k, v = rng.standard_normal((T, d_k)), rng.standard_normal((T, d_k)), rng.standard_normal((T, d_v))
attention = ScaledDotProductAttention(causal=True)
attention(q, k, v)
alpha, scale = attention.alpha, 1 / np.sqrt(d_k)
dout = rng.standard_normal((T, d_v))

# %% [solution] attention_backward_steps
### BEGIN SOLUTION
dalpha = dout @ v.T                                                                  # undo 5
dv = alpha.T @ dout
dscores = alpha * (dalpha - np.sum(dalpha * alpha, axis=1, keepdims=True))          # undo 4 (and 3)
dscores = dscores * scale                                                            # undo 2
dq, dk = dscores @ k, dscores.T @ q                                                  # undo 1
### END SOLUTION

# %% [check 2] check_attention_backward_steps
assert np.shape(dalpha) == (T, T) and np.shape(dscores) == (T, T), "dalpha and dscores have alpha's shape (T, T)"
assert np.shape(dq) == q.shape and np.shape(dk) == k.shape and np.shape(dv) == v.shape, "dq, dk, dv: q, k, v's shapes"
### BEGIN HIDDEN TESTS
alpha_ = alpha.copy()
assert np.allclose(dalpha, numerical_gradient(lambda: np.sum((alpha_ @ v) * dout), alpha_)), "dalpha is wrong"
for name, mine, array in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
    numeric = numerical_gradient(lambda: np.sum(ScaledDotProductAttention(causal=True)(q, k, v) * dout), array)
    assert np.allclose(mine, numeric, atol=1e-8), f"{name} is off by {np.abs(mine - numeric).max():.1e}"
### END HIDDEN TESTS

# %% [markdown]
# The package agrees. Under the causal mask the first query sees only the first key: its weight is 1
# whatever the score, so that score gets no gradient and neither does the first query. The checker
# then compares the layer with finite differences on batches, with and without the mask.

# %%
dq_package, dk_package, dv_package = attention.backward(dout)
assert np.allclose(dq, dq_package) and np.allclose(dk, dk_package) and np.allclose(dv, dv_package)
print("dq of the first query:", dq_package[0])
assert np.allclose(dq_package[0], 0) and not np.allclose(dq_package[1:], 0)

attention_errors = {}
for causal in (False, True):
    report = check_module(ScaledDotProductAttention(causal=causal),
                          [rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 3))])
    report.assert_ok(1e-7)
    attention_errors[f"attention, causal={causal}"] = report.worst_input_error
print(attention_errors)

# %% [markdown]
# ## 4. Cross-entropy: softmax minus one-hot
# The loss of next-token prediction (the package's `CrossEntropyLoss`), for $N$ positions with logits
# $z_i$ ($V$ numbers each) and targets $t_i$. A target equal to `ignore_index` (padding, or a token a masked
# language model does not score) counts for nothing: $\mathrm{keep}_i$ is 0 there and 1 elsewhere, and the mean
# divides by the $n = \sum_i \mathrm{keep}_i$ positions that count. Forward, numbered:
#
# $$\text{1. } p_i = \operatorname{softmax}(z_i) \quad \text{2. } \ell_i = -\log p_{i, t_i} \quad
# \text{3. } L = \frac{1}{n} \sum_i \mathrm{keep}_i \, \ell_i$$
#
# **Exercise 4** (2 points). Undo the steps, one line each, on the positions below (`dout` is the gradient at
# $L$, a number: 1 when $L$ is the objective):
# * undo 3: `dnll`, the gradient at each $\ell_i$, shape $(N,)$;
# * undo 2: `dprobs`, the gradient at $p$, shape $(N, V)$;
# * undo 1: `dlogits_by_hand`, through softmax's backward row by row (section 1);
# * then collect it into one expression in `probs`, `onehot`, `keep`, `count` and `dout`: `dlogits_one_line`.
#
# The check compares `dnll` and `dprobs` with central differences of the steps they undo, and both forms of
# the gradient with central differences of the loss, written here in plain NumPy.

# %%
N, V, ignore_index = 5, 4, -100
logits = rng.standard_normal((N, V))
targets = np.array([2, 0, ignore_index, 3, 1])
keep = (targets != ignore_index).astype(float)           # (N,) 1 where the position counts
count = int(keep.sum())                                   # n
safe_targets = np.where(keep > 0, targets, 0)             # an ignored position points at class 0 (its keep is 0)
onehot = np.eye(V)[safe_targets]                          # (N, V), row i the one-hot vector of t_i
probs = softmax(logits)                                   # 1. (N, V)
dout = 1.0

# %% [solution] crossentropy_backward_steps
### BEGIN SOLUTION
dnll = dout * keep / count                                           # undo 3: L = sum_i keep_i nll_i / n   (N,)
dprobs = -onehot * (dnll / probs[np.arange(N), safe_targets])[:, None]   # undo 2: nll_i = -log p[i, t_i]   (N, V)
dlogits_by_hand = probs * (dprobs - np.sum(dprobs * probs, axis=1, keepdims=True))   # undo 1: softmax, row by row
dlogits_one_line = (probs - onehot) * (dout * keep / count)[:, None]
### END SOLUTION

# %% [check 2] check_crossentropy_backward_steps
assert np.shape(dnll) == (N,) and np.shape(dprobs) == (N, V), "dnll: one number per position; dprobs: probs' shape"
assert np.shape(dlogits_by_hand) == (N, V) and np.shape(dlogits_one_line) == (N, V), "the logits' shape (N, V)"
### BEGIN HIDDEN TESTS
nll_, probs_, logits_ = -np.log(probs[np.arange(N), safe_targets]), probs.copy(), logits.copy()   # for central differences
assert np.allclose(dnll, numerical_gradient(lambda: dout * np.sum(keep * nll_) / count, nll_)), "dnll is wrong"
numeric_dprobs = numerical_gradient(lambda: -dout * np.sum(keep * np.log(probs_[np.arange(N), safe_targets])) / count, probs_)
assert np.allclose(dprobs, numeric_dprobs), "dprobs is wrong"
loss_numeric = numerical_gradient(lambda: dout * np.sum(keep * (np.log(np.exp(logits_).sum(axis=1))
                                                                - logits_[np.arange(N), safe_targets])) / count, logits_)
assert np.allclose(dlogits_by_hand, loss_numeric, atol=1e-8), f"dlogits_by_hand is off by {np.abs(dlogits_by_hand - loss_numeric).max():.1e}"
assert np.allclose(dlogits_one_line, loss_numeric, atol=1e-8), f"dlogits_one_line is off by {np.abs(dlogits_one_line - loss_numeric).max():.1e}"
### END HIDDEN TESTS

# %% [markdown] derives=crossentropy,log_probs
# **The derivation, step by step.** Undo 3: each $\ell_i$ enters $L$ once, weighted by $\mathrm{keep}_i / n$:
#
# $$\frac{\partial L}{\partial \ell_i} = \mathrm{dout} \, \frac{\mathrm{keep}_i}{n}.$$
#
# Undo 2: $\ell_i$ depends on row $i$ of $p$ through its target entry alone:
#
# $$\frac{\partial \ell_i}{\partial p_{iv}} = -\frac{[v = t_i]}{p_{i t_i}}, \qquad
# dp_{iv} = -\frac{\partial L}{\partial \ell_i} \, \frac{[v = t_i]}{p_{i t_i}}.$$
#
# Undo 1: softmax's backward (section 1) on row $i$, $dz_{iv} = p_{iv} \big( dp_{iv} - \sum_u dp_{iu} \, p_{iu} \big)$.
# The sum has one term, $u = t_i$, and it equals $-\partial L / \partial \ell_i$, so
#
# $$dz_{iv} = \frac{\partial L}{\partial \ell_i} \Big( p_{iv} - [v = t_i] \Big), \qquad
# \frac{\partial L}{\partial z_i} = \mathrm{dout} \, \frac{\mathrm{keep}_i}{n} \, \big( p_i - e_{t_i} \big),$$
#
# with $e_{t_i}$ the one-hot vector of the target. Softmax's $V \times V$ Jacobian collapses to a difference of
# two vectors because the target has a single entry; the mean divides by $n$, the positions that count, not by
# $N$; and a position with $\mathrm{keep}_i = 0$ gets no gradient, whatever its target. Each row of the gradient
# sums to 0, as every gradient through a softmax does (adding a constant to a row of logits changes nothing).

# %% [markdown]
# The package's `CrossEntropyLoss` (with `ignore_index`) gives the same gradient, and the checker compares it
# with finite differences on a batch of sequences whose padded positions are ignored:

# %%
loss_layer = CrossEntropyLoss(ignore_index=ignore_index)
loss = loss_layer(logits, targets)
dlogits_package = loss_layer.backward(dout)
print(f"loss {float(loss):.4f}; gradient by hand, then the package's:\n", dlogits_by_hand, "\n", dlogits_package)
assert np.allclose(dlogits_by_hand, dlogits_package) and np.allclose(dlogits_one_line, dlogits_package)
assert np.allclose(dlogits_package[targets == ignore_index], 0) and np.allclose(dlogits_package.sum(axis=1), 0)

padded_targets = rng.integers(0, 6, (2, 5))
padded_targets[:, -2:] = ignore_index                                 # the last two positions of each row: padding
crossentropy_report = check_module(CrossEntropyLoss(ignore_index=ignore_index),
                                   [rng.standard_normal((2, 5, 6)), padded_targets])
print(crossentropy_report.inputs[0].describe())
crossentropy_report.assert_ok(1e-7)

# %% [markdown]
# ## 5. What a wrong backward looks like to the checker
# Two classic mistakes, written as subclasses whose only change is the broken `backward` (a
# demonstration of a bug, not a replacement for the package's code):
#
# * LayerNorm without the variance path (forgetting that $\sigma^2$ depends on $x$);
# * softmax with only the diagonal of its Jacobian.
#
# **Exercise 5** (1 point). Write the first: `LayerNormWithoutVariancePath`, a subclass of
# `LayerNorm` whose `backward(dout)` (`dout` of shape $(\dots, C)$) accumulates the right `gamma.grad` and
# `beta.grad` but returns the gradient at $x$ *without* the term that the variance path of section 2 (`dvar`)
# adds. The check asserts the checker catches it, in the input and not in the parameters. The second mistake
# is given.

# %% [solution] layernorm_without_variance_path
### BEGIN SOLUTION
class LayerNormWithoutVariancePath(LayerNorm):
    def backward(self, dout):
        g = dout * self.gamma.data
        self.gamma.grad += np.sum(dout * self.xhat, axis=tuple(range(dout.ndim - 1)))
        self.beta.grad += np.sum(dout, axis=tuple(range(dout.ndim - 1)))
        return self.rstd * (g - g.mean(axis=-1, keepdims=True))          # the xhat * mean(g xhat) term is missing
### END SOLUTION

# %% [check 1] check_layernorm_without_variance_path
assert issubclass(LayerNormWithoutVariancePath, LayerNorm), "a subclass of LayerNorm"
wrong_layernorm = check_module(LayerNormWithoutVariancePath(6), [rng.standard_normal((2, 3, 6))])
### BEGIN HIDDEN TESTS
assert [f.name for f in wrong_layernorm.failures(1e-7)] == ["input 0"], \
    "the checker should fail the input only: the parameter gradients stay right"
assert wrong_layernorm.worst_input_error > 1e-2
probe = LayerNormWithoutVariancePath(6)
x_probe, dout_probe = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
probe(x_probe)
g_probe = dout_probe * probe.gamma.data
expected = probe.rstd * (g_probe - g_probe.mean(axis=-1, keepdims=True))
assert np.allclose(probe.backward(dout_probe), expected), "the gradient at x, less the variance path's term"
### END HIDDEN TESTS

# %% [markdown]
# A correct backward scores a relative error around $10^{-10}$ in float64; a wrong one is off by a
# visible fraction, and the report names the input and the coordinate that is worst.

# %%
class SoftmaxWithDiagonalJacobian(Softmax):
    def backward(self, dout):
        return self.y * dout                                             # only the Jacobian's diagonal


wrong_reports = {
    "LayerNorm without variance path": wrong_layernorm,
    "softmax, diagonal Jacobian only": check_module(SoftmaxWithDiagonalJacobian(), [rng.standard_normal((3, 6))]),
}
for name, report in wrong_reports.items():
    print(f"{name}: passed={report.passed(1e-7)}")
    for failure in report.failures(1e-7):
        print("   ", failure.describe())
    assert not report.passed(1e-7) and report.worst_input_error > 1e-2

# %% [markdown]
# ## The picture: relative errors of right and wrong backward passes, and the choice of step
# Left: the worst relative error of each check on a log scale; the dashed line is the bar the test
# suite uses ($10^{-7}$). Right: the checker's error for LayerNorm as the finite-difference step $\varepsilon$
# shrinks: the truncation error falls like $\varepsilon^2$ until rounding error (about $10^{-16} / \varepsilon$)
# takes over, which is why the checker uses $\varepsilon = 10^{-5}$ and why it runs in float64.

# %%
errors = {"softmax": check_module(Softmax(), [rng.standard_normal((3, 6))]).worst_input_error,
          "LayerNorm": layernorm_report.worst_input_error, **attention_errors,
          "cross-entropy": crossentropy_report.worst_input_error,
          **{name: report.worst_input_error for name, report in wrong_reports.items()}}
steps = np.logspace(-1, -10, 19)
step_errors = [check_module(LayerNorm(6), [np.random.default_rng(1).standard_normal((2, 6))],
                            eps=step).worst_input_error for step in steps]

fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
colors = ["tab:red" if name in wrong_reports else "tab:green" for name in errors]
left.barh(list(errors), [max(value, 1e-17) for value in errors.values()], color=colors)
left.set_xscale("log"); left.axvline(1e-7, ls="--", color="k"); left.set_xlabel("worst relative error")
left.invert_yaxis()
right.loglog(steps, step_errors, "o-"); right.set_xlabel("finite-difference step ε")
right.set_ylabel("relative error, LayerNorm"); right.axvline(1e-5, ls=":", color="k")
plt.tight_layout(); plt.show()

assert all(errors[name] < 1e-7 for name in errors if name not in wrong_reports)
assert min(step_errors) < 1e-8 and step_errors[0] > 1e-4
