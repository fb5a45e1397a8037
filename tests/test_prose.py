"""Prose that cannot drift: every name that the README, the site's front page (docs/index.md), the guide
(docs/guide/*.md) and the notebooks' markdown (the markdown cells of notebooks/_src/*.py) give in backquotes, where
it has the shape of a code name of this package, is resolved against the code, and every claim that names are
importable from `minitransformer` is checked by importing them. A failure names the page and the line.

What each shape must resolve to (fenced code blocks are left to tests/test_docs_examples.py, which runs them):

- a command, `python -m minitransformer ...` or one starting with a command's name (`exercises make OUT`): it
  parses with the package's own parser, every option written in full; named in a sentence, it may leave out an
  argument the command requires (`exercises make --only relu`, no folder: whole command lines, in code blocks,
  parse in full in test_docs_examples.py); `python X` or `bash X`: the script X exists; `pip install -e ".[NAME]"`:
  NAME is an extra of setup.cfg;
- an option (`--max-steps N`): an option of one of the package's commands;
- a path (`layers/attention.py`, `data/`, `tests/test_<layer>.py`): a file or folder of the repository, relative to
  the repository, the package, tests/, notebooks/ or the page's folder (`<...>`, `NNN` and `*` match any one part); a
  bare name with a code file's suffix anywhere in it; a path into a folder the repository does not have (`runs/`,
  `site/`, `/tmp`) is something a command writes or the system has, and is not looked for;
- a dotted name starting `minitransformer.`: importable, attribute by attribute; one starting with a class or
  function of the package (`LayerNorm.backward`): that object has those attributes;
- a call (`GPT(positional="rope")`): the callee resolves, and each keyword is a parameter of it;
- a class-shaped name (`LayerNorm`, `LLAMA_STYLE`): a class, function or constant defined in the package or a
  notebook, or a Python builtin;
- any other name (`check_module`, `dout`, `layernorm`, `ignore_index=`): a name of the package's or the notebooks'
  code (a definition, a parameter, an attribute, a variable, or a string that is a name, e.g. an exercise's), or
  an extra of setup.cfg;
- `MINITRANSFORMER_...`: an environment variable the package reads (its name is in the package's source).

Expressions (anything with a space or an operator that is not a call: `x + attn(ln(x))`), names of one or two
characters (the lecture's symbols), and the names of other libraries and programs in `OTHERS` pass. A sentence
that says a name went (removed, replaced, went, ...) may name it if the CHANGELOG does too: history. Every section
of the README that a page sends the reader to by name (the README's "For instructors") must be one of its headings.
"""

import ast
import builtins
import configparser
import importlib
import inspect
import keyword
import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from _docs import NOT_OURS, PACKAGE, ROOT, command_error, names_a_file, options, shown_argv, skip_in_a_student_copy

skip_in_a_student_copy()
NOTEBOOK_SOURCES = ROOT / "notebooks" / "_src"
PAGES = [ROOT / "README.md", ROOT / "docs" / "index.md", *sorted((ROOT / "docs" / "guide").glob("*.md")),
         *sorted(NOTEBOOK_SOURCES.glob("*.py"))]

# Names of other libraries and programs, and other tools' options, that the pages give in backquotes
OTHERS = {"np", "numpy", "torch", "pydoc_data", "tiktoken", "regex", "tracemalloc", "nbgrader", "pytest",
          "mpiexec", "bubblewrap", "python3", "nobody", "nbytes", "out", "apt-get", "pip", "Username",
          "--no-index", "--find-links", "--index-url", "-m", "-k", "-n", "-x", "-q",
          "Args", "Returns"}          # the docstrings' section headings (Google's style), beside `Derivation`
CODE_SUFFIXES = (".py", ".md", ".ipynb", ".cfg", ".toml")
# folders that the commands write (the site, nbgrader's and Gradescope's folders), named alone (`site/`); a longer
# path is written by a command where its first folder is not one of the repository's (`runs/run-NNN/`)
WRITTEN = {"site", "results", "source", "submission"}
REMOVAL = re.compile(r"\b(removed|went|goes|gone|replaces|replaced|deleted|renamed)\b", re.I)
IMPORTABLE = re.compile(r"\bimport(?:able|ed)? from `minitransformer`")
README_SECTION = re.compile(r"""the README's (?:"(?P<quoted>[^"]+)"|(?P<bare>[A-Z][\w-]*(?: \d+)?))""")

