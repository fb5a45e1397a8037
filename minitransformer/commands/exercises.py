"""`python -m minitransformer exercises make|check|grade|gradescope-bundle`: the command line of `exercises/`.
Every mistake (an unknown exercise, a missing assignment, an existing output file) is one `error: exercises
<action>: ...` line and exit status 2 (`commands.errors.UsageError`)."""

import functools
import json
import os
import sys
from pathlib import Path

from ..exercises import grade as grading
from ..exercises.assignment import check_writable, default_path, new_assignment, read_assignment, write_assignment
from ..exercises.catalogue import EXERCISES, NOTEBOOK_EXERCISES
from ..exercises.check import run_check
from ..exercises.classroom import class_paths, grade_class, summary, write_gradebook
from ..exercises.gradescope import build_bundle, failed_results, gradescope_results, write_results
from ..exercises.isolation import LINUX_ONLY, BubblewrapIsolation, Limits, ProcessIsolation, choose_isolation
from ..exercises.make import make_student_copy, reference_package
from .errors import UsageError, check_output_file
from .threads import cores_available

HELP = "for instructors: write a student copy with chosen backward/forward passes blanked, grade one or a class"
# a user's mistake, as the exercise machinery raises it (AssignmentError, ReferenceChanged, FileExistsError among them)
_MISTAKES = (KeyError, OSError, ValueError, RuntimeError)


def add_arguments(parser):
    actions = parser.add_subparsers(dest="action", metavar="action", required=True)
    # the actions' own --help shows defaults too (argparse does not pass the formatter down on its own)
    add_action = functools.partial(actions.add_parser, formatter_class=parser.formatter_class)
    make = add_action("make", help="write a student copy of the package, tests and notebooks")
    make.add_argument("out", help="new directory for the student copy")
    make.add_argument("--only", help="comma-separated exercises or regions (layernorm.backward) to blank, of: "
                                     f"{', '.join(exercise.name for exercise in EXERCISES)}; with --notebooks: "
                                     f"{', '.join(exercise.name for exercise in NOTEBOOK_EXERCISES)} (default: all)")
    make.add_argument("--notebooks", nargs="?", const="", metavar="DIR", help="also write student notebooks, "
                      "solution cells cleared, from DIR (default: the reference's notebooks/)")
    make.add_argument("--derive", action="store_true", help="ask for the derivations too: leave out the mathematics "
                      "of each assigned backward pass (its docstrings' Derivation sections, those of the exercises "
                      "that restate it, and, with --notebooks, the cells that derive it), keeping the shapes and "
                      "the task (default: the docstrings keep the derivative)")
    make.add_argument("--assignment", metavar="FILE", help="where to write the instructor's assignment, out of "
                      "the copy (default: <out>.assignment.json beside it)")
    make.add_argument("--force", action="store_true", help="replace an existing assignment file")
    check = add_action("check", help="for students: check your exercises in this copy (exit code 1 until right)")
    check.add_argument("names", nargs="?", metavar="NAMES", help="comma-separated exercises, or all "
                       "(default: those assigned in this copy's exercises.json)")
    grade = add_action("grade", help="grade a student copy by the instructor's assignment; exit code 1 below full marks")
    grade.add_argument("directory", help="the student copy (holding minitransformer/); with --class, a folder per student")
    grade.add_argument("--class", dest="whole_class", action="store_true", help="grade every sub-folder of DIRECTORY "
                       "in parallel, resumably (run it again to finish), into a gradebook CSV in Canvas's layout")
    grade.add_argument("-j", "--jobs", type=int, default=cores_available(), metavar="N",
                       help="with --class: students graded at a time (the cores this process may use)")
    grade.add_argument("--gradebook", metavar="FILE", help="with --class: the gradebook CSV, replaced (default: "
                       "<DIRECTORY>.gradebook.csv beside it; each student's grade kept in <FILE stem>.grades/)")
    grade.add_argument("--assignment", metavar="FILE", help="the assignment exercises make wrote "
                       "(default: <directory>.assignment.json beside the copy)")
    grade.add_argument("--only", help="comma-separated exercises of the assignment to grade (default: all)")
    grade.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    grade.add_argument("--gradescope", metavar="FILE", help="also write Gradescope's results.json to FILE (replaced)")
    grade.add_argument("--timeout", type=float, default=Limits.timeout, help="seconds allowed per exercise")
    grade.add_argument("--memory", type=int, default=Limits.memory_mb, metavar="MB", help="the student's address space")
    grade.add_argument("--isolation", default="auto", choices=("auto", "bubblewrap", "process"), help=f"bubblewrap "
                       f"({BubblewrapIsolation.SUMMARY}), process ({ProcessIsolation.SUMMARY}; the answer can read what "
                       f"its user can), or auto: bubblewrap where it works")
    bundle = add_action("gradescope-bundle", help="write the Gradescope autograder zip that grades by an assignment")
    bundle.add_argument("--assignment", required=True, metavar="FILE", help="the assignment exercises make wrote")
    bundle.add_argument("--out", default="autograder.zip", metavar="ZIP", help="the zip to write")
    bundle.add_argument("--force", action="store_true", help="replace an existing zip")


def _names(text):
    """The names in the comma-separated `text` (None stays None; a text naming none is one unknown name)."""
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()] or [text]


def run(args):
    """Run `exercises <action>`; a mistake the exercise machinery raises becomes one UsageError line."""
    actions = {"make": run_make, "check": lambda args: run_check(_names(args.names)), "grade": run_grade,
               "gradescope-bundle": run_bundle}
    try:
        return actions[args.action](args)
    except _MISTAKES as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error     # OSError: with its file
        raise UsageError(f"exercises {args.action}: {message}") from None


