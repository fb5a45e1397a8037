"""The guide's lists that name the code cannot drift: the map of rooms, the exercises and the commands are
written by docs/gen_lists.py from the package, and each committed list must equal what it writes now; the tables
of layers and variants, written by hand, must name every public class of `layers/` and `variants/`, and every
name in a table of names must be defined in the files its row gives; the benchmarks README's table of
scripts must name every `benchmarks/bench_*.py`. The breakages each check must catch
(a file, an exercise or a command added or taken away; a row edited) are made in a copy of the repository.
"""

import ast
import importlib.util
import re
import shutil
from pathlib import Path

import pytest
from _docs import copy_for_the_lists, skip_in_a_student_copy

ROOT = Path(__file__).resolve().parent.parent
skip_in_a_student_copy()
_spec = importlib.util.spec_from_file_location("gen_lists", ROOT / "docs" / "gen_lists.py")
gen_lists = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_lists)

# the hand-written tables that must name every public class of a room: (room, page)
CLASS_TABLES = (("layers", "docs/guide/the-layers-and-where-they-come-from.md"),
                ("variants", "docs/guide/attention-and-position-variants.md"))


@pytest.mark.parametrize("name", sorted(gen_lists.LISTS))
def test_each_generated_list_is_what_the_package_gives_now(name):
    page, make = gen_lists.LISTS[name]
    committed = gen_lists.committed(ROOT, name)
    assert committed is not None, f"{page} lost the marker lines of the {name} list: run python docs/gen_lists.py"
    assert committed == make(ROOT), (f"{page}: the {name} list differs from the package (a file, exercise or "
                                     f"command added, moved or taken away): run python docs/gen_lists.py")


def test_the_tables_of_names_give_the_files_that_define_each_name():
    stale = gen_lists.fix_tables(ROOT, write=False)
    assert not stale, "rows whose file column is not where the package defines the name " \
        "(run python docs/gen_lists.py):\n" + "\n".join(f"{page} {m}" for page, ms in stale.items() for m in ms)


