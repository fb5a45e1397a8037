"""Examples that run: every ```python block of the README and the guide pages runs here (one namespace per page,
blocks in order, from a temporary folder), and every command line the documentation shows parses.

A block too long or too demanding to run carries its reason on the line before it:
`<!-- not run: needs GPT-2's released files -->`; it is still compiled, and the command lines in it still parse.
`python -m minitransformer ...` is parsed by the package's own parser (`build_parser`, nothing run);
`python benchmarks/bench_x.py ...` (or `train_x.py`) has each option checked against the script's `--help`.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _docs import command_error, shown_argv, skip_in_a_student_copy

ROOT = Path(__file__).resolve().parent.parent
skip_in_a_student_copy()
EXAMPLE_PAGES = sorted([ROOT / "README.md", *(ROOT / "docs" / "guide").glob("*.md")])
COMMAND_PAGES = sorted({*EXAMPLE_PAGES, ROOT / "benchmarks" / "README.md", ROOT / "CONTRIBUTING.md",
                        ROOT / "docs" / "README.md"})
FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.+?) -->$")
WORD = r"""(?:"[^"\n]*"|'[^'\n]*'|[^\s`|;&)"'])+"""      # a shell word: quoted parts may hold | ; & )
PROGRAM = re.compile(rf"python -m minitransformer(?P<argv>(?: +{WORD})*)")
BENCHMARK = re.compile(rf"python (?P<script>benchmarks/(?:bench|train)_\w+\.py)(?P<argv>(?: +{WORD})*)")


def blocks(path):
    """The fenced blocks of a page: (language, first line number, code, reason it is not run or None)."""
    lines, found, start = path.read_text(encoding="utf-8").splitlines(), [], None
    for number, line in enumerate(lines):
        match = FENCE.match(line)
        if match and start is None:
            start, language = number, match[1]
        elif line.strip() == "```" and start is not None:
            marker = NOT_RUN.match(lines[start - 1].strip()) if start else None
            found.append((language, start + 2, "\n".join(lines[start + 1:number]) + "\n", marker and marker["reason"]))
            start = None
    return found


def _name(path):
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", EXAMPLE_PAGES, ids=_name)
def test_every_python_block_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__example__"}
    for language, line, code, reason in blocks(page):
        if language != "python":
            continue
        compiled = compile("\n" * (line - 1) + code, _name(page), "exec")   # a failure names the page's line
        if reason is None:
            exec(compiled, namespace)


def command_lines(path):
    """(line number, program, argv) of every `python -m minitransformer ...` and `python benchmarks/...` shown.

    A command may run over two lines inside backquotes or after a backslash; a `# comment` is not part of it.
    Each change below keeps the text's length, so that a match's offset still gives its line.
    """
    original = path.read_text(encoding="utf-8")
    text = original.replace("\\\n", "  ")
    text = re.sub(r"`python [^`\n]*\n[^`\n]*`", lambda match: match[0].replace("\n", " "), text)
    text = re.sub(r"(?m)(?<=\S)[ \t]+#[ \t].*$", lambda match: " " * len(match[0]), text)
    for pattern, program in ((PROGRAM, None), (BENCHMARK, "script")):
        for match in pattern.finditer(text):
            argv = shown_argv(match["argv"])
            if argv or program:                  # the program's bare name is a name, not a command line
                number = original.count("\n", 0, match.start()) + 1
                yield number, (match[program] if program else "minitransformer"), argv


ALL_COMMANDS = [(path, *shown) for path in COMMAND_PAGES for shown in command_lines(path)]


def test_the_pages_show_command_lines():
    programs = {program for _, _, program, _ in ALL_COMMANDS}
    assert "minitransformer" in programs and "benchmarks/bench_train.py" in programs


@pytest.mark.parametrize("path, number, argv", [(p, n, a) for p, n, prog, a in ALL_COMMANDS if prog == "minitransformer"],
                         ids=lambda value: _name(value) if isinstance(value, Path) else str(value))
def test_every_command_line_shown_parses(path, number, argv):
    error = command_error(argv)
    assert error is None, f"{_name(path)}:{number}: python -m minitransformer {' '.join(argv)}\n{error}"


# modules of the optional extras (setup.cfg) that a benchmark may import before it parses its options
OPTIONAL_MODULES = {"mpi4py", "torch", "transformers", "tiktoken", "safetensors", "tokenizers", "sentencepiece"}


@pytest.fixture(scope="module")
def benchmark_options():
    """{script: the options its --help lists}, each script asked once."""
    options = {}
    for script in sorted({program for _, _, program, _ in ALL_COMMANDS if program != "minitransformer"}):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        shown = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, env=env, encoding="utf-8")
        missing = re.search(r"ModuleNotFoundError: No module named '(\w+)", shown.stderr)
        if shown.returncode and missing and missing[1] in OPTIONAL_MODULES:
            options[script] = None               # needs an optional extra that is not installed: checked with it
            continue
        assert shown.returncode == 0, f"{script} --help failed:\n{shown.stderr[-1500:]}"
        options[script] = set(re.findall(r"(?<![\w-])--[\w-]+", shown.stdout))
    return options


def test_every_benchmark_command_shown_uses_options_the_script_has(benchmark_options):
    wrong = [f"{_name(path)}:{number}: {program} has no {option}"
             for path, number, program, argv in ALL_COMMANDS if program != "minitransformer"
             if benchmark_options[program] is not None
             for option in argv if option.startswith("--") and option.split("=")[0] not in benchmark_options[program]]
    assert not wrong, "\n".join(wrong)
