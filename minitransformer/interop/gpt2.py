"""GPT-2 weights in the Hugging Face layout <-> the project's GPT (Radford et al. 2019).

GPT-2 *is* this project's GPT in one configuration: pre-norm blocks, learned
positions, GELU with the tanh approximation, the output head tied to the token
embedding, LayerNorm eps 1e-5 and biases on every projection. Only the names
and one layout differ (the `transformer.` prefix is optional, as older
checkpoints lack it):

    Hugging Face                         shape        project
    wte.weight                           (V, C)       token_embedding.weight
    wpe.weight                           (max_len, C) position.weight
    h.i.ln_1.weight / .bias              (C,)         blocks.i.ln1.gamma / .beta
    h.i.attn.c_attn.weight               (C, 3C)      blocks.i.attn.w_q | w_k | w_v, side by side
    h.i.attn.c_attn.bias                 (3C,)        blocks.i.attn.b_q | b_k | b_v
    h.i.attn.c_proj.weight / .bias       (C, C)       blocks.i.attn.w_o / .b_o
    h.i.ln_2.weight / .bias              (C,)         blocks.i.ln2.gamma / .beta
    h.i.mlp.c_fc.weight / .bias          (C, d_ff)    blocks.i.ff.fc1.weight / .bias
    h.i.mlp.c_proj.weight / .bias        (d_ff, C)    blocks.i.ff.fc2.weight / .bias
    ln_f.weight / .bias                  (C,)         ln_f.gamma / .beta
    lm_head.weight                       (V, C)       the same matrix as wte (tied)

Hugging Face's `Conv1D` stores a weight as (in, out) and computes x @ W + b,
which is the project's own layout, so nothing is transposed. The fused
`c_attn` holds the query, key and value projections as three column blocks of
width C; inside each block head h owns columns h*hs .. (h+1)*hs, exactly how
`MultiHeadAttention` splits its heads, so a plain three-way split suffices.

Values may be NumPy arrays (e.g. `safetensors.numpy.load_file`) or PyTorch
tensors (`torch.load`, `model.state_dict()`); neither library is imported here.
The tokenizer is `tokenizers/gpt2.py` (`GPT2Tokenizer`), and a whole Hugging Face
folder (config, safetensors weights, tokenizer files) is read by `gpt2_directory.py`.
Left out: untied output heads, and the per-layer attention scaling options of
`GPT2Config`, which GPT-2 itself does not use (they raise an error).
"""

import re

import numpy as np

from ..models.gpt import GPT

# Older checkpoints also store the causal mask as a buffer; it is not a weight.
_MASK_BUFFERS = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)$")

# The per-block names that map one to one (Hugging Face suffix -> project suffix).
_BLOCK_NAMES = {
    "ln_1.weight": "ln1.gamma", "ln_1.bias": "ln1.beta",
    "attn.c_proj.weight": "attn.w_o", "attn.c_proj.bias": "attn.b_o",
    "ln_2.weight": "ln2.gamma", "ln_2.bias": "ln2.beta",
    "mlp.c_fc.weight": "ff.fc1.weight", "mlp.c_fc.bias": "ff.fc1.bias",
    "mlp.c_proj.weight": "ff.fc2.weight", "mlp.c_proj.bias": "ff.fc2.bias",
}
_TOP_NAMES = {"wte.weight": "token_embedding.weight", "wpe.weight": "position.weight",
              "ln_f.weight": "ln_f.gamma", "ln_f.bias": "ln_f.beta"}

# GPT2Config.activation_function values that are the tanh-approximated GELU of `layers.activations.GELU`
TANH_GELU_NAMES = ("gelu_new", "gelu_pytorch_tanh")


def as_numpy(value):
    """A NumPy array from an array or a PyTorch tensor (detached, on the CPU, floats widened to float64)."""
    if hasattr(value, "detach"):                      # a torch.Tensor; bfloat16 has no NumPy dtype
        value = value.detach().cpu()
        value = value.double() if value.is_floating_point() else value
        return value.numpy()
    return np.asarray(value)


def _strip(state_dict):
    """{name without `transformer.`: ndarray}, mask buffers dropped."""
    arrays = {}
    for name, value in state_dict.items():
        short = name.removeprefix("transformer.")
        if not _MASK_BUFFERS.search(short):
            arrays[short] = as_numpy(value)
    return arrays


def count_layers(names):
    """The number of blocks named `h.<i>.` (or `blocks.<i>.`) among `names`."""
    indices = {int(match.group(1)) for name in names if (match := re.match(r"(?:h|blocks)\.(\d+)\.", name))}
    return max(indices) + 1 if indices else 0


