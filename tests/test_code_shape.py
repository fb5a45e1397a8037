"""The code base keeps its own rules (issue 25): every path a reader is pointed to exists, no function of the
package is longer than 60 lines, the exercise mode stays within its line cap, and no code docstring carries a
machine's timing (it lives in benchmarks/README.md with its date, and the docstring points there).

Paths: every `dir/file.py`-like name (.py, .md, .ipynb, .cfg, .toml) in a docstring of the package, in the
README and the other documentation pages, and in the notebooks must name a file of the repository: relative
to the repository, the package, tests/, notebooks/ or a folder above the text; a bare file name anywhere in
the repository. Links of the site's pages (docs/) name built pages, which tests/test_site.py follows. The
CHANGELOG is history (it names what went) and is not read. Other projects' files (CS231n's gradient_check.py,
nanoGPT's model.py and prepare.py, BERT's create_pretraining_data.py) and placeholders (layers/x.py) are listed
in tests/_docs.py (NOT_OURS). A path that the CHANGELOG says went (an entry that says it was removed, replaced,
deleted or went) may still be named by history, e.g. in benchmarks/README.md.
"""

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest
from _docs import NOT_OURS, names_a_file

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "minitransformer"
PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|ipynb|cfg|toml))(?![\w/])")
SITE_LINK = re.compile(r"\]\([^)\s]+\)")
LONGEST = 60
EXERCISE_MODE_LINES = 2250         # exercises/ and commands/exercises*.py together, blank lines and docstrings included;
# +250 for a class at once (classroom.py and its options: ~190), the catalogue of every derivation (~25) and the
# byte-code check of the reference (~35)
EXERCISE_MODE_LINES += 12          # the notebooks' problem sets: their catalogue entries, hidden tests kept out of a
                                   # copy, an answer left out taking its grade cells' metadata (no orphaned check)
EXERCISE_MODE_LINES += 185         # one contained process per submission, a child forked per exercise (grading 60
# submissions took 13.5-16.9 s each, process start and imports nine times over): the runner's parent (the package
# compiled once, a command per exercise, waiting and killing, ~95), the child's own /tmp and IPC namespace and its
# files compiled in place (~35), the grader's side of the commands, a new process when one dies (~55); what went: a
# process per exercise and its package copy, hash checks and bookkeeping
EXERCISE_MODE_LINES += 44          # the children's seccomp filter (no kernel keyring: a key outlives its process, for
# the next exercise's child to read), an output file of each child's own (a shared one's offset and size hand a number
# on), and a pid namespace for each child under root (the fallback's answers, all nobody, could kill another student's)
EXERCISE_MODE_LINES += 105         # no reference answer in the student's process: every assigned region the student's
# answer there, one that does not compile left out for the others (~25); a failure in another exercise's answer found
# in the traceback and said as such, what an exercise calls named with how it fared, in Gradescope's output too
# (~65); records checked (~5)
EXERCISE_MODE_LINES += 28          # every system: `located` in a module of its own that imports anywhere (runner.py
# imports it as a module or, in the sandbox, as the script beside it), and `exercises grade` refused off Linux in one line
EXERCISE_MODE_LINES += 200         # copies made to derive: Derivation sections found, stripped and counted
# (derivations.py, ~90), the catalogue's weeks and what each exercise builds on (~55: the course plan, and the
# derivations a copy leaves out with an exercise), make's, the notebooks' and the command's side (~55)
EXERCISE_MODE_LINES += 15           # a copy made to derive graded as it was made: the assignment's `derive` and the
# command's (~6), a file's text as a copy holds it in one function that the grader's files use too (~4), passing it
# on and a note when the copy's exercises.json says otherwise (~5)
LONG_FOR_NOW = set()                # (file, function) pairs allowed over LONGEST while they are split
REMOVAL = re.compile(r"\b(removed|went|goes|gone|replaces|replaced|deleted)\b", re.I)


def _repository_files():
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, encoding="utf-8").stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (a student copy): the paths are checked in the reference")
    return {Path(line) for line in listed.splitlines()}


