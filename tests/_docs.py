"""What the documentation tests share: they check the reference's README, guide and benchmarks, which a student
copy (`exercises make`) does not have, so there they skip, saying why; and the two things more than one of them
asks of a name shown to a reader: does a command line shown parse, does a path shown name a file."""

import argparse
import contextlib
import functools
import io
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "minitransformer"
# files of other projects that the pages name, and placeholders of examples
NOT_OURS = {"gradient_check.py", "model.py", "prepare.py",                  # CS231n's and nanoGPT's files
            "create_pretraining_data.py",                                   # Google's BERT
            "data/tinyshakespeare/input.txt",                               # char-rnn's
            "layers/x.py", "x.ipynb", "notebooks/_src/NN_name.py"}          # placeholders in examples


def skip_in_a_student_copy():
    """Skip the calling test module where docs/guide/ is absent (a student copy)."""
    if not (ROOT / "docs" / "guide").is_dir():
        pytest.skip("a student copy has no docs/guide/: the documentation is checked in the reference",
                    allow_module_level=True)


def shown_argv(words):
    """The argv of a command line as a page shows it: `[--nsp]` read as its word, `NAME[,NAME...]` as NAME."""
    words = re.sub(r"\[,[^\]]*\]", "", words)
    for sign in ("[", "]", "...", "…"):
        words = words.replace(sign, " ")
    return shlex.split(words)


def command_error(argv):
    """None if `python -m minitransformer` parses argv (nothing is run) with each option written in full (argparse
    would take `--kernel` for `--kernels`), else one line saying what is wrong."""
    from minitransformer.__main__ import build_parser
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser()[0].parse_args(argv)
        except SystemExit as stop:           # --help exits 0; a mistake exits 2 with one error line
            if stop.code != 0:
                return stderr.getvalue().strip() or f"exit status {stop.code}"
    written = argv[:argv.index("--")] if "--" in argv else argv
    short = [word.split("=")[0] for word in written if word.startswith("--") and word.split("=")[0] not in options()]
    return f"{', '.join(short)}: not an option of the command line (only a prefix of one)" if short else None


@functools.cache
def options():
    """Every option string of the package's commands (`--max-steps`, `-j`, ...)."""
    from minitransformer.__main__ import build_parser

    def walk(parser):
        for action in parser._actions:
            yield from action.option_strings
            if isinstance(action, argparse._SubParsersAction):
                for subparser in action.choices.values():
                    yield from walk(subparser)
    return frozenset(walk(build_parser()[0]))


def names_a_file(name, where, files, folders=frozenset()):
    """Whether a path shown in the text at `where` names one of `files` or `folders` (the repository's, relative to
    ROOT): relative to the repository, the package, tests/, notebooks/ or a folder above the text. `<...>`, `NNN`
    and `*` in the name stand for any one part of it (`tests/test_<layer>.py`, `runs/run-NNN/`)."""
    pattern = re.sub(r"<[^>]*>|NNN|\*", "*", name)
    for base in (ROOT, PACKAGE, ROOT / "tests", ROOT / "notebooks", *where.parents):
        target = (base / pattern).resolve()
        if not target.is_relative_to(ROOT):
            continue
        wanted = target.relative_to(ROOT)
        if wanted in files or wanted in folders or "*" in pattern and any(
                len(known.parts) == len(wanted.parts) and known.match(str(wanted)) for known in files | folders):
            return True
    return False


def copy_for_the_lists(target):
    """Copy into `target` what docs/gen_lists.py reads (the package, the guide, the notebooks, the tests' names,
    benchmarks/README.md, setup.cfg), for a test to break it there; returns `target`."""
    import shutil

    shutil.copytree(ROOT / "minitransformer", target / "minitransformer", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "docs" / "guide", target / "docs" / "guide")
    for folder, pattern in (("notebooks", "*.ipynb"), ("tests", "test_*.py"), ("benchmarks", "README.md")):
        (target / folder).mkdir(parents=True, exist_ok=True)
        for path in (ROOT / folder).glob(pattern):
            shutil.copy(path, target / folder / path.name)
    shutil.copy(ROOT / "setup.cfg", target / "setup.cfg")
    return target
