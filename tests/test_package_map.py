"""The package map: every layer file has its test file (the import order is tests/test_import_order.py)."""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "minitransformer"


def test_every_layer_file_has_its_test_file():
    """Tests by concept: minitransformer/layers/<name>.py is tested in tests/test_<name>.py, so a student
    finds a layer's gradient checks, properties, bad input and parity by the layer's file name."""
    tests = Path(__file__).resolve().parent
    layers = sorted(path.stem for path in (PACKAGE / "layers").glob("*.py") if path.stem != "__init__")
    assert "layernorm" in layers
    missing = [f"tests/test_{name}.py" for name in layers if not (tests / f"test_{name}.py").is_file()]
    assert not missing, f"layers without their test file: {missing}"
