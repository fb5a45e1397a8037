"""The course plan (docs/guide/course-plan.md, written by docs/gen_lists.py from the exercise catalogue): its order
respects what each exercise builds on, and what an exercise builds on includes every other exercise its layers' cases
really run (traced, as `exercises make` finds the layers a copy's blanks hold up); every notebook has one week; its
sizes and its time estimate follow the rules it states; its grading cost is benchmarks/README.md's measured one.
That the committed page is what the generator writes now is tests/test_docs_lists.py's check of every list.
"""

import importlib.util
import re
from pathlib import Path

import pytest
from _docs import copy_for_the_lists, skip_in_a_student_copy

from minitransformer.exercises.catalogue import EXERCISES, NOTEBOOK_EXERCISES, WEEKS, Exercise, built_on
from minitransformer.exercises.make import reference_package, unavailable_layers
from minitransformer.exercises.regions import package_regions

ROOT = Path(__file__).resolve().parent.parent
skip_in_a_student_copy()
_spec = importlib.util.spec_from_file_location("gen_lists", ROOT / "docs" / "gen_lists.py")
gen_lists = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_lists)
PAGE = ROOT / "docs" / "guide" / "course-plan.md"
BY_NAME = {exercise.name: exercise for exercise in EXERCISES}


def test_what_an_exercise_builds_on_holds_every_exercise_its_layers_run():
    regions = package_regions(reference_package())
    reached = unavailable_layers(reference_package(), sorted(regions), regions)     # layer -> exercises it runs
    for exercise in EXERCISES:
        runs = set().union(*(reached.get(layer, []) for layer in exercise.layers)) - {exercise.name}
        partners = {other.name for other in EXERCISES if set(other.layers) & set(exercise.layers)}   # graded together
        missing = runs - partners - set(exercise.builds_on)
        assert not missing, f"{exercise.name}'s cases run {sorted(missing)}: add them to its builds_on"
        assert set(exercise.builds_on) <= set(BY_NAME) - {exercise.name}, exercise.name


def test_built_on_is_every_exercise_that_reaches_the_given_ones_through_builds_on():
    """`built_on` (what a copy made to derive leaves out with an exercise) against a depth-first search of the
    builds_on links, for each exercise and for a pair; by hand: swiglu's users, two of them through block alone."""
    def reaches(name, targets):
        return name in targets or any(reaches(other, targets) for other in BY_NAME[name].builds_on)
    for chosen in [[exercise.name] for exercise in EXERCISES] + [["rope", "crossentropy"]]:
        assert built_on(chosen) == [e.name for e in EXERCISES if reaches(e.name, set(chosen))], chosen
    assert built_on(["swiglu"]) == ["swiglu", "block", "decoder_block", "transformer_xl"]
    assert built_on(["crossentropy", "rope"]) == ["crossentropy", "rope", "transformer_xl", "log_probs"]


def test_an_exercise_given_no_week_is_in_none_of_the_plans_weeks():
    """The catalogue's default week is no week at all (the plan refuses an exercise without one), not one of the
    course's weeks that a forgotten `week=` would silently land in."""
    assert Exercise("unplanned", ("Linear",)).week not in [week.number for week in WEEKS]


def test_no_exercise_comes_before_what_it_builds_on():
    order = [row[0] for row in gen_lists.plan_order(ROOT)]
    assert sorted(order) == sorted(BY_NAME)
    for index, name in enumerate(order):
        assert set(BY_NAME[name].builds_on) <= set(order[:index]), f"{name} is planned before what it builds on"
        assert all(BY_NAME[other].week <= BY_NAME[name].week for other in BY_NAME[name].builds_on), name
    listed = [name for name in re.findall(r"^\| `(\w+)` \| ", PAGE.read_text(encoding="utf-8"), re.M) if name in BY_NAME]
    assert listed == order, "the page lists the exercises in the plan's order"