NAME = r"[A-Za-z_]\w*"
DOTTED = rf"{NAME}(?:\.{NAME})*"
SPAN = re.compile(r"(?<![`\w])`(?P<span>[^`\n]+(?:\n[^`\n]+)?)`(?!`)")
CALL = re.compile(rf"^(?P<callee>{DOTTED})\((?P<args>.*)\)$", re.S)
KEYWORD_ALONE = re.compile(rf"^(?P<name>{NAME})=\S*$")
PATH_LIKE = re.compile(r"^[\w.<>*/-]+$")
FILE_NAME = re.compile(r"^[\w.-]*\.(?:py|md|ipynb|cfg|toml|json|csv|sh|txt|npz|pyc|yml|yaml)$")
DOMAIN = re.compile(r"^[\w-]+(?:\.[\w-]+)*\.(?:io|com|org|edu|net)$")
ENVIRONMENT = re.compile(r"^MINITRANSFORMER_[A-Z0-9_*]*(?:=\S*)?$")
EXTRA = re.compile(r"""^pip install (?:-e )?["']?(?:\.|minitransformer)\[(?P<extras>[\w,-]+)\]""")
SCRIPT = re.compile(r"^(?:python|bash) (?P<script>[\w./-]+\.(?:py|sh))\b")
COMMAND = re.compile(r"(?:^|\s)python -m minitransformer(?P<argv>(?:\s.*)?)$", re.S)


@dataclass
class Shown:
    """One name in backquotes: the page, its line, the name, and the sentence around it."""
    page: Path
    line: int
    span: str
    sentence: str

    def __str__(self):
        return f"{self.page.relative_to(ROOT).as_posix()}:{self.line}: `{self.span}`"


# ----------------------------------------------------------------------------------------------- the pages' words
def prose(page):
    """The page's prose with its line numbers kept: a markdown page without its fenced blocks, a notebook source
    with only its markdown cells (their `# ` taken off); every other line is left empty."""
    lines, fenced, markdown = [], False, page.suffix == ".md"
    for line in page.read_text(encoding="utf-8").splitlines():
        if page.suffix == ".py" and line.startswith("# %%"):
            markdown = "[markdown]" in line
            lines.append("")
            continue
        text = (line[2:] if line.startswith("# ") else line.lstrip("#")) if page.suffix == ".py" else line
        if markdown and text.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            lines.append("")
            continue
        lines.append(text if markdown and not fenced else "")
    return "\n".join(lines)


def shown_names(page, text=None):
    """Every name the page gives in backquotes (a span may wrap onto the next line), with its sentence."""
    text = prose(page) if text is None else text
    for match in SPAN.finditer(text):
        start = max(text.rfind(". ", 0, match.start()), text.rfind("\n\n", 0, match.start()))
        ends = [end for end in (text.find(". ", match.end()), text.find("\n\n", match.end())) if end != -1]
        sentence = text[start + 1: min(ends) if ends else len(text)]
        yield Shown(page, text.count("\n", 0, match.start()) + 1, " ".join(match["span"].split()), sentence)


def importable_claims(page, text=None):
    """The names a page says are importable from `minitransformer`: those in backquotes in the claim's paragraph
    (which hold a capital or an underscore: names, not words) and, where a table follows it, its first column."""
    text = prose(page) if text is None else text
    found = []
    for paragraph in re.finditer(r"(?:[^\n]+\n?)+", text):
        if not IMPORTABLE.search(paragraph[0]):
            continue
        table = re.match(r"\n*((?:\|[^\n]*\n?)+)", text[paragraph.end():])
        rows = table[1].splitlines()[2:] if table else []
        cells = [paragraph[0], *(row.split("|")[1] for row in rows)]
        line = text.count("\n", 0, paragraph.start()) + 1
        found += [(line, name) for cell in cells for name in re.findall(rf"`({NAME})`", cell)
                  if name != "minitransformer"]
    return found


