"""The derivations sit where a copy made to derive (`exercises make --derive`) can leave them out, by a convention
that a new layer follows: a backward pass's mathematics is its docstring's `Derivation:` section, and nothing in the
docstrings of an exercise's file states a gradient outside such a section. A notebook cell that derives a layer is
tagged `derives:<exercise>`. The tests here hold the reference to that; tests/test_student_copy_derive.py makes
the copies.
"""

import ast
import json
import re

import pytest

from minitransformer.exercises import derivations
from minitransformer.exercises.catalogue import EXERCISES, built_on
from minitransformer.exercises.make import derivation_files, reference_package
from minitransformer.exercises.regions import package_regions

REFERENCE = reference_package()
REGIONS = package_regions(REFERENCE)
FILES = sorted({relative for relative, _ in REGIONS.values()})
BACKWARD = sorted(name for name in REGIONS if name.endswith(".backward"))
NAMES = {exercise.name for exercise in EXERCISES}

# A line that states a gradient: a d-name given a value (`dx = ...`, `dW += ...`, `dweight[v] +=`, TeX's
# `d\alpha = ...`, `d\gamma \mathrel{+}=`), a derivative written as one (`\partial`, `dy/dx`, `d(r A)/dlogp`), or
# the words a derivation is made of. Shape names (`d_ff`, `d_v`) are not gradients.
FORMULA = re.compile(r"\bd(?!_)[A-Za-z]\w*(\[[^\]]*\])?\s*(\+=|=(?!=)|\\mathrel)|\bd\\[A-Za-z]+\s*(=|\\mathrel)"
                     r"|\\partial|∂|\bd\w*\s*/\s*d\w+|\bd\([^)]*\)\s*/\s*d\w+"
                     r"|\b(adjoint|chain rule|product rule|Jacobian|backward is|backward pass is)\b", re.IGNORECASE)


def formulas_outside_sections(text, where):
    """'path:line: text' of every docstring line of `text` that states a gradient outside a Derivation section."""
    lines, inside = text.splitlines(), set()
    for heading, end in derivations.sections(text, where):
        inside |= set(range(heading, end + 1))
    return [f"{where}:{index + 1}: {lines[index].strip()}" for first, last in derivations.docstring_spans(text)
            for index in range(first, last + 1) if index not in inside and FORMULA.search(lines[index])]


def test_the_formula_scan_finds_a_gradient_and_passes_the_task():
    stated = ['"""dz = 3 dout."""', '"""dtable[v] += sum of dout."""', '"""dy/dz = 3 where z > 0."""',
              r'"""$d\omega = 3 \, \mathrm{dout}$"""', '"""The adjoint of `shift`."""', '"""d(3 w)/dw = 3."""']
    assert all(formulas_outside_sections(f"def f():\n    r{doc}\n", "f.py") for doc in stated)
    task = ['"""The gradient at x. dout (..., C) -> dx (..., C)."""', '"""d_ff = 0 leaves it out; dv (B, T)."""',
            '"""The gradient at x.\n\n    Derivation:\n        dx = dout * mask.\n    """']
    assert not any(formulas_outside_sections(f"def f():\n    {doc}\n", "f.py") for doc in task)


@pytest.mark.parametrize("relative", FILES)
def test_no_docstring_of_an_exercise_file_states_a_gradient_outside_a_derivation_section(relative):
    found = formulas_outside_sections((REFERENCE / relative).read_text(encoding="utf-8"), relative)
    assert not found, "move these into a `Derivation:` section of their docstring:\n" + "\n".join(found)


@pytest.mark.parametrize("name", BACKWARD)
def test_every_backward_region_has_a_derivation_in_its_functions_docstring(name):
    relative, region = REGIONS[name]
    section = derivations.section_of((REFERENCE / relative).read_text(encoding="utf-8"), region.begin, relative)
    assert section and section[0], f"{relative}: {region.where} has no `Derivation:` section in its docstring"