def _texts():
    """(path of the text, text) of every docstring of the package, documentation page and notebook cell."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                if ast.get_docstring(node, clean=False):
                    yield path, ast.get_docstring(node, clean=False)
    pages = [*ROOT.glob("*.md"), *ROOT.glob("benchmarks/*.md"), *ROOT.glob("notebooks/*.md"), *ROOT.glob("docs/**/*.md")]
    for path in sorted(page for page in pages if page.name != "CHANGELOG.md" and "node_modules" not in page.parts):
        text = path.read_text(encoding="utf-8")
        if "docs" in path.relative_to(ROOT).parts:        # a link there names a page of the built site (test_site.py)
            text = SITE_LINK.sub("]", text)
        yield path, text
    for path in sorted(ROOT.glob("notebooks/*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            yield path, "".join(cell["source"])


def _removed_paths():
    """Paths that an entry of the CHANGELOG (a bullet, with its wrapped lines) says went."""
    entries = re.split(r"\n(?=- |\n|#)", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
    return {name for entry in entries if REMOVAL.search(entry) for name in PATH.findall(entry)}


def test_every_path_a_docstring_or_page_names_exists():
    files = _repository_files()
    names = {path.name for path in files}
    removed = _removed_paths()
    missing = set()
    for where, text in _texts():
        for name in PATH.findall(text):
            gone = any(name == path or name.endswith("/" + path) for path in removed)
            if name in NOT_OURS or gone or ("/" not in name and name in names):
                continue
            if not names_a_file(name, where, files):
                missing.add(f"{where.relative_to(ROOT)}: {name}")
    assert not missing, "paths named that do not exist:\n" + "\n".join(sorted(missing))


def test_no_function_of_the_package_is_longer_than_60_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST and (relative, node.name) not in LONG_FOR_NOW:
                    long.append(f"{relative}:{node.lineno} {node.name}: {lines} lines")
    assert not long, f"functions over {LONGEST} lines (split them by meaning):\n" + "\n".join(long)


def test_the_exercise_mode_stays_within_its_line_cap():
    files = sorted((PACKAGE / "exercises").glob("*.py")) + sorted((PACKAGE / "commands").glob("exercises*.py"))
    counts = {path.relative_to(PACKAGE).as_posix(): len(path.read_text(encoding="utf-8").splitlines()) for path in files}
    assert sum(counts.values()) <= EXERCISE_MODE_LINES, (
        f"the exercise mode has {sum(counts.values())} lines, more than {EXERCISE_MODE_LINES} (issue 25): {counts}")


# A machine's timing in a docstring: a figure in a unit of time (not a setting: "60 s by default"), a throughput,
# or a speed ratio. Units are matched case-sensitively (ALiBi's "8h/H" is no hour); "second" alone is an ordinal.
_TIME_UNIT = r"(?:ms|µs|μs|us|ns|s|sec|seconds|milliseconds|microseconds|nanoseconds|minutes)"
_NUMBER = r"\d+(?:\.\d+)?(?:\s*(?:-|–|to)\s*\d+(?:\.\d+)?)?"
TIMING = re.compile("|".join([
    rf"\b\d+(?:\.\d+)?\s*{_TIME_UNIT}\b(?!\s+by default)",
    r"(?i:\b\d+(?:\.\d+)?\s*(?:g?flop|tokens?|steps?|samples?)/s\b)",
    rf"(?i:\b{_NUMBER}\s*(?:x|×|times)\s+(?:faster|slower|as\s+(?:fast|slow)))",
    r"(?i:\b(?:twice|half|thrice)\s+as\s+(?:fast|slow|quick))",
    rf"(?i:\b{_NUMBER}\s*%?\s+of\s+(?:the|a|an|its|their)\b[^.;()]{{0,40}}?\b(?:time|step|speed)\b)",
    r"(?i:\d\s*%\s+(?:longer|shorter|faster|slower)\b)",
    r"(?i:\b(?:half|a\s+third|a\s+fifth|a\s+quarter)\s+(?:less|more)\s+time\b)",
]))
# (file in the package, why it may still hold one): the training room's, for its own change to take out
TIMINGS_FOR_NOW = {}


def _timings(text):
    return [match.group(0) for match in TIMING.finditer(text)]


def test_the_timing_pattern_finds_figures_and_speed_ratios_but_not_shapes_counts_or_settings():
    """The pattern below, held to what docstrings said before the figures moved, and to what they may say."""
    timings = ["0.16 ms transposed", "2.2 against 3.6 ns an element", "12-13 % of the step's CPU time",
               "2 to 3 times faster in NumPy", "about twice as slowly", "about half as fast", "0.1 s here",
               "0.82-0.90 of the attention's time", "a third less time", "200 GFLOP/s", "(about 0.1 µs; a step)",
               "took 21 % longer", "saved 0.7 ms of a 54 ms step", "0.8 of the step's time"]
    harmless = ["(12, 64, 128)", "140 fingerprints", "1e-7 relative", "2 x 2 tiles", "T = 2048 keys", "x (2, 3, 6)",
                "60 s by default", "g^2             second moment", "m_h = 2^(-8h/H)", "every other slope of 2H'",
                "B 12, T 64", "1 in 110 for (12, 64, 128)", "0.5 of the weight", "3 steps", "hs = C // H"]
    assert [text for text in timings if not _timings(text)] == []
    assert [text for text in harmless if _timings(text)] == []


def test_no_code_docstring_carries_a_timing():
    """A figure measured on one machine goes stale where nobody dates it: it lives in benchmarks/README.md with its
    date, machine and command, and the docstring says why in words and points there."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                found.setdefault(path.relative_to(PACKAGE).as_posix(), []).extend(
                    _timings(ast.get_docstring(node, clean=False) or ""))
    found = {relative: figures for relative, figures in found.items() if figures}
    unexpected = {relative: figures for relative, figures in found.items() if relative not in TIMINGS_FOR_NOW}
    assert not unexpected, ("timings in code docstrings (move each to benchmarks/README.md, dated, and point there):\n"
                            + "\n".join(f"{relative}: {figures}" for relative, figures in sorted(unexpected.items())))
    cleared = sorted(set(TIMINGS_FOR_NOW) - set(found))
    assert not cleared, f"no timing left in {cleared}: take them out of TIMINGS_FOR_NOW"
