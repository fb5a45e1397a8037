"""One notation for the code and the notebooks: the table of docs/guide/notation.md. Notebook 04 (its code cells and
the TeX of its markdown) and the attention, LayerNorm and cross-entropy files (their code, and the TeX and the shapes
of their docstrings and comments) use the table's names: no name of its last column appears where that column says
(in code, in TeX, or in a shape), and the names the table gives for those quantities are the ones they use.
A failure names the file and the line.
"""

import ast
import re
from pathlib import Path

import pytest
from _docs import skip_in_a_student_copy

import minitransformer

ROOT = Path(__file__).resolve().parent.parent
skip_in_a_student_copy()
PAGE = ROOT / "docs" / "guide" / "notation.md"
NOTEBOOK = ROOT / "notebooks" / "_src" / "04_backprop_by_hand.py"
HELD = [ROOT / "minitransformer" / "layers" / name for name in ("attention.py", "layernorm.py", "loss.py")]
_ROW = re.compile(r"^\| (?P<quantity>[^|]+) \| (?P<code>[^|]+) \| (?P<tex>[^|]+) \| (?P<never>[^|]*)\|$")
_NEVER = re.compile(r"((?:`\w+`(?:, )?)+) \(([^)]*)\)")
_MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$\n]+?)\$", re.S)
_WORDS = re.compile(r"\\(?:text|mathrm|operatorname|textstyle|begin|end)\{[^}]*\}|\\[A-Za-z]+")    # words, commands
_SHAPE_WORDS = {"...", "B", "T", "C", "H", "hs", "V", "N", "Tq", "Tk", "S"}


def table():
    """[(quantity, code names, TeX text, {context: never-written names})] of the page's table."""
    rows = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if not match or match["code"].strip() in ("in code", "---"):
            continue
        never = {}
        for names, contexts in _NEVER.findall(match["never"]):
            for context in re.findall(r"code|TeX|shape", contexts):
                never.setdefault(context, set()).update(re.findall(r"`(\w+)`", names))
        rows.append((match["quantity"].strip(), re.findall(r"`(\w+)`", match["code"]), match["tex"].strip(), never))
    return rows


def never(context):
    return set().union(*(row[3].get(context, set()) for row in table()))