def test_every_derivation_section_is_in_a_file_a_copy_made_to_derive_strips():
    every = set(derivation_files(BACKWARD, REGIONS))
    for path in sorted(p for p in REFERENCE.rglob("*.py") if p.parent.name != "exercises"):   # it shows the heading
        relative = path.relative_to(REFERENCE).as_posix()
        sections = derivations.sections(path.read_text(encoding="utf-8"), relative)
        assert not sections or relative in every, f"{relative} has a Derivation section that no copy ever leaves out"


def test_a_section_is_found_by_its_heading_and_its_indented_lines_and_stripped_line_for_line():
    text = ('def f(x):\n    """The task.\n\n    Derivation:\n        dx = 2 x\n\n        (the square)\n\n'
            '    Args:\n        x: (...).\n    """\n    return x\n')
    assert derivations.sections(text) == [(3, 6)]
    assert derivations.section_of(text, 11) == ["dx = 2 x", "", "(the square)"]
    stripped = derivations.strip_derivations(text)
    assert stripped == text.replace("        dx = 2 x\n\n        (the square)\n", f"        {derivations.NOTE}\n")
    with pytest.raises(ValueError, match="f.py:4: a Derivation section starts on the next line"):
        derivations.sections(text.replace("Derivation:\n        dx", "Derivation:\n\n        dx"), "f.py")
    with pytest.raises(ValueError, match="f.py:5: close a docstring"):
        derivations.sections('def f():\n    """Task.\n\n    Derivation:\n        dx = 1."""\n', "f.py")


def test_derivation_steps_are_counted_by_the_stated_rule():
    plain = ["Chain rule on y = 3 u, u = z w:", "", "    dy/dz = 3 w,", "    dz = dout * dy/dz."]
    tex = ["Reverse:", "$$", r"\begin{aligned}", r"\text{2. } y = 3 u &\Rightarrow du = 3 \, dout, \quad",
           r"  dw = 3 z \, dout \\", r"\text{1. } ... &\Rightarrow dz = ... \\", r"\text{0. constant: nothing} \\",
           r"\end{aligned}", "$$"]
    assert derivations.equations(plain) == 3 and derivations.equations(tex) == 2


def test_what_builds_on_an_exercise_is_stripped_with_it():
    for exercise in EXERCISES:
        strips = {relative for relative in derivation_files([f"{exercise.name}.backward"], REGIONS)}
        own = {REGIONS[name][0] for name in BACKWARD if name.split(".")[0] == exercise.name}
        builders = {REGIONS[name][0] for name in BACKWARD if name.split(".")[0] in built_on([exercise.name])}
        assert own <= strips and builders == strips, exercise.name
    assert {"attention", "tiled_attention", "crossentropy"} <= set(built_on(["softmax"]))


@pytest.mark.skipif(not (REFERENCE.parent / "notebooks").is_dir(), reason="no notebooks/ in this checkout")
def test_every_derives_tag_of_a_notebook_names_an_exercise_with_a_backward():
    with_backward = {name.split(".")[0] for name in BACKWARD}
    tagged = []
    for path in sorted((REFERENCE.parent / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            tagged += [(f"{path.name} cell {index}", tag[len(derivations.TAG):])
                       for tag in cell.get("metadata", {}).get("tags", []) if tag.startswith(derivations.TAG)]
    assert {"crossentropy", "softmax", "tiled_attention"} <= {name for _, name in tagged}
    wrong = [(where, name) for where, name in tagged if name not in with_backward]
    assert not wrong, f"derives: tags naming no exercise with a backward region: {wrong}"


def test_the_package_docstrings_still_parse_as_python():
    for relative in FILES:
        ast.parse(derivations.strip_derivations((REFERENCE / relative).read_text(encoding="utf-8"), relative))
    assert NAMES >= {name.split(".")[0] for name in BACKWARD}
