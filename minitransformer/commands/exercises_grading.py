"""The instructor's side of `python -m minitransformer exercises`: the assignment `make` writes, `grade`,
and `gradescope-bundle` (the grader itself: `minitransformer/exercises/`). `commands/exercises.py` wires
these into the command line.

Every mistake (a missing assignment, a timeout that is not a positive number, an existing output
file) is one `error: exercises grade: ...` line and exit status 2 (`commands.errors.UsageError`).
"""

import json
import sys
from pathlib import Path

from ..exercises.assignment import (
    AssignmentError,
    ReferenceChanged,
    check_writable,
    default_path,
    new_assignment,
    read_assignment,
    verify_reference,
    write_assignment,
)
from ..exercises.isolation import Limits, choose_isolation
from ..exercises.make import check_is_reference, reference_package
from ..exercises.regions import package_regions
from ..exercises.verdict import ReferenceBroken
from .errors import UsageError, check_output_file

_GRADING_ERRORS = (KeyError, FileNotFoundError, ValueError, RuntimeError, AssignmentError, ReferenceChanged,
                   ReferenceBroken)


def _names(text):
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()]


# ---------------------------------------------------------------- make: the assignment beside the copy

def add_make_arguments(make):
    make.add_argument("--assignment", default=None, metavar="FILE",
                      help="where to write the instructor's assignment (exercises, points, the inputs' seed, the "
                           "reference's hashes), kept out of the copy (default: <out>.assignment.json beside it)")
    make.add_argument("--force", action="store_true", help="replace an existing assignment file")


def assignment_path_for(args):
    """The assignment path of `exercises make`, checked before the copy is written (UsageError if unusable)."""
    path = Path(args.assignment) if args.assignment else default_path(args.out)
    out = Path(args.out).resolve()
    if path.resolve() == out or out in path.resolve().parents:
        raise UsageError(f"exercises make: --assignment {path} is inside the student copy {args.out}; keep the "
                         f"assignment on the instructor's side (e.g. the default, {default_path(args.out)})")
    try:
        check_writable(path, args.force)
    except FileExistsError as error:
        raise UsageError(f"exercises make: {error}") from None
    return path


def write_assignment_for(path, manifest, force):
    """Write the assignment of the copy `exercises make` just wrote (one point per blanked region)."""
    assignment = new_assignment(manifest["regions"], reference_package())
    write_assignment(path, assignment, force=force)
    print(f"wrote the instructor's assignment to {path} (not in the copy; grade with "
          f"`exercises grade COPY --assignment {path}`)")


# ---------------------------------------------------------------- grade

def add_grade_arguments(grade):
    grade.add_argument("directory", help="the student copy (the directory holding minitransformer/)")
    grade.add_argument("--assignment", default=None, metavar="FILE",
                       help="the instructor's assignment written by exercises make "
                            "(default: <directory>.assignment.json beside the copy)")
    grade.add_argument("--only", default=None, help="comma-separated exercises of the assignment to grade (default: all)")
    grade.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON to FILE")
    grade.add_argument("--gradescope", default=None, metavar="FILE",
                       help="also write Gradescope's results.json to FILE (replaced if it exists)")
    grade.add_argument("--timeout", type=float, default=Limits.timeout, help="seconds allowed per exercise")
    grade.add_argument("--memory", type=int, default=Limits.memory_mb, metavar="MB",
                       help="address space the student's process may use, in MB")
    grade.add_argument("--isolation", default="auto", choices=("auto", "bubblewrap", "process"),
                       help="bubblewrap (Linux namespaces), process (process group and limits only), or auto: "
                            "bubblewrap where it works")
    grade.add_argument("--seed", type=int, default=None,
                       help="draw the inputs from this seed instead of the assignment's (a regrade should not)")


def run_grade(args):
    from ..exercises.grade import grade_copy, grades_json, manifest_note, score_table, select_exercises, version_warning
    from ..exercises.gradescope import failed_results, gradescope_results, write_results

    try:
        limits = Limits(timeout=args.timeout, memory_mb=args.memory)
        if args.json:
            check_output_file(args.json, "--json")          # before grading: never replaced, never a late traceback
        if args.gradescope and not Path(args.gradescope).parent.is_dir():
            raise FileNotFoundError(f"--gradescope {args.gradescope}: the directory "
                                    f"{Path(args.gradescope).parent} does not exist")
        reference = reference_package()
        assignment_file = Path(args.assignment) if args.assignment else default_path(args.directory)
        if not args.assignment and not assignment_file.is_file():
            raise AssignmentError(f"no assignment: pass --assignment FILE (exercises make wrote it beside the copy, "
                                  f"as <copy>.assignment.json; looked for {assignment_file})")
        assignment = read_assignment(assignment_file)
        verify_reference(reference, assignment)            # before anything is read from the reference
        regions = package_regions(reference)
        check_is_reference(regions)
        assignment.check_regions(regions, f"the assignment {assignment_file}")
        select_exercises(assignment, _names(args.only))
        isolation = choose_isolation(args.isolation, reference)
    except _GRADING_ERRORS as error:
        raise UsageError(f"exercises grade: {error.args[0] if error.args else error}") from None
    header = isolation.describe(limits)
    print(header)
    for warning in (version_warning(args.directory), manifest_note(args.directory, assignment)):
        if warning:
            print(warning, file=sys.stderr)
    try:
        grades = grade_copy(args.directory, assignment, only=_names(args.only), limits=limits, isolation=isolation,
                            seed=args.seed)
    except FileNotFoundError as error:                  # nothing to grade in the submission: a zero, said why
        if args.gradescope:
            write_results(args.gradescope, failed_results(assignment, str(error), header))
        raise UsageError(f"exercises grade: {error}") from None
    except _GRADING_ERRORS as error:
        raise UsageError(f"exercises grade: {error.args[0] if error.args else error}") from None
    print(score_table(grades))
    result = grades_json(grades, assignment.tolerance, header)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    if args.gradescope:
        write_results(args.gradescope, gradescope_results(grades, header))
    return 0 if result["full_marks"] else 1


# ---------------------------------------------------------------- gradescope-bundle

def add_bundle_arguments(bundle):
    bundle.add_argument("--assignment", required=True, metavar="FILE", help="the assignment written by exercises make")
    bundle.add_argument("--out", default="autograder.zip", metavar="ZIP", help="the zip to write (default autograder.zip)")
    bundle.add_argument("--force", action="store_true", help="replace an existing zip")


def run_bundle(args):
    from ..exercises.gradescope import build_bundle

    try:
        reference = reference_package()
        assignment = read_assignment(args.assignment)
        verify_reference(reference, assignment)            # the bundle's package is the one the assignment hashed
        regions = package_regions(reference)
        check_is_reference(regions)
        assignment.check_regions(regions, f"the assignment {args.assignment}")
        check_output_file(args.out, "--out", force=args.force)
        names = build_bundle(args.assignment, args.out, reference, force=args.force)
    except _GRADING_ERRORS + (FileExistsError,) as error:
        raise UsageError(f"exercises gradescope-bundle: {error.args[0] if error.args else error}") from None
    print(f"wrote the Gradescope autograder to {args.out}: {', '.join(names)}")
    print("  upload it as the assignment's autograder (Gradescope: Configure Autograder, zip file upload); students "
          "hand in their copy (the folder holding minitransformer/)")
    return 0
