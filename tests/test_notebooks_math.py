"""The notebooks' mathematics is set, not typed: every formula in a markdown cell is TeX between `$...$` or
`$$...$$` (rendered by Jupyter and by the site's KaTeX), so no TeX command (`\\frac`), no sub- or superscript
(`x_i`, `e^{x}`, `10000^(-2k/d)`, `n²`, `xᵢ`) and no mathematical sign written as a character (`∂`, `Σ`, `√`) is
left in the prose outside it. Code in backticks is code, and link targets are addresses: neither is prose.

Offline and fast: it reads the committed notebooks (each is built from its source in notebooks/_src/, which
tests/test_notebooks.py holds true), so it runs in a student copy too.
"""

import pathlib
import re

import nbformat
import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))

_CODE = re.compile(r"(`+).+?\1", re.S)                       # `code` and ``code``
_MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+?\$", re.S)        # $$display$$ (may span lines) and $inline$ (one line)
_LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
RAW_TEX = re.compile(
    r"\\[A-Za-z]+"                                           # a TeX command: \frac, \sqrt, \alpha
    r"|[\^_]\{"                                              # a braced sub- or superscript: _{ij}, ^{x_i}
    r"|(?<![\w/.\-])[A-Za-zα-ωΣΔ][_^][A-Za-z0-9(α-ω{]"       # a letter's sub- or superscript: x_i, e^x, R^(
    r"|\w\^\(?[−\-]?\d"                                      # a power: 10000^(-2k/d), step^-0.5, T^2
    r"|[∂Σ∑√∏∫]"                                             # a sign only a formula uses
    r"|[²³⁴⁵⁻¹⁰ⁿᵀ₀₁₂₃₄ᵢⱼₖ]")                                   # a power or index typed as a character: n², xᵢ


def raw_tex(markdown):
    """The pieces of TeX in `markdown` outside its code, its link targets and its $...$ / $$...$$ (a list)."""
    prose = _LINK_TARGET.sub("]()", _MATH.sub(" ", _CODE.sub(" ", markdown)))
    return RAW_TEX.findall(prose)


def unpaired_dollars(markdown):
    """True when a `$$` or, on some line, a `$` has no partner (the rest of the cell would be read as TeX)."""
    prose = _CODE.sub(" ", markdown)
    return prose.count("$$") % 2 == 1 or any(line.count("$") % 2 for line in prose.replace("$$", "").splitlines())


def test_the_scan_finds_raw_tex_and_passes_set_mathematics():
    assert {"y_i", "e^{", "Σ_j"} <= set(raw_tex("With y = softmax(x), y_i = e^{x_i} / Σ_j e^{x_j}."))
    assert raw_tex("the gradient ∂y_i/∂x_i") and raw_tex("scaled by 1/√d_k") and raw_tex("\\frac{a}{b}")
    assert raw_tex("w_k = 10000^(−2k/d)") and raw_tex("grows with T^2") and raw_tex("O(n²·d)") and raw_tex("t¹ᵢ")
    assert raw_tex("$$a = b$$ then x_i") == ["x_i"]
    assert raw_tex("With $y = \\operatorname{softmax}(x)$, $$y_i = \\frac{e^{x_i}}{\\sum_j e^{x_j}}$$") == []
    assert raw_tex("the layer's `w_q` and `x[..., 1::2]`, [a file](../minitransformer/layers/x_y.py)") == []
    assert raw_tex("$$\\sin((n+k)\\omega)\n= \\cos(n\\omega)$$ and `mkdir_p`") == []
    assert unpaired_dollars("costs $5 a month") and unpaired_dollars("$$a = b") and not unpaired_dollars("$a$, `$HOME`")


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.stem)
def test_markdown_cells_set_their_mathematics_in_tex(path):
    notebook = nbformat.read(path, as_version=4)
    found = [f"cell {index}: {', '.join(dict.fromkeys(pieces))}" for index, cell in enumerate(notebook.cells)
             if cell.cell_type == "markdown" and (pieces := raw_tex(cell.source))]
    found += [f"cell {index}: a $ or $$ without its pair" for index, cell in enumerate(notebook.cells)
              if cell.cell_type == "markdown" and unpaired_dollars(cell.source)]
    assert not found, (f"{path.name} (source notebooks/_src/{path.stem}.py) has TeX outside $...$ in markdown: "
                       + "; ".join(found))
