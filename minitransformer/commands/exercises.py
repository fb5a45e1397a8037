"""`python -m minitransformer exercises make|check|grade|gradescope-bundle`: student copies, their grader, Gradescope."""

from . import exercises_grading as instructor

HELP = "for instructors: write a student copy with chosen backward/forward passes blanked, or grade one"


def add_arguments(parser):
    actions = parser.add_subparsers(dest="action", metavar="action")
    actions.required = True
    make = actions.add_parser("make", help="write a student copy of the package, tests and notebooks")
    make.add_argument("out", help="new directory for the student copy")
    make.add_argument("--only", default=None,
                      help="comma-separated exercises (layernorm) or regions (layernorm.backward); default: all")
    make.add_argument("--notebooks", nargs="?", const="", default=None, metavar="DIR",
                      help="also write student notebooks (outputs stripped, solution cells cleared), "
                           "from DIR (default: notebooks/ of the reference)")
    instructor.add_make_arguments(make)                    # --assignment, --force: the instructor's assignment
    check = actions.add_parser("check", help="for students: check your exercises in this copy (exit code 1 until right)")
    check.add_argument("names", nargs="?", default=None, metavar="NAMES",
                       help="comma-separated exercises, e.g. layernorm,softmax, or all "
                            "(default: the exercises assigned in this copy's exercises.json)")
    instructor.add_grade_arguments(actions.add_parser(
        "grade", help="grade a student copy by the instructor's assignment; exit code 1 below full marks"))
    instructor.add_bundle_arguments(actions.add_parser(
        "gradescope-bundle", help="write the Gradescope autograder zip that grades submissions by an assignment"))


def _names(text):
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()]


def run(args):
    if args.action == "check":
        from ..exercises.check import run_check
        from .errors import UsageError

        try:
            return run_check(args.names)
        except ValueError as error:                    # an unknown exercise, a copy without expected outputs
            raise UsageError(str(error)) from None
    if args.action == "make":
        from ..exercises.make import make_student_copy

        assignment = instructor.assignment_path_for(args)  # checked before anything is written
        try:
            manifest = make_student_copy(args.out, only=_names(args.only), notebooks=args.notebooks is not None,
                                         notebooks_dir=args.notebooks or None)
        except (KeyError, FileExistsError, RuntimeError) as error:
            print(f"exercises make: {error.args[0]}")
            return 2
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
