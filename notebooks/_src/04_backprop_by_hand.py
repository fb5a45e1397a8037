# %% [markdown]
# # 4. Backpropagation by hand: softmax, LayerNorm, attention
#
# **Sources.** The softmax of the survey note (`seeds/004`, §1.2, Definition 1.1) and of the notes'
# §1.1 (`seeds/002`); LayerNorm as the notes (§1.3, footnote 9) and the Si Wu slides ("Layer Norm")
# define it; attention as in the notes' §1.1 and the Kumar slides' "most important formula"
# (`seeds/003`). None of the lectures derives a backward pass; this notebook does, one step at a time,
# and checks each derivation against the package's gradient checker (`check_module`), which compares
# `backward` with central differences.
#
# Convention: `dy` is the gradient of the loss with respect to a layer's output (the upstream
# gradient); `backward(dy)` returns the gradient with respect to the input.

# %%
import matplotlib.pyplot as plt
import numpy as np

from minitransformer import LayerNorm, ScaledDotProductAttention, Softmax, check_module, softmax
from minitransformer.layers.softmax import softmax_backward

rng = np.random.default_rng(0)
np.set_printoptions(precision=4, suppress=True)

# %% [markdown]
# ## 1. Softmax: the Jacobian, and why we never build it
# With y = softmax(x), y_i = e^{x_i} / Σ_j e^{x_j}. Differentiating the quotient:
#
# * ∂y_i/∂x_i = y_i − y_i², (the numerator and the sum both move)
# * ∂y_i/∂x_j = −y_i y_j for j ≠ i, (only the sum moves)
#
# i.e. J = diag(y) − y yᵀ, a symmetric matrix whose rows sum to 0 (adding a constant to every x
# changes nothing). The backward pass needs only the product Jᵀ dy:
#
# dx = (diag(y) − y yᵀ) dy = y ⊙ (dy − (y · dy)),
#
# one multiply, one dot product and one subtraction, O(T) instead of the O(T²) matrix. That is the
# package's `softmax_backward`.

# %%
x = rng.standard_normal(5)
y = softmax(x)
J = np.diag(y) - np.outer(y, y)            # the full Jacobian, built only to check the shortcut
dy = rng.standard_normal(5)
print("J\n", J)
assert np.allclose(J, J.T) and np.allclose(J.sum(axis=1), 0)
assert np.allclose(J.T @ dy, softmax_backward(y, dy))
report = check_module(Softmax(), [rng.standard_normal((3, 4, 6))])
print(report.inputs[0].describe())
report.assert_ok(1e-7)

# %% [markdown]
# ## 2. LayerNorm's backward, step by step
# The forward pass over one vector x of length C, as the package's `LayerNorm.forward` numbers it:
#
# 1. μ = mean(x) 2. c = x − μ 3. σ² = mean(c²) 4. r = 1/√(σ² + ε) 5. x̂ = c r 6. y = γ x̂ + β
#
# Backward, undoing the steps in reverse:
#
# * 6 → dγ = Σ dy ⊙ x̂, dβ = Σ dy, and g := dL/dx̂ = dy ⊙ γ.
# * 5 → x̂ depends on x through c (directly) and through r (via σ²): dc gets g r, and
#   dr = Σ_j g_j c_j.
# * 4, 3 → dσ² = dr · (−½) r³, and σ² = mean(c²) sends 2 c_j / C · dσ² back to c.
# * 2, 1 → c = x − μ: dx = dc − mean(dc).
#
# Collecting the terms and writing them with x̂ gives the one-line form in the package's docstring:
#
# dx = r (g − mean(g) − x̂ · mean(g ⊙ x̂)).
#
# The cell below runs the step-by-step version, compares it with the one-liner inside `LayerNorm`, and
# then lets the checker compare both with finite differences.

# %%
C, eps = 6, 1e-5
layer = LayerNorm(C, eps=eps)
layer.gamma.data[...] = rng.standard_normal(C)
x = rng.standard_normal(C)
out = layer(x)
dy = rng.standard_normal(C)

mu = x.mean(); c = x - mu; var = (c * c).mean(); r = 1 / np.sqrt(var + eps); xhat = c * r
g = dy * layer.gamma.data                      # undo 6
dc = g * r                                     # undo 5, the direct path
dr = np.sum(g * c)                             # undo 5, the path through r
dvar = dr * (-0.5) * r**3                      # undo 4
dc += 2 * c / C * dvar                         # undo 3
dx_by_hand = dc - dc.mean()                    # undo 2 and 1
dx_package = layer.backward(dy)
print("step by step:", dx_by_hand, "\npackage:     ", dx_package)
assert np.allclose(dx_by_hand, dx_package)
assert np.allclose(dx_package, r * (g - g.mean() - xhat * np.mean(g * xhat)))

layernorm_report = check_module(LayerNorm(C), [rng.standard_normal((2, 3, C))])
for comparison in layernorm_report.inputs + layernorm_report.params:
    print(comparison.describe())
layernorm_report.assert_ok(1e-7)

