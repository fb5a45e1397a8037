"""What an attention head does, as three numbers: previous-token, prefix-matching and copying scores.

Olsson et al. (2022, "In-context learning and induction heads", §2 and the appendix on head scores) recognise
an induction head by two properties, and the head of the layer below it that it reads by a third:

* **prefix matching**: on a repeated sequence, the attention a query in the repeat puts on the token right after
  its own token's earlier occurrence (1 for a perfect induction head; a head attending uniformly over t + 1
  positions scores 1 / (t + 1) on average);
* **copying**: whether the head's OV circuit, read from token to logit, raises the logit of the token it attends
  to. Following Elhage et al. (2021, "A mathematical framework for Transformer circuits"), the circuit is the
  V x V matrix M = W_E W_V^h W_O^h W_U, and the score is sum(λ) / sum(|λ|) over its eigenvalues λ: 1 when M
  only copies (all eigenvalues positive), -1 when it only suppresses, near 0 for a random map;
* **previous token**: the attention from each position t to t - 1 (1 for a head that always looks one back).

The first and last read attention weights, (B, H, T, T) arrays such as `attn.attention.alpha` after a forward.
`copying_scores` reads a pre-norm GPT's weights; the LayerNorms enter as their gains and, for LayerNorm, the
projection that removes the mean; their division by the standard deviation, a positive scale, changes no
score and is left out, as are the biases and the position embeddings (the score is about tokens).

Left out: Olsson et al.'s ablation-based measures and any score of composition between heads.
"""

import numpy as np

from ..layers.layernorm import LayerNorm
from ..layers.lm_head import TiedLMHead


def _check_weights(alpha, where):
    alpha = np.asarray(alpha)
    if alpha.ndim != 4 or alpha.shape[2] != alpha.shape[3]:
        raise ValueError(f"{where} expected attention weights (B, H, T, T), got shape {alpha.shape}")
    return alpha


def previous_token_scores(alpha):
    """alpha (B, H, T, T), T >= 2 -> (H,): the mean weight from position t to t - 1, over b and t >= 1."""
    alpha = _check_weights(alpha, "previous_token_scores")
    T = alpha.shape[-1]
    if T < 2:
        raise ValueError(f"previous_token_scores expected at least 2 positions, got T={T}")
    return alpha[:, :, np.arange(1, T), np.arange(T - 1)].mean(axis=(0, 2))              # (H,)


def prefix_matching_scores(alpha, target):
    """alpha (B, H, T, T), target int (B, T) -> (H,): the mean of alpha[b, h, t, target[b, t]] over the
    queries with target[b, t] >= 0 (`RepeatedSegmentTask.batch`, tasks/repeated_segment.py, gives them)."""
    alpha, target = _check_weights(alpha, "prefix_matching_scores"), np.asarray(target)
    if target.shape != (alpha.shape[0], alpha.shape[2]):
        raise ValueError(f"prefix_matching_scores expected target (B, T) = {(alpha.shape[0], alpha.shape[2])}, "
                         f"got {target.shape}")
    batch, query = np.nonzero(target >= 0)
    if batch.size == 0:
        raise ValueError("prefix_matching_scores expected at least one query with a target >= 0, got none")
    return alpha[batch, :, query, target[batch, query]].mean(axis=0)                    # (H,)


def copying_score(circuit):
    """circuit (V, V), a token -> logit map -> sum(λ) / sum(|λ|) over its eigenvalues, in [-1, 1]."""
    eigenvalues = np.linalg.eigvals(np.asarray(circuit, dtype=np.float64))
    return float(eigenvalues.real.sum() / np.abs(eigenvalues).sum())


def ov_circuits(model, layer):
    """The OV circuits of one layer's heads of a pre-norm GPT: (H, V, V), M_h = W_E N_1 W_V^h W_O^h N_f W_U.

    N_1 and N_f stand for the block's first LayerNorm and the final one: P diag(γ), P = I - 1 1^T / C
    removing the mean (RMSNorm: diag(γ) alone). W_U is W_E^T for tied weights.
    """
    if model.ln_f is None:
        raise ValueError(f"ov_circuits expected a pre-norm GPT (a final norm before the LM head), got {model!r}")
    block = model.blocks[layer]
    attn = block.attn
    embedding = model.token_embedding.weight.data.astype(np.float64)                    # (V, C)
    unembedding = (embedding.T if isinstance(model.lm_head, TiedLMHead)
                   else model.lm_head.weight.data.astype(np.float64))                   # (C, V)
    norm_in, norm_out = _norm_matrix(block.ln1), _norm_matrix(model.ln_f)               # (C, C)
    hs, group = attn.head_size, attn.n_heads // attn.n_kv_heads
    circuits = []
    for head in range(attn.n_heads):
        kv = head // group                                                              # its key/value head
        w_v = attn.w_v.data[:, kv * hs:(kv + 1) * hs].astype(np.float64)                # (C, hs)
        w_o = attn.w_o.data[head * hs:(head + 1) * hs].astype(np.float64)               # (hs, C)
        circuits.append(embedding @ norm_in @ w_v @ w_o @ norm_out @ unembedding)        # (V, V)
    return np.array(circuits)


def _norm_matrix(norm):
    """(C, C): a norm layer as a linear map, up to its positive scale: P diag(γ) (LayerNorm) or diag(γ)."""
    gain = np.diag(norm.gamma.data.astype(np.float64))
    if not isinstance(norm, LayerNorm):
        return gain
    C = gain.shape[0]
    return (np.eye(C) - np.full((C, C), 1 / C)) @ gain


def copying_scores(model):
    """(n_layers, H): `copying_score` of every head's OV circuit (`ov_circuits`)."""
    return np.array([[copying_score(circuit) for circuit in ov_circuits(model, layer)]
                     for layer in range(len(model.blocks))])


def head_scores(model, x, target):
    """Run `model` on x int (B, T) and score every head: dict of (n_layers, H) arrays "previous_token",
    "prefix_matching" (with target int (B, T), as in `prefix_matching_scores`) and "copying"."""
    with model.evaluating():
        model(x)
    alphas = [block.attn.attention.alpha for block in model.blocks]                    # each (B, H, T, T)
    return {"previous_token": np.array([previous_token_scores(alpha) for alpha in alphas]),
            "prefix_matching": np.array([prefix_matching_scores(alpha, target) for alpha in alphas]),
            "copying": copying_scores(model)}
