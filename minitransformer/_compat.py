"""Old module paths of version 0.2, kept working for one version (see CHANGELOG.md, 0.3.0).

Version 0.3 laid the package out like the course (core, layers, variants, fast, models, tokenizers,
training, generation, gradcheck, interop, exercises, commands). A script written for 0.2 that imports
`minitransformer.trainer` or does `from minitransformer import optim` still works: the old path names
the very same module object as the new one, and a `DeprecationWarning` names the new path.
Version 0.4 removes these aliases.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

OLD_PATHS = {
    "module": "core.module",
    "parameter": "core.parameter",
    "random": "core.random",
    "layers.rope": "variants.rope",
    "layers.alibi": "variants.alibi",
    "layers.sliding_window": "variants.sliding_window",
    "layers.relative_position": "variants.relative_position",
    "layers.sparse_masks": "variants.sparse_masks",
    "layers.transformer_xl": "variants.transformer_xl",
    "layers.lora": "variants.lora",
    "layers.reductions": "fast.reductions",
    "layers.row_blocks": "fast.row_blocks",
    "optim": "training.optim",
    "optim.adam": "training.optim.adam",
    "optim.sgd": "training.optim.sgd",
    "optim.clipping": "training.optim.clipping",
    "optim.optimizer": "training.optim.optimizer",
    "schedules": "training.schedules",
    "trainer": "training.trainer",
    "checkpoint": "training.checkpoint",
    "data": "training.data",
    "tasks": "training.tasks",
    "training_encdec": "training.encdec",
    "kv_cache": "generation.kv_cache",
    "sampling": "generation.sampling",
    "decoding": "generation.decoding",
    "bleu": "generation.bleu",
    "bpe": "tokenizers.bpe",
    "bpe.fast": "tokenizers.bpe.fast",
    "bpe.learn": "tokenizers.bpe.learn",
    "bpe.pair_merge": "tokenizers.bpe.pair_merge",
    "bpe.reference": "tokenizers.bpe.reference",
    "bpe.tokenizer": "tokenizers.bpe.tokenizer",
    "gradcheck_cases": "gradcheck.cases.layers",
    "gradcheck_cases_variants": "gradcheck.cases.variants",
    "gradcheck_cases_encdec": "gradcheck.cases.encdec",
}
PACKAGE = __name__.rsplit(".", 1)[0]


def _new_name(old_full_name):
    short = old_full_name[len(PACKAGE) + 1:]
    return f"{PACKAGE}.{OLD_PATHS[short]}" if short in OLD_PATHS else None


def import_moved(old_short_name):
    """The module that `minitransformer.<old_short_name>` (a 0.2 path) now is, with a DeprecationWarning."""
    new = f"{PACKAGE}.{OLD_PATHS[old_short_name]}"
    warnings.warn(f"{PACKAGE}.{old_short_name} moved to {new} in 0.3; the old path goes in 0.4",
                  DeprecationWarning, stacklevel=3)
    return importlib.import_module(new)


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new_name):
        self.new_name = new_name

    def create_module(self, spec):
        return importlib.import_module(self.new_name)

    def exec_module(self, module):
        pass                                      # already executed under its new name


class _OldPathFinder(importlib.abc.MetaPathFinder):
    """Finds `minitransformer.<old path>` and hands back the module at its new path."""

    def find_spec(self, fullname, path=None, target=None):
        new_name = _new_name(fullname) if fullname.startswith(PACKAGE + ".") else None
        if new_name is None:
            return None
        warnings.warn(f"{fullname} moved to {new_name} in 0.3; the old path goes in 0.4",
                      DeprecationWarning, stacklevel=2)
        spec = importlib.util.spec_from_loader(fullname, _AliasLoader(new_name))
        return spec


def install():
    """Put the finder on sys.meta_path once, and give GPT back its 0.2 GPT-2 methods."""
    if not any(isinstance(finder, _OldPathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldPathFinder())
    from .models.gpt import GPT

    GPT.from_gpt2_state_dict = classmethod(_gpt_from_gpt2_state_dict)
    GPT.to_gpt2_state_dict = _gpt_to_gpt2_state_dict


def _gpt_from_gpt2_state_dict(cls, state_dict, **options):
    """0.2's `GPT.from_gpt2_state_dict`; 0.3: `minitransformer.from_gpt2_state_dict` (interop/gpt2.py)."""
    from .interop.gpt2 import from_gpt2_state_dict

    warnings.warn("GPT.from_gpt2_state_dict is minitransformer.from_gpt2_state_dict since 0.3 "
                  "(models no longer import interop); the method goes in 0.4", DeprecationWarning, stacklevel=2)
    return from_gpt2_state_dict(state_dict, **options)


def _gpt_to_gpt2_state_dict(self):
    """0.2's `GPT.to_gpt2_state_dict`; 0.3: `minitransformer.to_gpt2_state_dict(model)`."""
    from .interop.gpt2 import to_gpt2_state_dict

    warnings.warn("GPT.to_gpt2_state_dict() is minitransformer.to_gpt2_state_dict(model) since 0.3; "
                  "the method goes in 0.4", DeprecationWarning, stacklevel=2)
    return to_gpt2_state_dict(self)
