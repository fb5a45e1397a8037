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