# ----------------------------------------------------------------------------------------------- the code's names
def _tree_names(tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)
    return names


def _definitions(tree):
    """Classes and functions defined anywhere in the tree, and names assigned at its top level."""
    found = {node.name for node in ast.walk(tree) if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    return found | {target.id for node in tree.body if isinstance(node, ast.Assign)
                    for target in node.targets if isinstance(target, ast.Name)}


@cache
def code():
    """(every name of the package's and the notebooks' code, the names they define, the package's source text)."""
    names, defined, source = set(), set(), []
    trees = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        source.append(text)
        trees.append(ast.parse(text))
    for path in sorted(NOTEBOOK_SOURCES.glob("*.py")):
        trees.append(ast.parse(path.read_text(encoding="utf-8")))
    for tree in trees:
        names |= _tree_names(tree)
        defined |= _definitions(tree)
    return names | extras(), defined, "\n".join(source)


@cache
def extras():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    return set(config["options.extras_require"])


@cache
def repository():
    """(the repository's files, its folders, the names of its files), relative to ROOT, as git lists them."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, encoding="utf-8")
    if listed.returncode:
        pytest.skip("not a git checkout: the paths are checked in the reference")
    files = {Path(line) for line in listed.stdout.splitlines()}
    folders = {parent for path in files for parent in path.parents if parent != Path(".")}
    return files, folders, {path.name for path in files}


def package_object(dotted):
    """The object a dotted name gives, starting `minitransformer.` or with a name the package defines; None
    where it does not resolve; ... where its first part is not the package's (not an object to look up)."""
    parts = dotted.split(".")
    if parts[0] == "minitransformer":
        for end in range(len(parts), 0, -1):
            try:
                found = importlib.import_module(".".join(parts[:end]))
            except ImportError:
                continue
            for part in parts[end:]:
                found = getattr(found, part, None)
                if found is None:
                    return None
            return found
        return None
    import minitransformer
    found = getattr(minitransformer, parts[0], None)
    if found is None:
        found = _defined_object(parts[0])
    if found is None:
        return ...
    for part in parts[1:]:
        found = getattr(found, part, None)
        if found is None:
            return None
    return found


@cache
def _defined_object(name):
    """A class or function the package defines at a module's top level under this name, or None."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if re.search(rf"^(?:class|def) {name}\b", path.read_text(encoding="utf-8"), re.M):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found = getattr(importlib.import_module(module), name, None)
            if found is not None:
                return found
    return None


# ----------------------------------------------------------------------------------------------- resolving one name
def problem(shown):
    """Why a name shown does not resolve, or None."""
    span = shown.span
    names, defined, source = code()
    if span in OTHERS or len(span) <= 2 or keyword.iskeyword(span) or DOMAIN.match(span):
        return None
    if match := COMMAND.search(span):
        return _command_problem(shown_argv(match["argv"]))
    if span.split()[0] in _commands() and len(span.split()) > 1:
        return _command_problem(shown_argv(span))
    if match := SCRIPT.match(span):
        return None if (ROOT / match["script"]).is_file() else f"no script {match['script']}"
    if match := EXTRA.match(span):                  # `pip install -e ".[notebooks]" && jupyter lab` too
        unknown = set(match["extras"].split(",")) - extras() - {"NAME"}
        return f"no extra {sorted(unknown)} in setup.cfg" if unknown else None
    if span.startswith("from minitransformer import "):
        absent = [name.strip() for name in span.split("import", 1)[1].split(",")
                  if package_object(f"minitransformer.{name.strip()}") is None]
        return f"minitransformer has no {absent}" if absent else None
    if span.startswith("-"):
        option = span.split()[0].split("=")[0]
        return None if option in options() or option in OTHERS else f"no command of the package has {option}"
    if ENVIRONMENT.match(span):
        variable = span.split("=")[0].rstrip("*")
        return None if variable in source else f"the package reads no {variable}"
    if PATH_LIKE.match(span) and ("/" in span or FILE_NAME.match(span)):
        return _path_problem(span, shown.page)
    if match := CALL.match(span):
        return _call_problem(match["callee"], match["args"])
    if match := KEYWORD_ALONE.match(span):
        return None if match["name"] in names or match["name"] in OTHERS else f"no parameter {match['name']}"
    if re.fullmatch(r"\.?" + DOTTED, span):
        return _name_problem(span.lstrip("."))
    return None                                    # an expression, a string, a symbol


def _command_problem(argv):
    """A command named in prose may leave out what it must be given (`exercises make --only NAME`, no folder):
    its words must still be the command's (full command lines, in code blocks, parse in test_docs_examples.py)."""
    error = command_error(argv) if argv else None
    return None if error is None or "the following arguments are required" in error else error


@cache
def _commands():
    from minitransformer.__main__ import COMMANDS
    return set(COMMANDS)


def _name_problem(dotted):
    names, defined, _ = code()
    parts = dotted.split(".")
    if parts[0] in OTHERS:
        return None
    if len(parts) == 1:
        name = parts[0]
        if re.match(r"^[A-Z]", name) and not name.isupper() or re.fullmatch(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+", name):
            known = name in defined or hasattr(builtins, name)
            return None if known else f"no class, function or constant {name} in the package or the notebooks"
        return None if name in names else f"no name {name} in the package's or the notebooks' code"
    found = package_object(dotted)
    if found is None:
        return f"{dotted} does not resolve"
    if found is ...:                                # an instance's attributes (`gamma.grad`): each a name of the code
        unknown = [part for part in parts if part not in names and part != "self"]
        return f"no name {unknown} in the package's or the notebooks' code" if unknown else None
    return None


def _call_problem(callee, args):
    trouble = _name_problem(callee)
    if trouble:
        return trouble
    found = package_object(callee) if "." in callee or callee in code()[1] else None
    if found in (None, ...) or not callable(found):
        return None
    try:
        signature = inspect.signature(found)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    depth, keywords = 0, []
    for match in re.finditer(rf"[()\[\]{{}}]|({NAME})\s*=(?!=)", args):
        if match[0] in "([{":
            depth += 1
        elif match[0] in ")]}":
            depth -= 1
        elif depth == 0:
            keywords.append(match[1])
    unknown = [keyword for keyword in keywords if keyword not in signature.parameters]
    return f"{callee} takes no {unknown}" if unknown else None


def _path_problem(span, page):
    files, folders, file_names = repository()
    if span.startswith(("/", ".")) or span in NOT_OURS:
        return None                                 # the system's (/tmp, /autograder), a suffix (.ipynb), another's
    path = span.rstrip("/")
    first = Path(path).parts[0]
    if first in WRITTEN or "/" in path and first not in {folder.name for folder in folders} or \
            not span.endswith("/") and "/" not in path and not path.endswith(CODE_SUFFIXES):
        return None                       # what a command writes (site/, runs/run-NNN/, exercises.json, setup.sh)
    if "/" not in path:                             # a bare name: a file or folder anywhere in the repository
        known = {folder.name for folder in folders} if span.endswith("/") else file_names
        return None if path in known else f"no {'folder' if span.endswith('/') else 'file'} {span} in the repository"
    return None if names_a_file(path, page, files, folders) else f"no file or folder {span} in the repository"


# ----------------------------------------------------------------------------------------------- the tests
def trouble(shown):
    """Why a name shown does not resolve, or None; a name that its sentence says went, and that the CHANGELOG
    records as gone, is history and passes."""
    found = problem(shown)
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return None if found and REMOVAL.search(shown.sentence) and shown.span in changelog else found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_name_a_page_gives_resolves_against_the_code(page):
    wrong = [f"{shown}: {found}" for shown in shown_names(page) if (found := trouble(shown))]
    assert not wrong, "names that do not resolve against the code:\n" + "\n".join(wrong)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_name_said_importable_from_the_package_is(page):
    import minitransformer
    wrong = [f"{page.relative_to(ROOT).as_posix()}:{line}: `{name}` is said to import from `minitransformer`, "
             "and does not" for line, name in importable_claims(page) if not hasattr(minitransformer, name)]
    assert not wrong, "\n".join(wrong)


def readme_sections(text):
    """The README's headings and bold run-in labels (`**Workflow 1: ...**`), lower case."""
    headings = re.findall(r"^#+\s+(.+)$", text, re.M) + re.findall(r"\*\*([^*]+)\*\*", text)
    return [heading.strip().lower() for heading in headings]


def section_references(page, text=None):
    """(line, section) of every section of the README the page sends the reader to by name."""
    text = prose(page) if text is None else text
    return [(text.count("\n", 0, match.start()) + 1, match["quoted"] or match["bare"])
            for match in README_SECTION.finditer(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_section_of_the_readme_a_page_names_is_there(page):
    sections = readme_sections((ROOT / "README.md").read_text(encoding="utf-8"))
    wrong = [f"{page.relative_to(ROOT).as_posix()}:{line}: the README has no section {section!r}"
             for line, section in section_references(page) if not any(s.startswith(section.lower()) for s in sections)]
    assert not wrong, "\n".join(wrong)


# ----------------------------------------------------------------------------------------------- the checks can fail
PAGE = ROOT / "docs" / "guide" / "a-page.md"          # a page of the guide, as the breakages below are written on it
RESOLVES = ["`LayerNorm`", "`LayerNorm.backward`", "`check_module`", "`minitransformer.layers.layernorm`",
            '`GPT(kernels="plain")`', "`layers/layernorm.py`", "`tests/test_<layer>.py`", "`fast/`",
            "`--max-steps N`", "`python -m minitransformer train --kernels plain`", "`exercises make --only relu`",
            '`pip install -e ".[parity]"`', "`MINITRANSFORMER_AUTOGRADER_ROOT`", "`from minitransformer import GPT`",
            "`dout`", "`layernorm`", "`ignore_index=`", "`x + attn(ln(x))`", "`runs/run-NNN/`", "`np.einsum`",
            "`minitransformer.trainer` went in 0.4"]
BROKEN = ["`LayerNorn`", "`LayerNorm.backwards`", "`check_modul`", "`minitransformer.layers.layernrom`",
          '`GPT(kernel="plain")`', "`layers/layernorn.py`", "`tests/test_<layer>.pyc/`", "`fastest/`",
          "`--max-step N`", "`python -m minitransformer train --kernel plain`", "`exercises make --onli relu`",
          '`pip install -e ".[parityy]" && pytest`', "`MINITRANSFORMER_NOT_READ`", "`from minitransformer import GTP`",
          "`doutt`", "`layernorn`", "`ignore_indexx=`", "`layers/lm_head.py/x`", "`minitransformer.trainerx` went"]


@pytest.mark.parametrize("text", RESOLVES)
def test_a_name_of_the_code_passes(text):
    assert [trouble(shown) for shown in shown_names(PAGE, text)] == [None]


@pytest.mark.parametrize("text", BROKEN)
def test_a_name_that_is_not_the_codes_is_named_with_its_page_and_line(text):
    (shown,) = shown_names(PAGE, "a first line\n" + text)
    assert trouble(shown) and str(shown).startswith("docs/guide/a-page.md:2: `")


def test_a_false_claim_of_importability_and_a_missing_readme_section_are_found():
    text = "All importable from `minitransformer`:\n\n| class | file |\n| --- | --- |\n| `Softmax` | x |\n" \
           "| `ValueLos` | y |\n\nSee the README's \"For students\" and the README's \"Two commands\".\n"
    import minitransformer
    claimed = importable_claims(PAGE, text)
    assert claimed == [(1, "Softmax"), (1, "ValueLos")] and not hasattr(minitransformer, "ValueLos")
    sections = readme_sections((ROOT / "README.md").read_text(encoding="utf-8"))
    missing = [name for _, name in section_references(PAGE, text) if not any(s.startswith(name.lower()) for s in sections)]
    assert missing == ["For students"]