def _public_classes(room):
    for path in sorted((ROOT / "minitransformer" / room).glob("[!_]*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                yield node.name, f"{room}/{path.name}"


@pytest.mark.parametrize("room, page", CLASS_TABLES)
def test_every_public_class_of_the_room_has_a_row_and_every_row_names_real_code(room, page):
    rows = [line for line in (ROOT / page).read_text(encoding="utf-8").splitlines() if line.startswith("| `")]
    named = {(name, path) for line in rows for name in gen_lists._NAME.findall(line.split("|")[1])
             for path in gen_lists._PATH.findall(line.split("|")[2])}
    missing = [f"{name} ({path})" for name, path in _public_classes(room) if (name, path) not in named]
    assert not missing, f"{page} has no row for {', '.join(missing)}: add one (class, file, source)"
    defined = gen_lists.definitions(ROOT)
    absent = sorted(name for name, _ in named if name not in defined)
    assert not absent, f"{page} names {absent}, which no file of the package defines"



def test_the_benchmarks_table_names_every_script_and_no_other():
    text = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(bench_\w+\.py)` \|", text, re.M))
    scripts = {path.name for path in (ROOT / "benchmarks").glob("bench_*.py")}
    assert listed == scripts, (f"benchmarks/README.md's table of scripts: missing {sorted(scripts - listed)}, "
                               f"naming absent {sorted(listed - scripts)}")

# ----------------------------------------------------------------------------------------------- the checks can fail
@pytest.fixture
def copy(tmp_path):
    """A copy of what the lists are written from, where the tests break things."""
    copy_for_the_lists(tmp_path)
    assert gen_lists.stale_lists(tmp_path) == [] and gen_lists.fix_tables(tmp_path, write=False) == {}
    return tmp_path


def _stale(copy):
    return " ".join(gen_lists.stale_lists(copy))


def test_a_file_added_or_taken_away_turns_the_map_red(copy):
    (copy / "minitransformer" / "layers" / "extra_layer.py").write_text('"""An extra layer."""\n', encoding="utf-8")
    assert "the map list differs from the package: run python docs/gen_lists.py" in _stale(copy)
    (copy / "minitransformer" / "layers" / "extra_layer.py").unlink()
    (copy / "minitransformer" / "layers" / "padding.py").unlink()
    assert "the map list differs" in _stale(copy)


def test_a_room_moved_or_an_import_upward_turns_the_map_red(copy):
    shutil.move(copy / "minitransformer" / "generation", copy / "minitransformer" / "decoding")
    assert "the map list differs" in _stale(copy)
    shutil.move(copy / "minitransformer" / "decoding", copy / "minitransformer" / "generation")
    with open(copy / "minitransformer" / "tokenizers" / "char.py", "a", encoding="utf-8") as file:      # tokenizers now above models
        file.write("\n\ndef _later():\n    from ..models import gpt  # noqa: F401\n")
    assert "the map list differs" in _stale(copy)
    with open(copy / "minitransformer" / "core" / "parameter.py", "a", encoding="utf-8") as file:     # and a circle
        file.write("\n\ndef _circle():\n    from ..layers import linear  # noqa: F401\n")
    assert "the map list cannot be written: the rooms import each other in a circle" in _stale(copy)
    with pytest.raises(ValueError, match=r"circle: .*core -> layers -> core"):
        gen_lists.map_list(copy)


def test_an_exercise_added_or_taken_away_turns_the_exercise_list_red(copy):
    catalogue = copy / "minitransformer" / "exercises" / "catalogue.py"
    text = catalogue.read_text(encoding="utf-8")
    catalogue.write_text(text.replace('    Exercise("relu", ("ReLU",), week=1),\n', ""), encoding="utf-8")
    assert "the exercises list differs" in _stale(copy)
    catalogue.write_text(text.replace('    Exercise("relu", ("ReLU",), week=1),\n',
                                      '    Exercise("relu", ("ReLU",), week=1),\n    Exercise("silu", ("SiLU",)),\n'), encoding="utf-8")
    assert "the exercises list differs" in _stale(copy)


def test_a_command_added_or_taken_away_turns_the_command_list_red(copy):
    main = copy / "minitransformer" / "__main__.py"
    text = main.read_text(encoding="utf-8")
    main.write_text(text.replace('    "mlm": "minitransformer.commands.mlm",\n', ""), encoding="utf-8")
    assert "the commands list differs" in _stale(copy)
    (copy / "minitransformer" / "commands" / "extra.py").write_text('HELP = "an extra command"\n', encoding="utf-8")
    main.write_text(text.replace('"mlm": "minitransformer.commands.mlm",',
                                 '"mlm": "minitransformer.commands.mlm",\n    "extra": "minitransformer.commands.extra",'), encoding="utf-8")
    assert "the commands list differs" in _stale(copy)


def test_a_region_renamed_or_moved_turns_the_exercise_list_red(copy):
    activations = copy / "minitransformer" / "layers" / "activations.py"
    text = activations.read_text(encoding="utf-8")
    activations.write_text(text.replace("### BEGIN SOLUTION gelu.forward", "### BEGIN SOLUTION gelu.forward_pass"), encoding="utf-8")
    assert "the exercises list differs" in _stale(copy)                 # renamed
    activations.write_text(text.replace("### BEGIN SOLUTION relu.backward", "### BEGIN SOLUTION relu_old.backward"), encoding="utf-8")
    (copy / "minitransformer" / "layers" / "relu.py").write_text("        ### BEGIN SOLUTION relu.backward\n", encoding="utf-8")
    assert "the exercises list differs" in _stale(copy)                 # moved to another file


def test_a_hand_edited_list_turns_red_and_the_generator_mends_it(copy):
    page = copy / "docs" / "guide" / "instructors-class-grading.md"
    page.write_text(re.sub(r"\| `relu` \|.*\n", "", page.read_text(encoding="utf-8")), encoding="utf-8")
    assert "the exercises list differs" in _stale(copy)
    assert gen_lists.main(["--root", str(copy)]) == 0
    assert _stale(copy) == ""


def test_a_file_that_moves_is_mended_in_the_tables_of_names(copy):
    shutil.move(copy / "minitransformer" / "variants" / "lora.py", copy / "minitransformer" / "layers" / "lora.py")
    stale = gen_lists.fix_tables(copy, write=False)
    assert any("`layers/lora.py`" in message for message in stale["docs/guide/attention-and-position-variants.md"])
    gen_lists.fix_tables(copy, write=True)
    assert "| `LoRALinear`, `LoRAAdapter`, `LoRAModel`, `add_lora` | `layers/lora.py` |" in \
        (copy / "docs" / "guide" / "attention-and-position-variants.md").read_text(encoding="utf-8")


def test_a_class_without_a_row_is_named(copy, monkeypatch):
    (copy / "minitransformer" / "layers" / "extra_layer.py").write_text("class ExtraLayer:\n    pass\n", encoding="utf-8")
    monkeypatch.setitem(globals(), "ROOT", copy)
    with pytest.raises(AssertionError, match=r"has no row for ExtraLayer \(layers/extra_layer.py\)"):
        test_every_public_class_of_the_room_has_a_row_and_every_row_names_real_code(*CLASS_TABLES[0])
