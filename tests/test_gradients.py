"""Gradient checks of the catalogue rows no concept file owns, and the map of who checks which row.

The catalogue (`minitransformer.gradcheck.cases`, the rows `python -m minitransformer gradcheck`
prints) is split by concept: tests/test_layernorm.py checks the LayerNorm rows, tests/test_gpt.py the
GPT rows, and so on, each through `catalogue_cases(...)` (tests/_catalogue.py). This file checks every
row that no file claims (today the variants and the encoder family), the same way: float64 central
differences along random directions (the checker's quick check), relative error <= 1e-7. Then it proves
the split complete: every row is checked by exactly one file, and each layer of
minitransformer/layers/<name>.py in tests/test_<name>.py. In the full run (`python -m pytest --full`) it
also checks every row of the catalogue at every coordinate, as `gradcheck --full` does.
"""

import importlib
import inspect
from pathlib import Path

import pytest
from _catalogue import assert_gradients_match, case_id, claims, unclaimed_cases

from minitransformer.gradcheck.cases import all_cases

LAYERS = Path(__file__).resolve().parent.parent / "minitransformer" / "layers"
REST = unclaimed_cases()


@pytest.mark.parametrize("case", REST, ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


@pytest.mark.coordinates
@pytest.mark.parametrize("case", all_cases(), ids=case_id)
def test_every_row_at_every_coordinate(case):
    assert_gradients_match(case, mode="coordinates")


def test_every_catalogue_row_is_checked_by_exactly_one_file():
    claimed, unreadable = claims()
    assert not unreadable, f"catalogue_cases must name its layers as string literals, so they can be read: {unreadable}"
    twice = {layer: files for layer, files in claimed.items() if len(files) > 1}
    assert not twice, f"catalogue rows claimed by more than one file (or twice in one): {twice}"
    layers = {case.layer for case in all_cases()}
    assert not set(claimed) - layers, f"claims of layers the catalogue does not have: {sorted(set(claimed) - layers)}"
    owned = [case for case in all_cases() if case.layer in claimed]
    assert {case.id for case in owned}.isdisjoint(case.id for case in REST)
    assert len(owned) + len(REST) == len(all_cases())
    assert owned and REST, "the split is vacuous: no concept file claims a row, or none is left here"


def test_each_layer_is_checked_in_the_file_named_after_its_module():
    """A class of minitransformer/layers/<name>.py with catalogue rows has them checked in tests/test_<name>.py."""
    claimed, _ = claims()
    layers = {case.layer for case in all_cases()}
    checked = set()
    for path in sorted(LAYERS.glob("*.py")):
        if path.stem == "__init__":
            continue
        module = importlib.import_module(f"minitransformer.layers.{path.stem}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and name in layers:
                assert claimed.get(name) == [f"test_{path.stem}.py"], (
                    f"{name} (layers/{path.name}): its catalogue rows are checked in {claimed.get(name, 'no file')}, "
                    f"expected tests/test_{path.stem}.py")
                checked.add(name)
    assert {"LayerNorm", "MultiHeadAttention", "DecoderBlock"} <= checked
