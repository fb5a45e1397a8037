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

Each exercise has its week of the course plan (`WEEKS`; docs/gen_lists.py writes docs/guide/course-plan.md from
them) and the exercises it builds on: those the gradient-check cases of its layers run (tests/test_course_plan.py
traces them) and those whose derivation its own restates, which a copy made to derive leaves out with it.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    name: str            # prefix of its regions' names, e.g. "layernorm"
    layers: tuple        # the gradient-check catalogue rows it is graded on, e.g. ("LayerNorm",)
    fast_files: tuple = ()   # files of minitransformer/fast/ that hold an answer; a student copy leaves them out
    week: int = 0        # its week of the course plan (WEEKS; docs/guide/course-plan.md)
    builds_on: tuple = ()    # exercises done before it: those its layers' cases run, and those its derivation reuses


@dataclass(frozen=True)
class Week:
    number: int
    topic: str
    notebooks: tuple     # the notebooks read that week, by number ("04": notebooks/04_backprop_by_hand.ipynb)


# A ten-week course, each notebook in one week; an exercise's week is never before those of what it builds on
WEEKS = [
    Week(1, "Gradients by hand: linear maps, activations, dropout", ("01", "06")),
    Week(2, "Softmax, cross-entropy and normalisation, derived", ("04",)),
    Week(3, "Attention and its heads", ("14", "15")),
    Week(4, "Tokens, positions and the Transformer block", ("02", "03", "11")),
    Week(5, "Training a small GPT", ("05", "12")),
    Week(6, "Encoders and encoder-decoders", ("08", "09", "20", "21")),
    Week(7, "Positions inside attention", ("07",)),
    Week(8, "Long sequences", ("13", "17")),
    Week(9, "The modern decoder and fine-tuning", ("10", "16")),
    Week(10, "Learning from preferences", ("18", "19")),
]

EXERCISES = [
    Exercise("linear", ("Linear",), ("linear",), week=1),
    Exercise("relu", ("ReLU",), week=1),
    Exercise("gelu", ("GELU",), ("activations",), week=1),
    Exercise("silu", ("SiLU",), week=1),
    Exercise("softmax", ("Softmax",), ("softmax", "attention"), week=2),   # fast attention imports it, so it goes too
    Exercise("layernorm", ("LayerNorm",), ("layernorm",), week=2),
    Exercise("rmsnorm", ("RMSNorm",), week=2, builds_on=("layernorm",)),   # the modern (Llama-style) decoder
    Exercise("dropout", ("Dropout",), week=1),                             # the backward of the training path
    Exercise("embedding", ("Embedding",), week=4),
    Exercise("positional", ("SinusoidalPositionalEncoding", "LearnedPositionalEmbedding"), week=4),  # the table; its gradient
    Exercise("attention", ("ScaledDotProductAttention",), ("attention",), week=3, builds_on=("softmax",)),
    Exercise("multihead", ("MultiHeadAttention",), week=3, builds_on=("attention", "linear", "softmax")),
    Exercise("feedforward", ("FeedForward",), week=4, builds_on=("gelu", "linear", "relu")),
    Exercise("swiglu", ("SwiGLU",), week=4, builds_on=("linear", "silu")),
    Exercise("block", ("TransformerBlock",), week=4, builds_on=(
        "attention", "dropout", "feedforward", "gelu", "layernorm", "linear", "multihead", "relu", "rmsnorm", "silu",
        "softmax", "swiglu")),
    Exercise("decoder_block", ("DecoderBlock",), week=6, builds_on=(
        "attention", "block", "dropout", "feedforward", "layernorm", "linear", "multihead", "relu", "softmax")),
    Exercise("lm_head", ("TiedLMHead",), week=5, builds_on=("embedding", "linear")),   # the tied head's share of the embedding's gradient
    Exercise("crossentropy", ("CrossEntropyLoss",), week=2, builds_on=("softmax",)),
    Exercise("rope", ("RotaryEmbedding",), week=7),
    Exercise("alibi", ("ALiBi",), week=7, builds_on=("attention",)),
    Exercise("relative_position", ("RelativePositionAttention",), week=7, builds_on=("attention", "softmax")),  # Shaw et al.'s relative keys
    Exercise("skew", ("RelativePositionAttention",), week=7, builds_on=("attention", "softmax")),  # Music Transformer's skew and its adjoint
    Exercise("relative_values", ("RelativeValueAttention",), week=7, builds_on=("attention", "relative_position", "softmax")),
    Exercise("banded", ("BandedAttention",), week=8, builds_on=("attention", "softmax")),   # sliding-window attention on the band
    Exercise("tiled_attention", ("TiledAttention",), ("tiled_attention", "attention"), week=8,   # fast attention imports it
             builds_on=("attention", "softmax")),
    Exercise("transformer_xl", ("TransformerXLBlock",), week=8, builds_on=(      # the memory's stop-gradient
        "attention", "block", "feedforward", "gelu", "layernorm", "linear", "multihead", "rope", "softmax")),
    Exercise("lora", ("LoRALinear",), week=9, builds_on=("linear",)),
    Exercise("log_probs", ("TokenLogProbs",), week=10, builds_on=("crossentropy",)),   # per-token log-probabilities of RLHF
    Exercise("ranking_loss", ("PairwiseRankingLoss",), week=10),                # InstructGPT's reward model
    Exercise("clipped_surrogate", ("ClippedSurrogateLoss",), week=10),         # PPO's clipped objective
    Exercise("value_loss", ("ValueLoss",), week=10),                           # PPO's value head
]
# In notebooks/ only (`make --notebooks`): the nbgrader cells whose grade_id starts with the name; no region, no
# layer; the week is its notebook's
NOTEBOOK_EXERCISES = [
    Exercise("worked_attention", (), week=1),
    Exercise("sinusoid_shift", (), week=4),
    Exercise("distance_bias", (), week=7),
    Exercise("warmup_rule", (), week=5),
    Exercise("heads_as_a_sum", (), week=3),
    Exercise("online_softmax", (), week=8),
    Exercise("penalised_reward", (), week=10),
    Exercise("operation_counts", (), week=3),
]


def exercise_of(region_name):
    """The exercise a solution region belongs to: "layernorm.backward" -> "layernorm"."""
    return region_name.split(".")[0]


def exercise_named(name):
    """The Exercise called `name`; KeyError listing the known ones otherwise."""
    for exercise in EXERCISES:
        if exercise.name == name:
            return exercise
    raise KeyError(f"no exercise named {name!r}; the exercises are {', '.join(e.name for e in EXERCISES)}")


def built_on(names):
    """The exercises `names` and every exercise that builds on one of them, directly or not, in catalogue order."""
    found, grown = set(names), True
    while grown:
        more = {exercise.name for exercise in EXERCISES if found & set(exercise.builds_on)} - found
        found, grown = found | more, bool(more)
    return [exercise.name for exercise in EXERCISES if exercise.name in found]
