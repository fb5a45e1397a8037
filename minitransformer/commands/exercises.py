"""`python -m minitransformer exercises make|check|grade|gradescope-bundle`: student copies, their grader, Gradescope."""

import functools
import os

from . import exercises_grading as instructor
from .errors import UsageError

HELP = "for instructors: write a student copy with chosen backward/forward passes blanked, or grade one"


def add_arguments(parser):
    from ..exercises.catalogue import EXERCISES

    actions = parser.add_subparsers(dest="action", metavar="action")
    # the actions' own --help shows defaults too (argparse does not pass the formatter down on its own)
    add_action = functools.partial(actions.add_parser, formatter_class=parser.formatter_class)
    actions.required = True
    make = add_action("make", help="write a student copy of the package, tests and notebooks")
    make.add_argument("out", help="new directory for the student copy")
    make.add_argument("--only", default=None,
                      help="comma-separated exercises or regions (layernorm.backward); the exercises: "
                           f"{', '.join(exercise.name for exercise in EXERCISES)} (default: all)")
    make.add_argument("--notebooks", nargs="?", const="", default=None, metavar="DIR",
                      help="also write student notebooks (outputs stripped, solution cells cleared), "
                           "from DIR (default: notebooks/ of the reference)")
    instructor.add_make_arguments(make)                    # --assignment, --force: the instructor's assignment
    check = add_action("check", help="for students: check your exercises in this copy (exit code 1 until right)")
    check.add_argument("names", nargs="?", default=None, metavar="NAMES",
                       help="comma-separated exercises, e.g. layernorm,softmax, or all "
                            "(default: the exercises assigned in this copy's exercises.json)")
    instructor.add_grade_arguments(add_action(
        "grade", help="grade a student copy by the instructor's assignment; exit code 1 below full marks"))
    instructor.add_bundle_arguments(add_action(
        "gradescope-bundle", help="write the Gradescope autograder zip that grades submissions by an assignment"))


def _names(text):
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()]


def run(args):
    if args.action == "check":
        from ..exercises.check import run_check

        try:
            return run_check(args.names)
        except ValueError as error:                    # an unknown exercise, a copy without expected outputs
            raise UsageError(str(error)) from None
    if args.action == "make":
        from ..exercises.make import make_student_copy

        assignment = instructor.assignment_path_for(args)  # checked before anything is written
        if args.notebooks and not os.path.isdir(args.notebooks):
            raise UsageError(f"exercises make --notebooks {args.notebooks}: no such directory (give the folder "
                             "holding the reference notebooks, or --notebooks alone for the package's own)")
        try:
            manifest = make_student_copy(args.out, only=_names(args.only), notebooks=args.notebooks is not None,
                                         notebooks_dir=args.notebooks or None)
        except (KeyError, FileExistsError, RuntimeError) as error:
            raise UsageError(f"exercises make: {error.args[0]}") from None
        print(f"wrote the student copy to {args.out}")
        print(f"  exercises: {', '.join(manifest['exercises'])}")
        print(f"  blanked regions: {', '.join(manifest['regions'])}")
        for layer, needs in manifest["unavailable_layers"].items():
            names = needs[0] if len(needs) == 1 else f"{', '.join(needs[:-1])} and {needs[-1]} are"
            print(f"  {layer} raises NotImplementedError until {names}{' is' if len(needs) == 1 else ''} done")
        for layer, repeats in manifest.get("left_out_layers", {}).items():
            print(f"  {layer} is left out of the copy: its code repeats the answer to {', '.join(repeats)}")
        for entry in manifest.get("left_out", []):
            print(f"  left out: {entry['path']}: {entry['what']} ({entry['exercises']})")
        for notebook in manifest["notebooks"]:
            print(f"  notebooks/{notebook['notebook']}: {notebook['exercise_cells']} exercise cells cleared")
        if args.notebooks is not None and not manifest["notebooks"]:
            print("  no notebooks found")
        print("  every layer not listed above works as in the reference")
        instructor.write_assignment_for(assignment, manifest, args.force)
        return 0

    if args.action == "gradescope-bundle":
        return instructor.run_bundle(args)
    return instructor.run_grade(args)
