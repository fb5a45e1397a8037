"""Module paths of version 0.3 that 0.4 moved, kept working for one version (CHANGELOG.md, 0.4.0, "Moved").

0.4 split the training room into the loop's machinery (training/), the course's objectives (objectives/) and
the generated tasks (tasks/). A script written for 0.3 that imports `minitransformer.training.trainer` or
`from minitransformer.training.tasks import ReverseTask` still works: the old path gives a module holding the
very same objects under their old names, and a `DeprecationWarning` names the new modules. **0.5 removes
these paths.**
"""

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

PACKAGE = __name__.rsplit(".", 1)[0]
# old module -> the modules its names now live in (a name is taken from the first that has it)
OLD_PATHS = {
    "training.trainer": ("objectives.language_model", "training.loop", "training.config"),
    "training.objectives": ("objectives.language_model", "objectives.seq2seq", "objectives.masked_lm",
                            "objectives.finetune"),
    "training.encdec": ("objectives.seq2seq",),
    "training.tasks": ("tasks.reverse", "tasks.majority"),
}


def _old_module(old_name, new_names):
    """A module named `old_name` whose namespace is the union of the new modules' public names."""
    module = types.ModuleType(old_name, f"0.3's {old_name}, moved to {', '.join(new_names)} (0.5 removes it)")
    for new_name in reversed(new_names):                     # the first listed wins a name they share
        new = importlib.import_module(new_name)
        module.__dict__.update({key: value for key, value in vars(new).items() if not key.startswith("__")})
    return module


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new_names):
        self.new_names = new_names

    def create_module(self, spec):
        return _old_module(spec.name, self.new_names)

    def exec_module(self, module):
        pass                                                 # filled in by create_module


class _OldPathFinder(importlib.abc.MetaPathFinder):
    """Finds `minitransformer.<0.3 path>` and hands back a module of the objects at their new paths."""

    def find_spec(self, fullname, path=None, target=None):
        short = fullname[len(PACKAGE) + 1:] if fullname.startswith(PACKAGE + ".") else None
        if short not in OLD_PATHS:
            return None
        new_names = [f"{PACKAGE}.{name}" for name in OLD_PATHS[short]]
        warnings.warn(f"{fullname} moved to {' and '.join(new_names)} in 0.4; the old path goes in 0.5",
                      DeprecationWarning, stacklevel=2)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new_names))


def install():
    """Put the finder on sys.meta_path once."""
    if not any(isinstance(finder, _OldPathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldPathFinder())
