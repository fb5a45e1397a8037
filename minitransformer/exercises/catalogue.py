"""The exercises an instructor can assign, and which layers each one feeds.

An exercise is named after a layer (`layernorm`) and owns the solution
regions whose names start with it (`layernorm.forward`, `layernorm.backward`).
It is graded on the gradient-check catalogue's cases of its own layer
(`gradcheck_cases.all_cases()`, rows named `LayerNorm`).

Building blocks and composites. Blanking a building block breaks every layer
that calls it: in a student copy with `softmax` assigned, attention,
multi-head attention, the Transformer block and GPT raise too, until the
student has written softmax. The two commands treat this as follows:

* `exercises make` prints, and records in `exercises.json`, the layers that
  stay unavailable in the copy until the assigned exercises are done
  (`unavailable_layers`); all other layers work unchanged.
* `exercises grade` grades every exercise on its own: the student's regions
  of that one exercise are put into the reference package, so the attention
  exercise is graded with the reference softmax even when softmax is also
  assigned (and wrong). A mistake costs points in one row only.

`USES` lists, for every layer in the gradient-check catalogue, the exercises
whose code runs when that layer runs forward and backward; a test checks it
against what a student copy actually does.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    name: str            # prefix of its regions' names, e.g. "layernorm"
    layers: tuple        # the gradient-check catalogue rows it is graded on, e.g. ("LayerNorm",)


EXERCISES = [
    Exercise("linear", ("Linear",)),
    Exercise("relu", ("ReLU",)),
    Exercise("gelu", ("GELU",)),
    Exercise("softmax", ("Softmax",)),
    Exercise("layernorm", ("LayerNorm",)),
    Exercise("embedding", ("Embedding",)),
    Exercise("attention", ("ScaledDotProductAttention",)),
    Exercise("multihead", ("MultiHeadAttention",)),
    Exercise("crossentropy", ("CrossEntropyLoss",)),
]

_ATTENTION = {"attention", "softmax"}
_FEEDFORWARD = {"linear", "relu", "gelu"}
_BLOCK = {"layernorm", "multihead"} | _ATTENTION | _FEEDFORWARD

# catalogue layer -> exercises whose regions run inside it (a layer not listed uses none)
USES = {
    "Linear": {"linear"},
    "ReLU": {"relu"},
    "GELU": {"gelu"},
    "Softmax": {"softmax"},
    "LayerNorm": {"layernorm"},
    "Embedding": {"embedding"},
    "ScaledDotProductAttention": _ATTENTION,
    "MultiHeadAttention": {"multihead"} | _ATTENTION,
    "FeedForward": _FEEDFORWARD,
    "TransformerBlock": _BLOCK,
    "CrossEntropyLoss": {"crossentropy"},
    "TiedLMHead": set(),
    "GPT": _BLOCK | {"embedding"},
    "GPT + loss": _BLOCK | {"embedding", "crossentropy"},
}


def exercise_named(name):
    """The Exercise called `name`; KeyError listing the known ones otherwise."""
    for exercise in EXERCISES:
        if exercise.name == name:
            return exercise
    raise KeyError(f"no exercise named {name!r}; the exercises are {', '.join(e.name for e in EXERCISES)}")


def unavailable_layers(exercise_names, catalogue_layers):
    """Catalogue layers that cannot run in a copy where `exercise_names` are blank, each with the reason.

    Args:
        exercise_names: the assigned exercises.
        catalogue_layers: every layer name of the gradient-check catalogue, in order.
    Returns:
        dict layer -> sorted list of the assigned exercises it needs.
    """
    assigned = set(exercise_names)
    needs = {layer: sorted(USES.get(layer, set()) & assigned) for layer in catalogue_layers}
    return {layer: names for layer, names in needs.items() if names}
