"""The package map: imports run one way, down the floors of the course, and no module imports itself back.

Floors, lowest first (README "The map"): the core contract; the lecture's layers; the variants; the fast
tier; the models; the tokenizers; generation; training; the gradient checker and its cases; interop;
exercises; commands. A module may import from its own floor or any floor below. Every import counts,
also one inside a function (a lazy import that dodges a circle is still a circle).
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "minitransformer"
FLOORS = ["core", "layers", "variants", "fast", "models", "tokenizers", "generation", "training", "gradcheck",
          "interop", "exercises", "commands"]
TOP_LEVEL = {"__init__", "__main__"}      # the package's front door sees every floor
# (module, imported floor): the one deprecated alias that reaches up, removed with 0.4 (CHANGELOG)
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


def _floor(module):
    return FLOORS.index(module.split(".")[0]) if module.split(".")[0] in FLOORS else None


@pytest.mark.parametrize("module", sorted(MODULES), ids=sorted(MODULES))
def test_imports_run_down_the_floors(module):
    if module.split(".")[0] in TOP_LEVEL or module == "":
        return
    own = _floor(module)
    assert own is not None, f"{module} is on no floor of the map: put it in one of {FLOORS}"
    upward = sorted(target for target in MODULES[module] if _floor(target) is not None and _floor(target) > own
                    and (module, target.split(".")[0]) not in ALLOWED_UPWARD)
    assert not upward, f"{module} (floor {FLOORS[own]}) imports up the map: {upward}"


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


def test_the_parser_sees_imports_and_the_exception_is_still_needed():
    """Guards against a vacuous pass: the parser finds known imports of every kind, and the one allowed
    upward import still exists (when it goes, so must its entry)."""
    assert {"layers.block", "core.module", "variants.attention_positions"} <= MODULES["models.gpt"]
    assert "gradcheck.cases.layers" in MODULES["gradcheck.cases"]                  # from . import layers
    for module, floor in ALLOWED_UPWARD:
        assert any(target.split(".")[0] == floor for target in MODULES[module]), f"{module} no longer imports {floor}"


def test_every_layer_file_has_its_test_file():
    """Tests by concept: minitransformer/layers/<name>.py is tested in tests/test_<name>.py, so a student
    finds a layer's gradient checks, properties, bad input and parity by the layer's file name."""
    tests = Path(__file__).resolve().parent
    layers = sorted(path.stem for path in (PACKAGE / "layers").glob("*.py") if path.stem != "__init__")
    assert "layernorm" in layers
    missing = [f"tests/test_{name}.py" for name in layers if not (tests / f"test_{name}.py").is_file()]
    assert not missing, f"layers without their test file: {missing}"
