"""The two tiers a model's layers run in: "plain", the layers as the lecture derives them, and "fast", the same
numbers from subclasses with speed tricks (`minitransformer/fast/`), chosen by name with `kernels=`.

A model takes `kernels="plain" | "fast"` and calls `use_kernels(self, kernels)`, which turns each of its layers
into that tier's form in place: the fast class is a subclass with the same attributes, so the parameters, their
names, their values and the model's structure stay exactly as the plain constructors built them (weights are
drawn once, where each layer is built). Layers built directly are plain.

Which class has which fast form is not known here, nor below the fast tier: the fast tier registers the
function that lists its forms, `{plain class: fast subclass}`, when it is imported (`fast/__init__.py`), and
the package imports it before anything else (`minitransformer/__init__.py`). So a model reaches the fast forms
without importing the fast tier, and the imports still run one way, down the floors. A layer without a fast
form stays plain, and so does every layer of a student copy whose exercise removed its fast form (`exercises
make` leaves the fast file of an assigned layer out: it would be a solution to call); with no fast tier
registered at all, every layer stays plain.
"""

KERNELS = ("plain", "fast")
_fast_forms = None          # the fast tier's function returning {plain class: fast subclass}, once registered


def register_fast_forms(forms):
    """Make `forms`, a function returning {plain class: fast subclass}, the table `use_kernels` reads; the fast
    tier calls this when it is imported (a later call replaces an earlier one)."""
    global _fast_forms
    _fast_forms = forms


def fast_forms():
    """{plain class: fast subclass} of every fast form present ({} when no fast tier is registered)."""
    return {} if _fast_forms is None else _fast_forms()


def check_kernels(kernels, where):
    """Raise naming `where` unless kernels is "plain" or "fast"."""
    if kernels not in KERNELS:
        raise ValueError(f"{where} expected kernels 'plain' or 'fast', got {kernels!r}")


def use_kernels(model, kernels):
    """Switch every layer of `model` (a Module tree) to its `kernels` form, in place; return model.

    "fast" gives each layer whose exact class has a fast form that form; "plain" gives every
    fast layer its plain parent back. Parameters are not touched.
    """
    check_kernels(kernels, "use_kernels")
    forms = fast_forms()
    plain_of = {fast: plain for plain, fast in forms.items()}
    for layer in model.modules():
        if kernels == "fast" and type(layer) in forms:
            layer.__class__ = forms[type(layer)]
        elif kernels == "plain" and type(layer) in plain_of:
            layer.__class__ = plain_of[type(layer)]
    return model


def kernels_of(model):
    """"fast" if any layer of `model` runs a fast form, else "plain"."""
    fast_classes = set(fast_forms().values())
    return "fast" if any(type(layer) in fast_classes for layer in model.modules()) else "plain"