# %% [markdown]
# ## 3. Attention's backward
# Forward (the package's `ScaledDotProductAttention`, numbered as in its source):
# 1. S = q kᵀ 2. S ← s · S (s = 1/√d_k) 3. masked entries ← −∞ 4. α = softmax(S) row by row
# 5. out = α v.
#
# Backward:
# * 5 → dα = d_out vᵀ, dv = αᵀ d_out (the two factors of a matrix product swap roles);
# * 4 → dS = softmax's Jacobian-vector product, row by row: α ⊙ (dα − rowsum(dα ⊙ α));
# * 3 → a masked entry has α = 0, so its dS is 0 already: the mask needs no code of its own;
# * 2 → multiply by s;
# * 1 → dq = dS k, dk = dSᵀ q.
#
# The cell repeats these five lines with plain NumPy and compares them with the package, then asks the
# checker about q, k and v, with and without the causal mask.

# %%
T, d_k, d_v = 4, 3, 2
q, k, v = rng.standard_normal((T, d_k)), rng.standard_normal((T, d_k)), rng.standard_normal((T, d_v))
attention = ScaledDotProductAttention(causal=True)
attention(q, k, v)
dout = rng.standard_normal((T, d_v))
dq, dk, dv = attention.backward(dout)

alpha, s = attention.alpha, 1 / np.sqrt(d_k)
dalpha = dout @ v.T                                                  # undo 5
dv_by_hand = alpha.T @ dout
dS = alpha * (dalpha - np.sum(dalpha * alpha, axis=1, keepdims=True))   # undo 4 (and 3)
dS *= s                                                              # undo 2
dq_by_hand, dk_by_hand = dS @ k, dS.T @ q                            # undo 1
assert np.allclose(dq, dq_by_hand) and np.allclose(dk, dk_by_hand) and np.allclose(dv, dv_by_hand)
# under the causal mask the first query sees only the first key: its weight is 1 whatever the score,
# so that score gets no gradient and neither does the first query
print("dq of the first query:", dq[0])
assert np.allclose(dq[0], 0) and not np.allclose(dq[1:], 0)

attention_errors = {}
for causal in (False, True):
    report = check_module(ScaledDotProductAttention(causal=causal),
                          [rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 3))])
    report.assert_ok(1e-7)
    attention_errors[f"attention, causal={causal}"] = report.worst_input_error
print(attention_errors)

# %% [markdown]
# ## 4. What a wrong backward looks like to the checker
# Two classic mistakes, written as subclasses whose only change is the broken `backward` (a
# demonstration of a bug, not a replacement for the package's code):
#
# * LayerNorm without the variance path (forgetting that σ depends on x);
# * softmax with dx = y ⊙ dy, forgetting the −y yᵀ part of the Jacobian.
#
# A correct backward scores a relative error around 1e-10 in float64; a wrong one is off by a
# visible fraction, and the report names the input and the coordinate that is worst.

# %%
class LayerNormWithoutVariancePath(LayerNorm):
    def backward(self, dout):
        g = dout * self.gamma.data
        self.gamma.grad += np.sum(dout * self.xhat, axis=tuple(range(dout.ndim - 1)))
        self.beta.grad += np.sum(dout, axis=tuple(range(dout.ndim - 1)))
        return self.rstd * (g - g.mean(axis=-1, keepdims=True))          # the x̂ · mean(g x̂) term is missing


class SoftmaxWithDiagonalJacobian(Softmax):
    def backward(self, dout):
        return self.y * dout                                             # the − y (y · dout) term is missing


wrong_reports = {
    "LayerNorm without variance path": check_module(LayerNormWithoutVariancePath(6), [rng.standard_normal((2, 3, 6))]),
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
# suite uses (1e-7). Right: the checker's error for LayerNorm as the finite-difference step ε
# shrinks: the truncation error falls like ε² until rounding error (about 1e-16 / ε) takes over, which
# is why the checker uses ε = 1e-5 and why it runs in float64.

# %%
errors = {"softmax": check_module(Softmax(), [rng.standard_normal((3, 6))]).worst_input_error,
          "LayerNorm": layernorm_report.worst_input_error, **attention_errors,
          **{name: report.worst_input_error for name, report in wrong_reports.items()}}
steps = np.logspace(-1, -10, 19)
step_errors = [check_module(LayerNorm(6), [np.random.default_rng(1).standard_normal((2, 6))], eps=step,
                            check_params=False).worst_input_error for step in steps]

fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
colors = ["tab:green"] * 4 + ["tab:red"] * 2
left.barh(list(errors), [max(value, 1e-17) for value in errors.values()], color=colors)
left.set_xscale("log"); left.axvline(1e-7, ls="--", color="k"); left.set_xlabel("worst relative error")
left.invert_yaxis()
right.loglog(steps, step_errors, "o-"); right.set_xlabel("finite-difference step ε")
right.set_ylabel("relative error, LayerNorm"); right.axvline(1e-5, ls=":", color="k")
plt.tight_layout(); plt.show()

assert all(errors[name] < 1e-7 for name in list(errors)[:4])
assert min(step_errors) < 1e-8 and step_errors[0] > 1e-4
