"""The command line and the student's whole path on macOS and Windows, as far as Linux can show them.

No macOS or Windows Python runs here; the CI workflow (.github/workflows/ci.yml) runs the suite on both. Here, each
test runs `python -m minitransformer ...` through tests/_other_system.py, which takes out of `os` and `signal` what
that system's Python lacks (os.sched_getaffinity, os.fork, os.register_at_fork, os.geteuid, signal.SIGKILL ...),
makes `import pwd`, `resource`, `fcntl` fail, and sets `sys.platform`; and, for Windows, in a locale whose encoding
is ASCII (stricter than Windows' code page, cp1252): a text file opened without `encoding="utf-8"`, or output printed
in the locale's encoding, fails as it would there. tests/test_platform_check.py reads the code as a type checker
set to each system does.
"""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minitransformer.exercises.make import reference_package

HERE = Path(__file__).resolve().parent
OTHER_SYSTEM = HERE / "_other_system.py"
REFERENCE_ROOT = reference_package().parent
SYSTEMS = {"darwin": "macOS", "win32": "Windows"}
# Windows' locale, as near as Linux comes: its encoding ASCII (Windows' cp1252 cannot encode σ, ≤, − either)
ASCII_LOCALE = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
pytestmark = pytest.mark.skipif((REFERENCE_ROOT / "exercises.json").is_file(),
                                reason="a student copy: these runs start with exercises make, which runs in the reference")
TINY = ["--block-size", "8", "--batch-size", "4", "--n-layers", "1", "--n-heads", "2", "--d-model", "16", "--d-ff", "32",
        "--eval-interval", "2", "--eval-batches", "1", "--no-progress", "--sample-tokens", "0"]


def on(system, *args, cwd=REFERENCE_ROOT, locale=None, timeout=300):
    """Run `python ARGS` as `system`'s Python (tests/_other_system.py), in the directory `cwd`; the CompletedProcess,
    its output decoded as UTF-8 (what the command line writes everywhere)."""
    environment = {name: value for name, value in os.environ.items() if name not in ("PYTHONIOENCODING", "LANG",
                                                                                      "LANGUAGE", "LC_CTYPE")}
    environment.update(locale or {})
    return subprocess.run([sys.executable, str(OTHER_SYSTEM), system, *args], cwd=cwd, env=environment,
                          capture_output=True, timeout=timeout, encoding="utf-8", errors="replace")


def ran(done, code=0):
    """Assert the process ended with `code` and no traceback; its stdout."""
    assert done.returncode == code and "Traceback" not in done.stderr, (
        f"exit status {done.returncode}, expected {code}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n"
        f"{done.stderr[-3000:]}")
    return done.stdout


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_module_imports_and_every_commands_and_actions_help_prints(system):
    """Every module, the grading sandbox's two too (the command line imports them everywhere, and refuses to grade);
    the parser is built (where `-j`'s default once called os.sched_getaffinity) and each --help printed."""
    code = ("import importlib, pkgutil, minitransformer\n"
            "from minitransformer.__main__ import build_parser, main\n"
            "names = [m.name for m in pkgutil.walk_packages(minitransformer.__path__, 'minitransformer.')]\n"
            "for name in names:\n"
            "    importlib.import_module(name)\n"
            "print(len(names), 'modules imported', flush=True)\n"
            "_, _, commands = build_parser()\n"
            "every = [[]] + [[name] for name in commands] + [[name, action] for name, command in commands.items()\n"
            "    if command._subparsers for action in command._subparsers._group_actions[0].choices]\n"
            "for argv in every:\n"
            "    try:\n"
            "        main([*argv, '--help'])\n"
            "    except SystemExit as exit:\n"
            "        assert exit.code == 0, (argv, exit.code)\n"
            "    print('=== helped', *argv, flush=True)\n")
    out = ran(on(system, "-c", code))
    assert int(out.split(" modules imported")[0]) > 100, out
    assert "=== helped exercises gradescope-bundle" in out and out.count("=== helped") >= 13, out
    assert "-j N, --jobs N" in out and "(default: " in out.split("-j N, --jobs N")[1].split("\n  -")[0]


