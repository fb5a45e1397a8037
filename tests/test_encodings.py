"""Every text file is opened with an encoding: on Windows, Python before 3.15 reads and writes the locale's code page
(cp1252) otherwise, and a layer file's maths (σ, −, ∑), a README's ε or a student's accented name in a gradebook
breaks there.

Ruff's PLW1514 (ruff.toml) finds the calls whose receiver it can type: `open(...)`, `Path("x").read_text()`. This
reads the code itself for those it cannot: `read_text`/`write_text` on any name, `Path.open` on a variable,
`os.fdopen`, `subprocess` in text mode, `tempfile`'s text modes, `io.TextIOWrapper`, each without `encoding=`, in
the package, the tests, the tools, the benchmarks, the docs scripts and the notebook sources: all that the CI
workflow runs on Windows. A failure names file:line.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ["minitransformer/**/*.py", "tests/**/*.py", "tools/**/*.py", "benchmarks/**/*.py", "docs/*.py",
           "notebooks/*.py", "notebooks/_src/*.py"]
MODE_LETTERS = set("rwxabt+")
SUBPROCESS_TEXT = {"run", "Popen", "check_output", "check_call", "call"}
TEMPORARY_FILES = {"NamedTemporaryFile", "TemporaryFile", "SpooledTemporaryFile"}
OPENERS = {"read_text", "write_text", "open", "fdopen", "TextIOWrapper"} | SUBPROCESS_TEXT | TEMPORARY_FILES


def _argument(call, position, keyword):
    """The call's argument at `position` or given as `keyword` (None: not given)."""
    if len(call.args) > position:
        return call.args[position]
    return next((item.value for item in call.keywords if item.arg == keyword), None)


def _is_mode(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value != "" \
        and set(node.value) <= MODE_LETTERS


def _text_mode(call, position, default):
    """True when the call opens in text mode: its mode at `position` (or `mode=`), else `default`, has no "b"; a
    mode the code computes counts as text (say `encoding=` or write the mode out)."""
    mode = _argument(call, position, "mode")
    if mode is None:
        return "b" not in default
    return not (_is_mode(mode) and "b" in mode.value)


def unencoded(call):
    """What `call` opens as text without an encoding ("os.fdopen in text mode"...), or None."""
    function = call.func
    name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
    if name not in OPENERS or any(item.arg == "encoding" for item in call.keywords) \
            or any(isinstance(argument, ast.Starred) for argument in call.args):
        return None
    receiver = ast.unparse(function.value) if isinstance(function, ast.Attribute) else None
    if name == "read_text" and receiver is not None and not call.args:            # read_text(encoding, errors)
        return f"{receiver}.read_text()"
    if name == "write_text" and receiver is not None and len(call.args) < 2:      # write_text(data, encoding, ...)
        return f"{receiver}.write_text()"
    if name == "open" and receiver in (None, "io", "codecs", "gzip", "bz2", "lzma"):      # open(file, mode, ...)
        default = "rb" if receiver in ("gzip", "bz2", "lzma") else "r"
        return f"{receiver + '.' if receiver else ''}open in text mode" if _text_mode(call, 1, default) else None
    if name == "open" and receiver not in ("os", "webbrowser"):
        # Path.open(mode, ...): no argument, or a mode first; another first argument is another open (a zip
        # archive's member, a browser's page), which reads no text file
        first = call.args[0] if call.args else None
        if (first is None or _is_mode(first)) and _text_mode(call, 0, "r"):
            return f"{receiver}.open in text mode"
        return None
    if name == "fdopen" and _text_mode(call, 1, "r"):
        return "os.fdopen in text mode"
    if name in SUBPROCESS_TEXT and receiver in (None, "subprocess"):
        text = [item.value for item in call.keywords if item.arg in ("text", "universal_newlines")]
        if any(not (isinstance(value, ast.Constant) and not value.value) for value in text):
            return f"subprocess.{name} in text mode"
    if name in TEMPORARY_FILES and _argument(call, 0, "mode") is not None and _text_mode(call, 0, "w+b"):
        return f"tempfile.{name} in text mode"
    if name == "TextIOWrapper":
        return "io.TextIOWrapper"
    return None


def scan(root):
    """'file:line: what' for every text opened without an encoding in the files of SCANNED under `root`."""
    found = []
    paths = sorted({path for pattern in SCANNED for path in root.glob(pattern)
                    if not {"node_modules", "_build", ".venv"} & set(path.relative_to(root).parts)})
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call) and (what := unencoded(node)):
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}: {what} without encoding=")
    return found


def test_every_text_file_is_opened_with_an_encoding():
    found = scan(ROOT)
    assert not found, f"{len(found)} opened without an encoding (add encoding=\"utf-8\"):\n" + "\n".join(found)


def test_the_scan_finds_each_kind_of_call_it_looks_for(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "sample.py").write_text(
        "import io, os, subprocess, tempfile\n"
        "report.read_text()\n"                                  # 2: any receiver
        "folder.joinpath('x').write_text(text)\n"               # 3
        "handle = path.open()\n"                                # 4: Path.open, text
        "handle = path.open('w')\n"                             # 5
        "handle = os.fdopen(fd, 'w')\n"                         # 6
        "subprocess.run(command, text=True)\n"                  # 7
        "subprocess.Popen(command, universal_newlines=True)\n"  # 8
        "tempfile.NamedTemporaryFile('w')\n"                    # 9
        "io.TextIOWrapper(buffer)\n"                            # 10
        "open(name, mode)\n"                                    # 11: a computed mode counts as text
        "open(name)\n"                                          # 12
        # none of these opens text without an encoding
        "path.read_text(encoding='utf-8'); path.read_text('utf-8'); path.write_text(t, 'utf-8')\n"
        "open(name, 'rb'); path.open('rb'); os.fdopen(fd, 'wb'); os.open(name, flags)\n"
        "archive.open(member); webbrowser.open(url); tempfile.NamedTemporaryFile()\n"
        "subprocess.run(command, capture_output=True); subprocess.run(command, text=True, encoding='utf-8')\n",
        encoding="utf-8")
    lines = [int(line.split(":")[1]) for line in scan(tmp_path)]
    assert lines == list(range(2, 13)), scan(tmp_path)
