"""`python -m minitransformer exercises make|grade`: student copies with blanked regions, and their grader."""

import json
import sys

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
    grade = actions.add_parser("grade", help="grade a student copy; exit code 1 below full marks")
    grade.add_argument("directory", help="the student copy (the directory holding minitransformer/)")
    grade.add_argument("--only", default=None, help="comma-separated exercises to grade, or all "
                                                    "(default: those in the copy's exercises.json, else all)")
    grade.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON to FILE")
    grade.add_argument("--timeout", type=float, default=60.0, help="seconds allowed per exercise")
    grade.add_argument("--seed", type=int, default=0, help="seed of the test inputs")


def _names(text):
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()]


def run(args):
    if args.action == "make":
        from ..exercises.make import make_student_copy

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
        for notebook in manifest["notebooks"]:
            print(f"  notebooks/{notebook['notebook']}: {notebook['exercise_cells']} exercise cells cleared")
        if args.notebooks is not None and not manifest["notebooks"]:
            print("  no notebooks found")
        print("  every layer not listed above works as in the reference")
        return 0

    from ..exercises.grade import grade_copy, grades_json, score_table, version_warning

    try:
        warning = version_warning(args.directory)
        if warning:
            print(warning, file=sys.stderr)
        grades = grade_copy(args.directory, only=_names(args.only), timeout=args.timeout, seed=args.seed)
    except (KeyError, FileNotFoundError, ValueError, RuntimeError) as error:
        print(f"exercises grade: {error.args[0]}")
        return 2
    print(score_table(grades))
    result = grades_json(grades)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return 0 if result["full_marks"] else 1