@pytest.mark.parametrize("system, options", [("darwin", []), ("win32", ["--class"])])
def test_grading_is_refused_in_one_line_that_says_where_to_grade(system, options, tmp_path):
    done = on(system, "-m", "minitransformer", "exercises", "grade", *options, str(tmp_path))
    ran(done, code=2)
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: exercises grade on {SYSTEMS[system]}: grading needs Linux"), line
    assert "Gradescope" in line and "exercises check" in line, line
    assert list(tmp_path.iterdir()) == [], "nothing is written before the refusal"


def test_train_with_workers_where_mpi_cannot_be_had_names_microsoft_mpi(tmp_path):
    """MPICH has no Windows build: `pip install "minitransformer[mpi]"` brings mpi4py only, and the line says what else."""
    (tmp_path / "no_mpi4py").mkdir()
    (tmp_path / "no_mpi4py" / "mpi4py.py").write_text("raise ImportError('mpi4py is not installed')\n", encoding="utf-8")
    code = (f"import sys; sys.path.insert(0, {str(tmp_path / 'no_mpi4py')!r})\n"
            "from minitransformer.__main__ import main\n"
            f"sys.exit(main(['train', '--workers', '2', '--max-steps', '1', '--out', {str(tmp_path / 'run')!r}]))\n")
    done = on("win32", "-c", code)
    ran(done, code=2)
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: --workers 2 runs the command under mpiexec") and "Microsoft MPI" in line, line
    assert not (tmp_path / "run").exists()


def test_the_students_whole_path_on_windows(tmp_path):
    """exercises make and gradescope-bundle, then in the copy exercises check, gradcheck --only, a tiny train on text
    beyond ASCII and sample (which prints that text), each as `python -m minitransformer` on Windows in an ASCII
    locale."""
    copy = tmp_path / "copy"
    out = ran(on("win32", "-m", "minitransformer", "exercises", "make", str(copy), "--only", "layernorm",
                 locale=ASCII_LOCALE))
    assert "wrote the student copy" in out and (copy / "minitransformer" / "exercises" / "located.py").is_file()
    bundle = tmp_path / "autograder.zip"
    out = ran(on("win32", "-m", "minitransformer", "exercises", "gradescope-bundle", "--assignment",
                 str(tmp_path / "copy.assignment.json"), "--out", str(bundle), locale=ASCII_LOCALE))
    assert "wrote the Gradescope autograder" in out and bundle.is_file()
    done = on("win32", "-m", "minitransformer", "exercises", "check", cwd=copy, locale=ASCII_LOCALE)
    out = ran(done, code=1)                            # exit status 1 until the answers are right
    assert "forward not implemented (layernorm.forward) at minitransformer/layers/layernorm.py:" in out, out
    assert "0 of 1 exercises pass" in out, out
    out = ran(on("win32", "-m", "minitransformer", "gradcheck", "--only", "layernorm", locale=ASCII_LOCALE))
    assert "LayerNorm" in out
    text = tmp_path / "greek.txt"
    text.write_text("σ−∑ αβγ ≤ δε\n" * 200, encoding="utf-8")
    run = tmp_path / "run"
    ran(on("win32", "-m", "minitransformer", "train", "--text", str(text), "--max-steps", "2", "--out", str(run), *TINY,
           cwd=tmp_path, locale=ASCII_LOCALE))
    out = ran(on("win32", "-m", "minitransformer", "sample", "--checkpoint", str(run), "--max-new-tokens", "40",
                 cwd=tmp_path, locale=ASCII_LOCALE))
    assert set(out) & set("σ−∑αβγ≤δε"), out


# ---------------------------------------------------------------- what Windows does otherwise, simulated here
def refusing_like_windows(real_replace, real_remove, open_elsewhere=()):
    """os.replace and os.remove as Windows has them: no renaming onto a directory or a link to one (MoveFileEx), and
    no removing a file another process has open (`open_elsewhere`)."""
    def replace(source, target):
        if os.path.isdir(target):
            raise PermissionError(13, "Access is denied", str(target))
        return real_replace(source, target)

    def remove(path):
        if os.path.abspath(path) in {os.path.abspath(other) for other in open_elsewhere}:
            raise PermissionError(13, "The process cannot access the file: it is being used by another process", path)
        return real_remove(path)
    return replace, remove


