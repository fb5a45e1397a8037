"""Benchmark: grading a class with `exercises grade --class`, and where the time goes.

    python benchmarks/bench_grading.py [--students 60] [--jobs 2] [--levels bubblewrap process]
                                       [--exercises linear,relu,gelu,softmax,layernorm,embedding,attention,multihead,crossentropy]

Makes a student copy with the exercises assigned, then a class of --students submissions cycling through five
kinds: right (the reference's bodies), a wrong forward, a wrong backward (each a classic mistake), missing (the
copy as made) and hostile (forks a sleeper, then asks for 3 GB of memory). Grades the class with -j --jobs under each
isolation level, from scratch, and prints seconds in all and per submission, and the extrapolation to 200 students.
Then the parts of one exercise's grading, timed alone: starting the contained Python with NumPy, importing the
package inside it, copying the reference into the temporary package, and the reference's numbers (central
differences of the reference forward in float64, computed once per worker process). Wall-clock times on a shared
machine: the load average is printed with them.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from _grading_answers import REFERENCE, REGIONS, indented, put_bodies, reference_body, wrong_body  # noqa: E402

from minitransformer.__main__ import main as cli  # noqa: E402
from minitransformer.exercises.assignment import new_assignment, write_assignment  # noqa: E402
from minitransformer.exercises.catalogue import exercise_named  # noqa: E402
from minitransformer.exercises.grade import _build_package, reference_cases  # noqa: E402
from minitransformer.exercises.isolation import ENVIRONMENT, choose_isolation, new_workdir  # noqa: E402
from minitransformer.exercises.make import make_student_copy  # noqa: E402

KINDS = ("right", "wrong forward", "wrong backward", "missing", "hostile")
HOSTILE = ("import os, time", "if os.fork() == 0:", "    os.setsid()", "    time.sleep(600)",
           "hog = bytearray(3 * 2**30)")


def answers(kind, regions):
    """Region bodies of one kind of submission."""
    if kind == "missing":
        return {}
    if kind == "hostile":
        return {name: indented(name, *HOSTILE) for name in regions}
    wrong = {"wrong forward": ".forward", "wrong backward": ".backward"}.get(kind)
    bodies = {}
    for name in regions:
        try:
            bodies[name] = wrong_body(name) if wrong and name.endswith(wrong) else reference_body(name)
        except KeyError:                                   # no known mistake for this region: the reference's
            bodies[name] = reference_body(name)
    return bodies


def make_class(root, exercises, students):
    """The copy, the assignment and the class folder; returns (class folder, assignment path)."""
    copy = root / "copy"
    manifest = make_student_copy(copy, only=exercises)
    assignment = root / "assignment.json"
    write_assignment(assignment, new_assignment(manifest["regions"], REFERENCE, seed=2718))
    for index in range(students):
        kind = KINDS[index % len(KINDS)]
        student = root / "class" / f"student{index:03d}-{kind.replace(' ', '-')}"
        shutil.copytree(copy, student)
        put_bodies(student, answers(kind, manifest["regions"]))
    return root / "class", assignment


def grade_class(folder, assignment, jobs, level):
    """Seconds to grade the class from scratch under `level`, its output silenced."""
    shutil.rmtree(folder.with_name(f"{folder.name}.gradebook.grades"), ignore_errors=True)
    started = time.perf_counter()
    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet
        try:
            status = cli(["exercises", "grade", str(folder), "--class", "--assignment", str(assignment),
                          "-j", str(jobs), "--isolation", level])
        finally:
            sys.stdout = stdout
    assert status == 0, f"grading under {level} ended with exit status {status}"
    return time.perf_counter() - started


def parts(level, exercise, repeats=5):
    """Median seconds of: a contained Python importing NumPy; the same importing the package; copying the
    reference into a temporary package; the reference's numbers for `exercise` (finite differences)."""
    isolation = choose_isolation(level, REFERENCE)
    workdir = new_workdir(isolation, "bench-")
    try:
        started = time.perf_counter()
        _build_package(workdir / "pkg" / "minitransformer", REFERENCE, {}, REGIONS)
        copying = time.perf_counter() - started
        if isolation.user:
            from minitransformer.exercises.isolation import open_for_student
            open_for_student(workdir)
        paths = isolation.paths(workdir)
        site = f"import sys; sys.path[:0] = [{paths['package_root']!r}, *{paths['site']!r}]; import numpy"
        timings = {}
        for what, code in (("start Python + import NumPy", site), ("+ import the package", site + "; import minitransformer")):
            runs = []
            for _ in range(repeats):
                started = time.perf_counter()
                subprocess.run(isolation.command(workdir, "-c", code), cwd=workdir / "cwd", env=ENVIRONMENT,
                               check=True, capture_output=True)
                runs.append(time.perf_counter() - started)
            timings[what] = sorted(runs)[len(runs) // 2]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    started = time.perf_counter()
    reference_cases(tuple(exercise_named(exercise).layers), 1, 1e-7)
    return timings, copying, time.perf_counter() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=60)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--levels", nargs="+", default=["bubblewrap", "process"])
    parser.add_argument("--exercises", default="linear,relu,gelu,softmax,layernorm,embedding,attention,multihead,"
                                                "crossentropy")
    args = parser.parse_args(argv)
    exercises = args.exercises.split(",")
    print(f"load average before: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} cores; "
          f"{args.students} submissions, {len(exercises)} exercises each, -j {args.jobs}")
    with tempfile.TemporaryDirectory() as scratch:
        folder, assignment = make_class(Path(scratch), exercises, args.students)
        for level in args.levels:
            seconds = grade_class(folder, assignment, args.jobs, level)
            print(f"{level:>10}: {seconds:6.1f} s in all, {seconds / args.students:5.2f} s per submission, "
                  f"{seconds / args.students / len(exercises) * args.jobs:5.2f} s per exercise per core; "
                  f"200 students: {seconds / args.students * 200:5.0f} s (load {os.getloadavg()[0]:.1f})")
    for level in args.levels:
        timings, copying, numbers = parts(level, exercises[-1])
        print(f"{level:>10}, one exercise's parts: " + ", ".join(f"{what} {t:.2f} s" for what, t in timings.items())
              + f"; copying the reference {copying:.2f} s; the reference's numbers for {exercises[-1]} "
              f"{numbers:.2f} s (once per worker)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
