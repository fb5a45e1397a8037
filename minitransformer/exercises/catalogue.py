"""The exercises an instructor can assign. An exercise is named after a layer (`layernorm`), owns the solution
regions named after it (`layernorm.forward`, `layernorm.backward`), is graded on the gradient-check cases of its
layers, and is a pytest marker of a student copy (`pytest -m layernorm`). An assigned layer's fast form would be an
answer to call: a copy leaves its file out.

Every class of layers/ and variants/ with a hand-written backward is one, but three. Compositions are where their
backward is a lecture's derivation: the feed-forward (the chain rule), the blocks (a residual passes dout on and adds
its branch's gradient; a decoder's memory gets cross-attention's share only, Transformer-XL's none). Not exercises:
the models that run their blocks in order (GPT, TransformerXL, LoRAModel: nothing derived). TiledAttention's exercise
is its backward (FlashAttention-2's Algorithm 2); its forward's derivation, the online softmax step, is notebook 17's
exercise (online_softmax), whose hidden tests call the package's step: a region there would orphan that grade cell.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    name: str            # prefix of its regions' names, e.g. "layernorm"
    layers: tuple        # the gradient-check catalogue rows it is graded on, e.g. ("LayerNorm",)
    fast_files: tuple = ()   # files of minitransformer/fast/ that hold an answer; a student copy leaves them out


EXERCISES = [
    Exercise("linear", ("Linear",), ("linear",)),
    Exercise("relu", ("ReLU",)),
    Exercise("gelu", ("GELU",), ("activations",)),
    Exercise("silu", ("SiLU",)),
    Exercise("softmax", ("Softmax",), ("softmax", "attention")),   # fast attention imports it, so it goes too
    Exercise("layernorm", ("LayerNorm",), ("layernorm",)),
    Exercise("rmsnorm", ("RMSNorm",)),                              # the modern (Llama-style) decoder
    Exercise("dropout", ("Dropout",)),                              # the backward of the training path
    Exercise("embedding", ("Embedding",)),
    Exercise("positional", ("SinusoidalPositionalEncoding", "LearnedPositionalEmbedding")),  # the table; its gradient
    Exercise("attention", ("ScaledDotProductAttention",), ("attention",)),
    Exercise("multihead", ("MultiHeadAttention",)),
    Exercise("feedforward", ("FeedForward",)),
    Exercise("swiglu", ("SwiGLU",)),
    Exercise("block", ("TransformerBlock",)),
    Exercise("decoder_block", ("DecoderBlock",)),
    Exercise("lm_head", ("TiedLMHead",)),                           # the tied head's share of the embedding's gradient
    Exercise("crossentropy", ("CrossEntropyLoss",)),
    Exercise("rope", ("RotaryEmbedding",)),
    Exercise("alibi", ("ALiBi",)),
    Exercise("relative_position", ("RelativePositionAttention",)),  # Shaw et al.'s relative keys
    Exercise("skew", ("RelativePositionAttention",)),               # Music Transformer's skew and its adjoint
    Exercise("relative_values", ("RelativeValueAttention",)),
    Exercise("banded", ("BandedAttention",)),                       # sliding-window attention on the band
    Exercise("tiled_attention", ("TiledAttention",), ("tiled_attention", "attention")),  # fast attention imports it
    Exercise("transformer_xl", ("TransformerXLBlock",)),            # the memory's stop-gradient
    Exercise("lora", ("LoRALinear",)),
    Exercise("log_probs", ("TokenLogProbs",)),                      # per-token log-probabilities of RLHF
    Exercise("ranking_loss", ("PairwiseRankingLoss",)),             # InstructGPT's reward model
    Exercise("clipped_surrogate", ("ClippedSurrogateLoss",)),      # PPO's clipped objective
    Exercise("value_loss", ("ValueLoss",)),                         # PPO's value head
]
# In notebooks/ only (`make --notebooks`): the nbgrader cells whose grade_id starts with the name; no region, no layer
NOTEBOOK_EXERCISES = [Exercise(name, ()) for name in ("worked_attention", "sinusoid_shift", "distance_bias", "warmup_rule", "heads_as_a_sum", "online_softmax", "penalised_reward", "operation_counts")]


def exercise_of(region_name):
    """The exercise a solution region belongs to: "layernorm.backward" -> "layernorm"."""
    return region_name.split(".")[0]


def exercise_named(name):
    """The Exercise called `name`; KeyError listing the known ones otherwise."""
    for exercise in EXERCISES:
        if exercise.name == name:
            return exercise
    raise KeyError(f"no exercise named {name!r}; the exercises are {', '.join(e.name for e in EXERCISES)}")