# ----------------------------------------------------------------------------------------------- the texts held
def notebook_cells():
    """(kind, first line number, text) of notebook 04's source cells: markdown without its `# `, code as it is."""
    cells, kind, first, lines = [], None, 0, []
    for number, line in enumerate(NOTEBOOK.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("# %%"):
            if kind:
                cells.append((kind, first, "\n".join(lines)))
            kind, first, lines = ("markdown" if "[markdown]" in line else "code"), number + 1, []
        else:
            lines.append(line[2:] if kind == "markdown" and line.startswith("# ") else line.lstrip("#") if kind == "markdown" else line)
    return cells + ([(kind, first, "\n".join(lines))] if kind else [])


def code_names(source, first=1):
    """(line number, name) of every identifier, argument and attribute of Python `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        name = {ast.Name: "id", ast.arg: "arg", ast.Attribute: "attr"}.get(type(node))
        if name:
            found.append((node.lineno + first - 1, getattr(node, name)))
    return found


def texts():
    """(where, kind, text): each held file (code; its docstrings and comments as prose) and each notebook 04 cell."""
    for path in HELD:
        source = path.read_text(encoding="utf-8")
        yield path.relative_to(ROOT).as_posix(), 1, "code", source
        yield path.relative_to(ROOT).as_posix(), 1, "prose", source
    for kind, first, text in notebook_cells():
        yield NOTEBOOK.relative_to(ROOT).as_posix(), first, kind, text
        if kind == "code":
            yield NOTEBOOK.relative_to(ROOT).as_posix(), first, "prose", text


def tex_symbols(math):
    """The symbols of a piece of TeX: its letters and words outside commands, \\text{...} and the like."""
    return re.findall(r"[A-Za-z]+", _WORDS.sub(" ", math))


def problems(where, first, kind, text, forbidden):
    """'where:line: what' for each name of `forbidden` ({context: names}) that `text` uses."""
    found = []
    if kind == "code":
        found += [f"{where}:{line}: `{name}` in code" for line, name in code_names(text, first)
                  if name in forbidden.get("code", ())]
    if kind in ("prose", "markdown"):
        for match in _MATH.finditer(text):
            line = first + text.count("\n", 0, match.start())
            found += [f"{where}:{line}: `{name}` in TeX" for name in tex_symbols(match[1] or match[2])
                      if name in forbidden.get("TeX", ())]
        for match in re.finditer(r"\(([^()]*)\)", text):
            parts = [part.strip() for part in match[1].split(",")]
            if len(parts) > 1 and _SHAPE_WORDS & set(parts):
                line = first + text.count("\n", 0, match.start())
                found += [f"{where}:{line}: `{part}` in the shape ({match[1]})" for part in parts
                          if part in forbidden.get("shape", ())]
    return found


# ----------------------------------------------------------------------------------------------- the tests
def test_the_table_parses_and_begins_with_the_shape_legend_of_the_package():
    rows = table()
    assert len(rows) > 20 and never("code") >= {"dy", "s"} and never("TeX") >= {"dy", "s"} and never("shape") == {"dk", "dv"}
    legend = re.findall(r"^\s+(\w+)\s{2,}", minitransformer.__doc__, re.M)
    assert legend == ["B", "T", "C", "H", "hs", "V"]
    assert [row[1][0] for row in rows[:6]] == legend, "the table's first rows are the package's shape legend"


@pytest.mark.parametrize("where, first, kind, text", list(texts()), ids=lambda value: str(value)[:40])
def test_notebook_04_and_the_layers_use_the_tables_names(where, first, kind, text):
    forbidden = {context: never(context) for context in ("code", "TeX", "shape")}
    found = problems(where, first, kind, text, forbidden)
    assert not found, "names the notation table (docs/guide/notation.md) rules out:\n" + "\n".join(found)


def test_the_names_the_table_gives_are_the_ones_used():
    held_code = {name for where, first, kind, text in texts() if kind == "code" for _, name in code_names(text, first)}
    held_tex = " ".join(" ".join(tex_symbols(m[1] or m[2])) + " " + (m[1] or m[2])
                        for where, first, kind, text in texts() if kind != "code" for m in _MATH.finditer(text))
    for quantity, code, tex, ruled_out in table():
        if ruled_out:                          # a quantity with a name ruled out: the table's name is the one used
            assert set(code) & held_code, f"{quantity}: none of {code} is used in the held files"
            symbol = _MATH.search(tex)
            assert symbol and (symbol[1] or symbol[2]).split("=")[0].strip() in held_tex, f"{quantity}: {tex} is not used"


def test_the_check_finds_each_kind_of_name_the_table_rules_out():
    forbidden = {context: never(context) for context in ("code", "TeX", "shape")}
    assert problems("x.py", 1, "code", "dy = dout @ v.T\ns = 1 / np.sqrt(d_k)\n", forbidden) == [
        "x.py:1: `dy` in code", "x.py:2: `s` in code"]
    assert problems("x.md", 5, "markdown", "Steps:\n$$S \\leftarrow s\\, S \\quad \\text{scale}$$", forbidden) == [
        "x.md:6: `s` in TeX"]
    assert problems("x.py", 1, "prose", "q: (..., Tq, dk) queries; returns (dq, dk, dv).", forbidden) == [
        "x.py:1: `dk` in the shape (..., Tq, dk)"]
    assert not problems("x.md", 1, "markdown", "$\\sum_j \\sqrt{d_k} \\, \\mathrm{dout} \\Rightarrow dS$", forbidden)