def test_the_plan_refuses_an_exercise_planned_before_what_it_builds_on(tmp_path):
    copy_for_the_lists(tmp_path)
    assert gen_lists.stale_lists(tmp_path) == []
    catalogue = tmp_path / "minitransformer" / "exercises" / "catalogue.py"
    text = catalogue.read_text(encoding="utf-8")
    catalogue.write_text(text.replace('("ScaledDotProductAttention",), ("attention",), week=3,',
                                      '("ScaledDotProductAttention",), ("attention",), week=1,'), encoding="utf-8")
    assert any("exercise attention (week 1) comes before ['softmax']" in message for message in gen_lists.stale_lists(tmp_path))
    catalogue.write_text(text, encoding="utf-8")
    readme = tmp_path / "benchmarks" / "README.md"
    measured = readme.read_text(encoding="utf-8")           # the first class's time per submission, changed
    changed = re.sub(r"(\| one process per submission \| [^|]+ \| )[\d.]+ s \|", r"\g<1>9.99 s |", measured, count=1)
    assert changed != measured
    readme.write_text(changed, encoding="utf-8")
    assert "docs/guide/course-plan.md: the course-plan list differs from the package: run python docs/gen_lists.py" \
        in gen_lists.stale_lists(tmp_path)


def test_every_notebook_has_one_week_and_every_notebook_exercise_the_week_of_its_notebook():
    numbers = [number for week in WEEKS for number in week.notebooks]
    assert sorted(numbers) == sorted(path.name[:2] for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert len(numbers) == len(set(numbers)) and [week.number for week in WEEKS] == list(range(1, 11))
    week_of = {number: week.number for week in WEEKS for number in week.notebooks}
    cells = gen_lists._notebook_cells(ROOT)
    for exercise in NOTEBOOK_EXERCISES:
        (notebook,) = [name for name, ids in cells.items() if any(i.startswith(f"{exercise.name}_") for i in ids)]
        assert exercise.week == week_of[notebook[:2]], f"{exercise.name} is in week {exercise.week}, {notebook} isn't"


def test_sizes_and_times_follow_the_rules_the_page_states():
    sizes = gen_lists.exercise_sizes(ROOT)
    # counted by hand from the reference's regions and Derivation sections
    assert sizes["relu"] == (("backward",), 1, 1, "activations")
    assert sizes["attention"] == (("backward", "forward"), 14, 5, "attention")   # 7 + 7 lines; 5 rows of its TeX display
    assert sizes["linear"] == (("backward",), 7, 4, "linear")
    assert sizes["crossentropy"][2] == 3                                   # the mean, the log, the softmax
    text = PAGE.read_text(encoding="utf-8")
    region, line, step = gen_lists.ESTIMATE["region"], gen_lists.ESTIMATE["line"], gen_lists.ESTIMATE["step"]
    assert (region, line, step) == (20, 4, 10)
    assert f"{region} minutes a region" in text and f"{line} minutes a line" in text and f"{step} minutes a derivation step" in text
    assert "| `linear` | nothing | backward | 7 | 4 | 50 min / 1 h 30 |" in text      # 20 + 28 = 48; + 40 = 88
    assert "an estimate, not a measurement" in text


def test_the_grading_cost_is_the_benchmarks_measured_figure_with_its_date():
    readme = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8").split("## Grading a class", 1)[1]
    row = next(line for line in readme.splitlines() if line.startswith("| bubblewrap | one process per submission"))
    per_submission, extrapolated = [cell.strip() for cell in row.split("|")[4:6]]
    text = PAGE.read_text(encoding="utf-8")
    assert f"| bubblewrap | {per_submission} | {extrapolated} |" in text
    assert re.search(r"Grading a class\", \d{4}-\d{2}-\d{2}", text)


@pytest.mark.parametrize("page", ["docs/index.md", "docs/guide/for-instructors.md"])
def test_the_plan_is_linked_from_the_front_page_and_the_instructors_page(page):
    assert "course-plan.md" in (ROOT / page).read_text(encoding="utf-8")