def run_make(args):
    path = Path(args.assignment or default_path(args.out))
    if path.resolve().is_relative_to(Path(args.out).resolve()):
        raise UsageError(f"exercises make: --assignment {path} is inside the student copy {args.out}; keep the "
                         f"assignment on the instructor's side (e.g. the default, {default_path(args.out)})")
    check_writable(path, args.force)                    # before the copy is written
    if args.notebooks and not os.path.isdir(args.notebooks):
        raise UsageError(f"exercises make --notebooks {args.notebooks}: no such directory (give the folder "
                         "holding the reference notebooks, or --notebooks alone for the package's own)")
    manifest = make_student_copy(args.out, only=_names(args.only), notebooks=args.notebooks is not None,
                                 notebooks_dir=args.notebooks or None, derive=args.derive)
    print(f"wrote the student copy to {args.out}\n  exercises: {', '.join(manifest['exercises'] + manifest['notebook_exercises'])}\n"
          f"  blanked regions: {', '.join(manifest['regions'])}")
    derive = manifest.get("derive") or {}
    if args.derive:
        print(f"  derivations left out: {', '.join(derive['exercises'])} (the docstrings of {', '.join(derive['files'])})"
              if derive["exercises"] else "  --derive: no backward pass is assigned, so no derivation is left out")
    for layer, needs in manifest["unavailable_layers"].items():
        print(f"  {layer} raises NotImplementedError until you write {' and '.join(needs)}")
    for entry in manifest["left_out"]:
        print(f"  left out: {entry['path']}: {entry['what']} ({entry['exercises']})")
    for notebook in manifest["notebooks"]:
        print(f"  notebooks/{notebook['notebook']}: {notebook['exercise_cells']} exercise cells cleared")
    if args.notebooks is not None and not manifest["notebooks"]:
        print("  no notebooks found")
    assignment = new_assignment(manifest["regions"], reference_package(), derive=args.derive)
    write_assignment(path, assignment, force=args.force)
    print(f"wrote the instructor's assignment to {path} (not in the copy; grade with "
          f"`exercises grade COPY --assignment {path}`)")
    return 0


def _checked_assignment(path):
    """The assignment at `path`, read and checked against the reference."""
    assignment = read_assignment(path)
    grading.checked_reference(reference_package(), assignment, f"the assignment {path}")
    return assignment


def run_grade(args):
    if sys.platform != "linux":                         # before anything is read or written: one line, where to grade
        system = {"darwin": "macOS", "win32": "Windows"}.get(sys.platform, sys.platform)
        raise UsageError(f"exercises grade on {system}: {LINUX_ONLY}")
    limits = Limits(timeout=args.timeout, memory_mb=args.memory)
    if args.whole_class:
        return run_grade_class(args, limits)
    if args.gradebook:
        raise UsageError("exercises grade: --gradebook is for a class (--class)")
    if args.json:
        check_output_file(args.json, "--json")          # before grading: never replaced, never a late traceback
    if args.gradescope:
        check_output_file(args.gradescope, "--gradescope", force=True)
    assignment = _checked_assignment(args.assignment or default_path(args.directory))
    grading.select_exercises(assignment, _names(args.only))
    isolation = choose_isolation(args.isolation, reference_package())
    header = isolation.describe(limits)
    print(header)
    for note in grading.copy_notes(args.directory, assignment):
        print(note, file=sys.stderr)
    try:
        grades = grading.grade_copy(args.directory, assignment, only=_names(args.only), limits=limits,
                                    isolation=isolation, reference=reference_package())
    except FileNotFoundError as error:
        if args.gradescope:                             # nothing to grade: a zero, said why
            write_results(args.gradescope, failed_results(assignment, str(error), header))
        raise
    print(grading.score_table(grades))
    result = grading.grades_json(grades, assignment.tolerance, header)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    if args.gradescope:
        write_results(args.gradescope, gradescope_results(grades, header))
    return 0 if result["full_marks"] else 1


def run_grade_class(args, limits):
    if args.json or args.gradescope:                    # one copy's outputs
        raise UsageError("exercises grade --class: --json and --gradescope are for one copy; a class's go to --gradebook")
    if args.jobs < 1:
        raise UsageError(f"exercises grade: -j expected a whole number >= 1, got {args.jobs}")
    gradebook, grades_dir = class_paths(args.directory, args.gradebook)
    check_output_file(gradebook, "--gradebook", force=True)
    assignment = _checked_assignment(args.assignment or default_path(args.directory))
    isolation = choose_isolation(args.isolation, reference_package())
    print(isolation.describe(limits))
    regions = grading.checked_reference(reference_package(), assignment)
    try:
        rows = grade_class(args.directory, assignment, regions, args.jobs, grades_dir,
                           (limits, isolation, reference_package()))
    except KeyboardInterrupt:
        print(f"interrupted: the grades done are kept in {grades_dir}; run the same command again to finish",
              file=sys.stderr)
        return 130
    write_gradebook(gradebook, rows, assignment)
    print(f"\n{summary(rows, assignment)}\n\nwrote the gradebook {gradebook} ({len(rows)} students)")
    return 0


def run_bundle(args):
    _checked_assignment(args.assignment)
    check_output_file(args.out, "--out", force=args.force)
    names = build_bundle(args.assignment, args.out, reference_package())
    print(f"wrote the Gradescope autograder to {args.out}: {', '.join(names)}")
    print("  upload it as the assignment's autograder (Gradescope: Configure Autograder, zip file upload); students "
          "hand in their copy (the folder holding minitransformer/)")
    return 0
