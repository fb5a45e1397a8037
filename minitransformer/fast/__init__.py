"""The fast tier: the plain layers' numbers, computed with speed tricks, in subclasses proven equal.

Every file here holds the fast form of one plain layer (`fast/layernorm.py` for
`layers/layernorm.py`, ...): a subclass that overrides only what it speeds up, with the
measurement that justifies it in its docstring, and a table `FAST_FORMS = {Plain: Fast}`.
`tests/test_fast.py` proves every fast form equal to its plain parent on the gradient
checker's cases (forward and every gradient) and runs the checker on the fast forms.
`row_blocks.py` and `reductions.py` are the helpers they share;
`blas_idle.py` sets how long OpenBLAS's idle threads spin (the package imports it before NumPy).

`use_kernels(model, "fast")` turns every layer of a model that has a fast form into it, in
place: the fast class is a subclass with the same attributes, so the parameters, their names,
their values and the model's structure stay exactly as the plain constructors built them
(weights are drawn once, where each layer is built). A layer without a fast form stays plain,
and so does every layer of a student copy whose exercise removed its fast form (`exercises
make` leaves the fast file of an assigned layer out: it would be a solution to call).

Models take `kernels="plain" | "fast"` and call this; layers built directly are plain.
"""

import importlib

KERNELS = ("plain", "fast")
# Measured and deleted in 0.3 (benchmarks/bench_fast_forms.py, three runs of 7-9 rounds: a step with every
# fast form but that one, against all fast): Embedding -0.8, +0.6, +0.7 % and MultiHeadAttention (the fused
# QKV product) -7.0, -1.6, +1.2 %, inside the rounds' spread every time. The Softmax layer had no user.
FORM_MODULES = ("linear", "activations", "softmax", "layernorm", "tiled_attention", "attention")


def fast_forms():
    """{plain class: fast subclass} from every fast module that is present."""
    forms = {}
    for name in FORM_MODULES:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if not (error.name or "").startswith(f"{__name__}."):   # a missing dependency, not a left-out file
                raise
            continue            # this file, or a fast file it builds on, is left out of a student copy: plain it is
        forms.update(module.FAST_FORMS)
    return forms


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
    for layer in walk(model):
        if kernels == "fast" and type(layer) in forms:
            layer.__class__ = forms[type(layer)]
        elif kernels == "plain" and type(layer) in plain_of:
            layer.__class__ = plain_of[type(layer)]
    return model


def kernels_of(model):
    """"fast" if any layer of `model` runs a fast form, else "plain"."""
    fast_classes = set(fast_forms().values())
    return "fast" if any(type(layer) in fast_classes for layer in walk(model)) else "plain"


def walk(module, seen=None):
    """Every module of the tree under `module` (itself first), each once (a shared one is met once)."""
    seen = set() if seen is None else seen
    if id(module) in seen:
        return
    seen.add(id(module))
    yield module
    for _, child in module.named_children():
        yield from walk(child, seen)