def test_runs_latest_names_the_newest_run_where_a_link_cannot_be_renamed_over(tmp_path, monkeypatch):
    from minitransformer.commands.runs import latest_run, new_run_directory

    replace, _ = refusing_like_windows(os.replace, os.remove)
    monkeypatch.setattr(os, "replace", replace)
    root = tmp_path / "runs"
    for name in ("run-001", "run-002", "run-003"):
        path, note = new_run_directory(str(root))
        assert note is None and os.readlink(root / "latest") == name and latest_run(str(root)) == path
    assert sorted(os.listdir(root)) == ["latest", "run-001", "run-002", "run-003"]


def test_a_checkpoint_saved_while_another_process_reads_the_one_it_replaces(tmp_path, monkeypatch):
    """The save stands: the replaced arrays file, which Windows will not delete while it is open, stays beside it."""
    from minitransformer.training.checkpoint import read_checkpoint, save_checkpoint
    from minitransformer.training.config import TrainConfig, build_model

    model = build_model(TrainConfig(block_size=4, n_layers=1, n_heads=1, d_model=4, d_ff=8), 5)
    save_checkpoint(tmp_path, model, None, {"step": 0})
    first = tmp_path / json.loads((tmp_path / "checkpoint.json").read_text(encoding="utf-8"))["arrays_file"]
    _, remove = refusing_like_windows(os.replace, os.remove, open_elsewhere=[first])
    monkeypatch.setattr(os, "remove", remove)
    model.token_embedding.weight.data += 1.0
    save_checkpoint(tmp_path, model, None, {"step": 1})
    meta, arrays = read_checkpoint(tmp_path)
    assert meta["step"] == 1 and first.is_file()
    assert (arrays["param.token_embedding.weight"] == model.token_embedding.weight.data).all()


GRADES = ("grade_copy", "grade_class", "grade_student", "run_autograder", "choose_isolation", "grade_exercises")


def _grades(node):
    """Whether the code of `node` grades: calls one of GRADES or runs `exercises grade` (its words in one list)."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and inner.id in GRADES or isinstance(inner, ast.Attribute) and inner.attr in GRADES:
            return True
        if isinstance(inner, ast.List) and [getattr(e, "value", None) for e in inner.elts[:2]] == ["exercises", "grade"]:
            return True
    return False


def _skips_off_linux(decorators, markers):
    """Whether a decorator skips off Linux: a skipif on sys.platform, or a module's name for one (`markers`)."""
    return any("sys.platform" in ast.unparse(d) or ast.unparse(d) in markers for d in decorators)


def test_every_test_that_grades_skips_off_linux():
    """Grading needs Linux (its sandbox), so a test that grades must skip on macOS and Windows, saying why: its module
    skips itself after its imports, or the test carries a skip off Linux. A test run on those systems (the workflow's)
    would otherwise fail there; the stand-ins above do not run the suite."""
    from test_platform_check import skips_itself_off_linux

    unguarded = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        if skips_itself_off_linux(path):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        markers = {target.id for node in tree.body if isinstance(node, ast.Assign) and "sys.platform" in ast.unparse(node.value)
                   for target in node.targets if isinstance(target, ast.Name)}      # LINUX = pytest.mark.skipif(...)
        module_skip = "pytestmark" in markers
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and _grades(node) \
                    and not module_skip and not _skips_off_linux(node.decorator_list, markers):
                unguarded.append(f"{path.name}:{node.lineno} {node.name}")
    assert not unguarded, ("tests that grade without skipping off Linux (add `if sys.platform != \"linux\": "
                           "pytest.skip(LINUX_ONLY, allow_module_level=True)` after the imports, or a skipif):\n  "
                           + "\n  ".join(unguarded))
