"""The fast tier: the plain layers' numbers, computed with speed tricks, in subclasses proven equal.

Every file here holds the fast form of one plain layer (`fast/layernorm.py` for
`layers/layernorm.py`, ...): a subclass that overrides only what it speeds up, its docstring
pointing to the dated measurement that justifies it (benchmarks/README.md), and a table
`FAST_FORMS = {Plain: Fast}`.
`tests/test_fast.py` proves every fast form equal to its plain parent on the gradient
checker's cases (forward and every gradient) and runs the checker on the fast forms.
`row_blocks.py` and `reductions.py` are the helpers they share;
`blas_idle.py` sets how long OpenBLAS's idle threads spin (the package imports it before NumPy).

It registers its forms with the tier switch (`core/tiers.py`) when it is imported, and the package
imports it first of all: `GPT(kernels="fast")`, `TrainConfig.kernels` and `use_kernels(model, "fast")`
then turn every layer of a model that has a fast form into it, in place, while the models import
nothing from here. `fast_forms()` imports the form modules only when a model asks for them (this
package is imported before NumPy, for `blas_idle.py`), and skips a form module that is not there:
a student copy leaves out the fast file of an assigned layer (it would be a solution to call).
"""

import importlib

from ..core.tiers import KERNELS, check_kernels, kernels_of, register_fast_forms, use_kernels

# Fast forms measured and deleted in 0.3: Embedding's and MultiHeadAttention's (the fused QKV product) gained
# nothing beyond the noise (benchmarks/README.md, "Which fast forms earn their place"); the Softmax layer had no user.
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


register_fast_forms(fast_forms)


def walk(module):
    """Every module of the tree under `module`, itself first, each once: `module.modules()` (core/module.py),
    under its 0.4 name, until 0.6."""
    return module.modules()
