"""The import order: the package's rooms in one order, each importing only itself and the rooms before it, and
no module importing itself back.

Rooms, first to last (README "The map"): the core contract; the lecture's layers; the variants; the fast tier;
the models; the tokenizers; generation (sampling, decoding, the KV cache, BLEU: a trained model's use, which
PPO's rollouts and the seq2seq evaluation call); training (the loop's machinery: step, loop, optimizers,
schedules, data, checkpoints, data parallelism); tasks (the generated toy tasks); objectives (what the course
trains, each run through the one loop, reading the tasks); the gradient checker and its cases (which check
the objectives' gradients); interop; exercises; commands. Every import counts, also one inside a function
(a lazy import that dodges a circle is still a circle). The imports are read from every module's syntax
tree, not from a list kept by hand.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "minitransformer"
ROOMS_IN_ORDER = ["core", "layers", "variants", "fast", "models", "tokenizers", "generation", "training", "tasks",
                  "objectives", "gradcheck", "interop", "exercises", "commands"]
TOP_LEVEL = {"__init__", "__main__", "_compat"}      # the front door and 0.3's old paths see every room
# (module, imported room): the one deprecated alias that reaches up, removed with 0.4 (CHANGELOG)
ALLOWED_UPWARD = set()


def _module_name(path):
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path):
    """Every minitransformer module that `path` imports (relative or absolute), as dotted names below the package."""
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("minitransformer"):
                target = node.module[len("minitransformer."):] if node.module != "minitransformer" else ""
            else:
                continue
            found.add(target)
            found.update(f"{target}.{alias.name}" if target else alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name[len("minitransformer."):] for alias in node.names
                         if alias.name.startswith("minitransformer."))
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    return {target for target in found if target in modules and target != name}


MODULES = {_module_name(path): _imports(path) for path in sorted(PACKAGE.rglob("*.py"))}


def _room(module):
    return ROOMS_IN_ORDER.index(module.split(".")[0]) if module.split(".")[0] in ROOMS_IN_ORDER else None


@pytest.mark.parametrize("module", sorted(MODULES), ids=sorted(MODULES))
def test_a_room_imports_only_the_rooms_before_it(module):
    if module.split(".")[0] in TOP_LEVEL or module == "":
        return
    own = _room(module)
    assert own is not None, f"{module} is in no room of the map: put it in one of {ROOMS_IN_ORDER}"
    upward = sorted(target for target in MODULES[module] if _room(target) is not None and _room(target) > own
                    and (module, target.split(".")[0]) not in ALLOWED_UPWARD)
    assert not upward, f"{module} (room {ROOMS_IN_ORDER[own]}) imports up the map: {upward}"


def test_no_import_circle():
    state = {}

    def visit(module, path):
        if state.get(module) == "done":
            return
        assert state.get(module) != "open", f"import circle: {' -> '.join(path + [module])}"
        state[module] = "open"
        for target in sorted(MODULES.get(module, ())):
            if target.split(".")[0] not in TOP_LEVEL and target != "":
                visit(target, path + [module])
        state[module] = "done"

    for module in sorted(MODULES):
        if module.split(".")[0] not in TOP_LEVEL and module != "":
            visit(module, [])


def test_the_models_import_nothing_from_the_fast_tier():
    """The tier is chosen outside the model: a model takes kernels="fast" and asks core/tiers.py, which the fast
    tier fills when imported; a model file that imported fast/ would tie the lecture's model to the speed tier."""
    reaching = sorted(f"{module} imports {target}" for module, targets in MODULES.items()
                      if module.split(".")[0] == "models" for target in targets if target.split(".")[0] == "fast")
    assert not reaching, reaching
    assert "core.tiers" in MODULES["models.gpt"] and "core.tiers" in MODULES["fast"]


def test_the_parser_sees_imports_and_the_exception_is_still_needed():
    """Guards against a vacuous pass: the parser finds known imports of every kind, and the one allowed
    upward import still exists (when it goes, so must its entry)."""
    assert {"layers.block", "core.module", "variants.attention_positions"} <= MODULES["models.gpt"]
    assert "gradcheck.cases.layers" in MODULES["gradcheck.cases"]                  # from . import layers
    for module, room in ALLOWED_UPWARD:
        assert any(target.split(".")[0] == room for target in MODULES[module]), f"{module} no longer imports {room}"


def test_every_room_is_a_package_whose_docstring_says_what_it_holds():
    """The README's map is made from each room's __init__ docstring (its first line) and its files."""
    rooms = sorted(path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file())
    assert sorted(ROOMS_IN_ORDER) == rooms, f"rooms on disk {rooms}, in ROOMS_IN_ORDER {sorted(ROOMS_IN_ORDER)}"
    for room in rooms:
        doc = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text(encoding="utf-8")))
        assert doc and doc.splitlines()[0].strip(), f"minitransformer/{room}/__init__.py has no docstring first line"