def gpt2_to_project(state_dict):
    """Rename and split a Hugging Face GPT-2 state dict into the project's parameter names.

    Args:
        state_dict: {name: array or tensor} as saved by `GPT2LMHeadModel` or `GPT2Model`.
    Returns:
        {project name: ndarray}, ready for `GPT.load_state_dict`.
    Raises:
        KeyError naming missing or unexpected entries; ValueError for an untied lm_head.
    """
    arrays = _strip(state_dict)
    head = arrays.pop("lm_head.weight", None)
    if head is not None and "wte.weight" in arrays and not np.array_equal(head, arrays["wte.weight"]):
        raise ValueError("gpt2_to_project: lm_head.weight differs from wte.weight; only tied heads (GPT-2's) are supported")
    n_layers = count_layers(arrays)
    expected = list(_TOP_NAMES) + [f"h.{i}.{suffix}" for i in range(n_layers)
                                   for suffix in (*_BLOCK_NAMES, "attn.c_attn.weight", "attn.c_attn.bias")]
    missing, unexpected = sorted(set(expected) - set(arrays)), sorted(set(arrays) - set(expected))
    if missing or unexpected:
        raise KeyError(f"gpt2_to_project: not a GPT-2 state dict; missing {missing}, unexpected {unexpected}")
    project = {_TOP_NAMES[name]: arrays[name] for name in _TOP_NAMES}
    for i in range(n_layers):
        for suffix, ours in _BLOCK_NAMES.items():
            project[f"blocks.{i}.{ours}"] = arrays[f"h.{i}.{suffix}"]
        w_q, w_k, w_v = np.split(arrays[f"h.{i}.attn.c_attn.weight"], 3, axis=-1)   # (C, 3C) -> 3 x (C, C)
        b_q, b_k, b_v = np.split(arrays[f"h.{i}.attn.c_attn.bias"], 3)               # (3C,) -> 3 x (C,)
        project.update({f"blocks.{i}.attn.{name}": value for name, value in
                        zip(("w_q", "w_k", "w_v", "b_q", "b_k", "b_v"), (w_q, w_k, w_v, b_q, b_k, b_v))})
    return project


def project_to_gpt2(arrays):
    """The way back: project names -> Hugging Face `GPT2LMHeadModel` names (with `transformer.`).

    Works for any dict keyed like `GPT.named_parameters()`, parameters or their gradients.
    `lm_head.weight` is the token embedding again, as in the tied original.
    """
    top = {ours: theirs for theirs, ours in _TOP_NAMES.items()}
    state = {f"transformer.{top[name]}": arrays[name] for name in top}
    for i in range(count_layers(arrays)):
        ours = f"blocks.{i}."
        for suffix, project_suffix in _BLOCK_NAMES.items():
            state[f"transformer.h.{i}.{suffix}"] = arrays[ours + project_suffix]
        state[f"transformer.h.{i}.attn.c_attn.weight"] = np.concatenate(
            [arrays[ours + f"attn.w_{name}"] for name in "qkv"], axis=-1)                # 3 x (C, C) -> (C, 3C)
        state[f"transformer.h.{i}.attn.c_attn.bias"] = np.concatenate(
            [arrays[ours + f"attn.b_{name}"] for name in "qkv"])                         # 3 x (C,) -> (3C,)
    state["lm_head.weight"] = arrays["token_embedding.weight"]
    return state


def _read_config(config, n_heads):
    """(n_heads, layer_norm_eps) from a `GPT2Config`, its `config.json` dict, or n_heads alone."""
    if config is None:
        if n_heads is None:
            raise ValueError("from_gpt2_state_dict needs n_heads (or a GPT2Config): the weights do not say it")
        return n_heads, 1e-5
    get = config.get if isinstance(config, dict) else lambda key, default=None: getattr(config, key, default)
    activation = get("activation_function", "gelu_new")
    if activation not in TANH_GELU_NAMES:
        raise ValueError(f"from_gpt2_state_dict expected activation_function in {TANH_GELU_NAMES} "
                         f"(GELU, tanh approximation), got {activation!r}")
    if not get("tie_word_embeddings", True):
        raise ValueError("from_gpt2_state_dict supports tied output heads only (tie_word_embeddings=True, as GPT-2)")
    if not get("scale_attn_weights", True) or get("scale_attn_by_inverse_layer_idx", False):
        raise ValueError("from_gpt2_state_dict supports GPT-2's attention scale 1/sqrt(hs) only")
    return (get("n_head") if n_heads is None else n_heads), get("layer_norm_epsilon", 1e-5)


def from_gpt2_state_dict(state_dict, n_heads=None, config=None, dtype=np.float64, dropout=0.0):
    """Build a GPT that computes what the GPT-2 with these weights computes.

    Args:
        state_dict: Hugging Face GPT-2 weights {name: ndarray or torch.Tensor}.
        n_heads: H; needed unless `config` gives it (`n_head`), and wins over it.
        config: optional `GPT2Config` or the dict of its `config.json`.
        dtype: float64 (default, for exact comparisons) or float32 (half the memory).
        dropout: drop probability for fine-tuning (GPT-2 trained with 0.1).
    Returns:
        GPT with V, C, n_layers, d_ff and max_len read from the weights' shapes.
    """
    n_heads, eps = _read_config(config, n_heads)
    project = gpt2_to_project(state_dict)
    vocab_size, d_model = project["token_embedding.weight"].shape
    max_len = project["position.weight"].shape[0]
    d_ff = project["blocks.0.ff.fc1.weight"].shape[1] if "blocks.0.ff.fc1.weight" in project else 4 * d_model
    model = GPT(vocab_size, d_model, n_heads, count_layers(project), d_ff, max_len, norm="pre", positional="learned",
                tie_weights=True, dropout=dropout, activation="gelu", dtype=dtype, rng=0)
    for layer_norm in [model.ln_f] + [ln for block in model.blocks for ln in (block.ln1, block.ln2)]:
        layer_norm.eps = eps
    model.load_state_dict({name: np.asarray(value, dtype=dtype) for name, value in project.items()})   # explicit cast
    return model


def to_gpt2_state_dict(model):
    """{Hugging Face name: ndarray copy} of a GPT-2-shaped GPT, for `GPT2LMHeadModel.load_state_dict`
    (after `torch.from_numpy`). Raises ValueError if the model is not GPT-2-shaped."""
    config = model.config
    wanted = dict(norm="pre", positional="learned", tie_weights=True, activation="gelu")
    differing = {key: config[key] for key, value in wanted.items() if config[key] != value}
    if differing:
        raise ValueError(f"to_gpt2_state_dict: GPT-2 needs {wanted}; this model has {differing}")
    return project_to_gpt2(model.state_dict())
