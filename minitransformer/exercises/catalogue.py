"""The exercises an instructor can assign, and which layers each one feeds.

An exercise is named after a layer (`layernorm`), owns the solution regions whose names start with it
(`layernorm.forward`, `layernorm.backward`), and is graded on the gradient-check catalogue's cases of
that layer (`gradcheck_cases.all_cases()`, rows named `LayerNorm`). It is also a pytest marker of a
student copy (`pytest -m layernorm`) and an argument of `exercises check` (`check.py`).

Blanking a building block breaks what calls it (with `softmax` assigned, attention, the block and GPT
raise until softmax is written): `exercises make` finds these layers by running the catalogue once in
the new copy and lists them in `exercises.json` (`unavailable_layers`); `exercises grade` grades each
exercise with the reference's building blocks, so a mistake costs points in one row only. A fast form
of an assigned layer would be an answer to call, so the copy leaves its file out (`fast_files`);
variants call the layer they build on, so they wait for its exercise.

Left out: exercises on the composites (FeedForward, TransformerBlock, GPT), whose backward passes only
chain their children's.
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
    Exercise("softmax", ("Softmax",), ("softmax",)),               # fast attention imports it, so it goes too
    Exercise("layernorm", ("LayerNorm",), ("layernorm",)),
    Exercise("embedding", ("Embedding",)),
    Exercise("attention", ("ScaledDotProductAttention",), ("attention",)),
    Exercise("multihead", ("MultiHeadAttention",)),
    Exercise("crossentropy", ("CrossEntropyLoss",)),
    Exercise("rmsnorm", ("RMSNorm",)),                              # the modern decoder (issue 28)
    Exercise("swiglu", ("SwiGLU",)),
    Exercise("ranking_loss", ("PairwiseRankingLoss",)),             # InstructGPT's reward model (issue 30)
    Exercise("clipped_surrogate", ("ClippedSurrogateLoss",)),      # PPO's clipped objective
    Exercise("value_loss", ("ValueLoss",)),                         # PPO's value head
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
