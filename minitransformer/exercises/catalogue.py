"""The exercises an instructor can assign, and which layers each one feeds.

An exercise is named after a layer (`layernorm`) and owns the solution
regions whose names start with it (`layernorm.forward`, `layernorm.backward`).
It is graded on the gradient-check catalogue's cases of its own layer
(`gradcheck_cases.all_cases()`, rows named `LayerNorm`).

Building blocks and composites. Blanking a building block breaks every layer
that calls it: in a student copy with `softmax` assigned, attention,
multi-head attention, the Transformer block and GPT raise too, until the
student has written softmax. The two commands treat this as follows:

* `exercises make` finds these layers by running every gradient-check case
  once in the new copy, prints them, and records them in `exercises.json`
  (`unavailable_layers`, each with the exercises it waits for); every other
  layer works unchanged.
* `exercises grade` grades every exercise on its own: the student's regions
  of that one exercise are put into the reference package, so the attention
  exercise is graded with the reference softmax even when softmax is also
  assigned (and wrong). A mistake costs points in one row only.

A fast form (`minitransformer/fast/`) of an assigned layer would be a solution to
call, so `exercises make` leaves its file out of the copy (`Exercise.fast_files`);
models built with kernels="fast" then use the student's plain layer there. A
layer that repeats an assigned answer line for line (with attention assigned:
the relative-position and banded attentions) is left out the same way
(`leaks.py`), listed in `exercises.json` as `left_out_layers`.

Each exercise is also a pytest marker in the copy (`pytest -m layernorm`) and an
argument of `exercises check`: the student's self-check (`check.py`), run on
the exercise's gradient-check cases.

Left out: exercises on the composites (FeedForward, TransformerBlock, GPT),
whose backward passes only chain their children's; they are graded implicitly
by the gradient checks a student can run in the copy.
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
