"""The README is the door: at most 150 lines, linking every page of the guide (docs/guide/*.md, the same files
the site is built from, so a reader without the site finds them), every link of the README and the guide
leading to a file that exists, and its table of optional extras naming exactly the extras of setup.cfg.
"""

import configparser
import re
from pathlib import Path

from _docs import skip_in_a_student_copy

ROOT = Path(__file__).resolve().parent.parent
skip_in_a_student_copy()
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide"
LONGEST = 150
LINK = re.compile(r"(?<!!)\[[^\]]+\]\((?P<target>[^)\s]+)\)")


def test_the_readme_fits_in_150_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= LONGEST, (f"README.md has {len(lines)} lines, at most {LONGEST}: move a section to "
                                   "its own page in docs/guide/ and link it from the README")


def test_the_readme_links_every_guide_page():
    linked = {(ROOT / match["target"].partition("#")[0]).resolve()
              for match in LINK.finditer(README.read_text(encoding="utf-8"))}
    unlinked = sorted(path.name for path in GUIDE.glob("*.md") if path.resolve() not in linked)
    assert sorted(GUIDE.glob("*.md")), "docs/guide/ holds no page"
    assert not unlinked, f"the README links no docs/guide/{unlinked}: a reader without the site would not find them"


def test_every_link_of_the_readme_and_the_guide_leads_to_a_file():
    broken = []
    for page in [README, *sorted(GUIDE.glob("*.md"))]:
        for match in LINK.finditer(page.read_text(encoding="utf-8")):
            target = match["target"].partition("#")[0]
            if target and not re.match(r"^[a-z]+:", target) and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {match['target']}")
    assert not broken, "links to no file:\n" + "\n".join(broken)


def test_the_extras_table_names_the_extras_of_setup_cfg():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    extras = set(config["options.extras_require"])
    section = README.read_text(encoding="utf-8").split("## Optional extras", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([\w-]+)` \|", section, re.M))
    assert listed == extras, f"README's extras {sorted(listed)} against setup.cfg's {sorted(extras)}"


def test_the_first_section_after_the_two_commands_is_the_students_path_and_the_site_opens_with_the_readme():
    """The site's front page (docs/index.md) is the README below its title: the `<!-- README -->` marker comes
    first, so the student's path is the same words in both places, never a second copy to drift."""
    sections = re.findall(r"^## (.+)$", README.read_text(encoding="utf-8"), re.M)
    assert sections[:2] == ["Two commands", "A student's first evening"], f"the README's sections: {sections}"
    front = (ROOT / "docs" / "index.md").read_text(encoding="utf-8").split("\n\n")
    assert front[:2] == ["# minitransformer", "<!-- README -->"], \
        "docs/index.md must be its title, then the <!-- README --> marker (docs/gen_site.py puts the README there)"
    assert "<!-- README -->" not in "\n\n".join(front[2:])


def benchmarks_section(title):
    """The text of one `## title` section of benchmarks/README.md, where every figure is dated."""
    text = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.M | re.S)
    assert match, f"benchmarks/README.md has no section '## {title}'"
    return match.group(1)


def test_the_test_commands_time_is_the_measured_quick_run():
    """The README's test command says how long the quick run takes: the minutes of benchmarks/README.md's
    quick-run row ("The test runs"), rounded, so that a new measurement there and the README cannot disagree."""
    said = re.search(r"python -m pytest +# the tests: the quick run, (\d+) min on 2 ([a-z]+) cores",
                     README.read_text(encoding="utf-8"))
    assert said, "the README's test command must say 'the quick run, N min on 2 ... cores'"
    row = re.search(r"^\| quick[^|]*\| (\d+) s \| [^|]+\| (?P<load>[^|]+)\|", benchmarks_section("The test runs"), re.M)
    assert row, "benchmarks/README.md's 'The test runs' has no quick row with its wall time in seconds"
    assert int(said.group(1)) == round(int(row.group(1)) / 60), \
        f"README: {said.group(1)} min; benchmarks/README.md: {row.group(1)} s"


def test_the_first_evenings_notebook_times_are_the_measured_ones():
    """Each 'runs in ≤ X s' of the student's path is the bound that benchmarks/README.md's notebooks' budget
    gives every notebook it does not name with a longer time; 'runs in N s of its 60 s budget' is the notebook's
    own measured time, rounded."""
    budget = benchmarks_section("The notebooks' budget")
    bound = re.search(r"every\s+other\s+one\s+([\d.]+) s\s+or\s+less", budget)
    slower = set(re.findall(r"\b(\d\d)\s+(?:\([^)]*\)\s+)?[\d.]+ s\b", budget))
    assert bound, "the notebooks' budget must say 'every other one X s or less'"
    claims = re.findall(r"notebooks/(\d\d)_\w+\.ipynb\) \|[^|]+\| [^|]*runs in ≤ ([\d.]+) s", README.read_text(encoding="utf-8"))
    assert claims, "the student's path gives no notebook's run time"
    for notebook, seconds in claims:
        assert notebook not in slower and seconds == bound.group(1), \
            f"README: notebook {notebook} runs in ≤ {seconds} s; benchmarks/README.md: the others {bound.group(1)} s or less, slower: {sorted(slower)}"
    own = re.findall(r"notebooks/(\d\d)_\w+\.ipynb\) \|[^|]+\| [^|]*runs in (\d+) s of its 60 s budget", README.read_text(encoding="utf-8"))
    assert own, "the student's path gives notebook 05's own time against its budget"
    for notebook, seconds in own:
        measured = re.search(rf"\b{notebook}\s+(?:\([^)]*\)\s+)?([\d.]+) s\b", budget)
        assert measured and int(seconds) == round(float(measured.group(1))), \
            f"README: notebook {notebook} runs in {seconds} s; benchmarks/README.md: {measured and measured.group(1)} s"
