"""Benchmark: grading a class with `exercises grade --class`, and where the time goes.

    python benchmarks/bench_grading.py [--students 60] [--jobs 2] [--levels bubblewrap process]
                                       [--exercises linear,relu,gelu,softmax,layernorm,embedding,attention,multihead,crossentropy]
                                       [--no-compare]

Makes a student copy with the exercises assigned, then a class of --students submissions cycling through five
kinds: right (the reference's bodies), a wrong forward, a wrong backward (each a classic mistake), missing (the
copy as made) and hostile (forks a sleeper, then asks for 3 GB of memory). Grades the class with -j --jobs under each
isolation level, from scratch: one contained process per submission, which imports NumPy and the package once and
forks a child per exercise (the grader's layout), and, unless --no-compare, one contained process per exercise (the
layout before it, still used by bubblewrap without root), in the same run, so that the two compare as a ratio on a
loaded machine. Prints seconds in all and per submission, and the extrapolation to 200 students. Then where one
submission's time goes: starting the contained Python with NumPy, compiling and importing the package in it (once
per submission), one exercise's child (fork, compile its files, import the package anew, run its cases), the
grader's copy of the reference and its hash checks, and the reference's numbers (central differences of the
reference forward in float64, computed once per worker process). Wall-clock times on a shared machine: the load
average is printed with them.
"""

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from _grading_answers import REFERENCE, REGIONS, indented, put_bodies, reference_body, wrong_body  # noqa: E402
from _machine import load_average  # noqa: E402

from minitransformer.exercises.assignment import new_assignment, read_assignment, verify_reference, write_assignment  # noqa: E402,E501
from minitransformer.exercises.catalogue import exercise_named  # noqa: E402
from minitransformer.exercises.classroom import grade_class as grade_folder  # noqa: E402
from minitransformer.exercises.grade import HARNESS, _exercise_files, reference_cases  # noqa: E402
from minitransformer.exercises.isolation import ENVIRONMENT, Limits, choose_isolation, new_workdir, open_for_student  # noqa: E402,E501
from minitransformer.exercises.make import _copy_package, make_student_copy  # noqa: E402

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


def grade_class(folder, assignment, jobs, isolation):
    """Seconds to grade the class from scratch under `isolation`, its output silenced."""
    grades = folder.with_name(f"{folder.name}.grades-{isolation.name}-{isolation.batched}")
    shutil.rmtree(grades, ignore_errors=True)
    assigned = read_assignment(assignment)
    started = time.perf_counter()
    rows = grade_folder(folder, assigned, REGIONS, jobs, grades, (Limits(), isolation, REFERENCE), say=lambda *_: None)
    seconds = time.perf_counter() - started
    assert all(not row.get("error") for row in rows), [row["error"] for row in rows if row.get("error")]
    check_scores(rows, sum(assigned.points.values()))
    return seconds


def check_scores(rows, possible):
    """A fast grading that grades wrongly is no figure: the right answers score every point, the missing none, the
    wrong forward or backward fewer than all (the kind is the end of the student's folder name)."""
    for row in rows:
        points, kind = sum(g["points"] for g in row["grades"]), row["student"].split("-", 1)[1].replace("-", " ")
        wrong = {"right": points != possible, "missing": points != 0,
                 "wrong forward": points >= possible, "wrong backward": points >= possible}.get(kind, False)
        if wrong:
            raise SystemExit(f"error: {row['student']} scored {points:g} of {possible:g}: the grading is wrong")


# Run in the contained Python: the parent's work (NumPy, the package compiled and imported) and one child's per
# exercise (fork, its files compiled, the package imported anew, its cases run); prints the seconds as JSON.
PARTS = """
import json, os, sys, time
started = time.perf_counter()
sys.path[:0] = [{root!r}, *{site!r}]
import numpy
numpy_done = time.perf_counter()
sys.path.insert(0, {harness!r})
from runner import CompiledPackage, run_cases
package = CompiledPackage({package!r})
sys.meta_path.insert(0, package)
import minitransformer.gradcheck.cases
package_done = time.perf_counter()
task = json.load(open({task!r}))
children = []
for exercise, files in enumerate(json.load(open({files!r}))):
    begun = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        inputs = dict(numpy.load({inputs!r}))
        mine = {{name.split("/", 1)[1]: value for name, value in inputs.items() if name.startswith(f"{{exercise}}/")}}
        package.replace(files)
        run_cases(task["exercises"][exercise]["cases"], mine, package.package.resolve())
        os._exit(0)
    os.waitpid(pid, 0)
    children.append(time.perf_counter() - begun)
print(json.dumps([numpy_done - started, package_done - numpy_done, sum(children) / len(children)]))
"""


def parts(isolation, exercises, repeats=5):
    """Median seconds of: the contained Python importing NumPy; compiling and importing the package; one exercise's
    child (the mean over `exercises`); the grader's copy of the reference and its two hash checks; the reference's
    numbers for all `exercises` (central differences, once per worker)."""
    assignment = new_assignment(sorted(name for name in REGIONS if name.split(".")[0] in exercises), REFERENCE, 1)
    workdir = new_workdir(isolation, "bench-")
    try:
        started = time.perf_counter()
        _copy_package(REFERENCE, workdir / "pkg" / "minitransformer", sorted(assignment.points), REGIONS)
        for _ in range(2):
            verify_reference(REFERENCE, assignment)
        grader = time.perf_counter() - started
        numbers = time.perf_counter()
        reference_cases.cache_clear()
        cases = [reference_cases(tuple(exercise_named(name).layers), 1, 1e-7) for name in exercises]
        numbers = time.perf_counter() - numbers
        for script in HARNESS:
            shutil.copy2(script, workdir / "harness" / script.name)
        right = {name: reference_body(name) for name in assignment.points}          # a child that runs its cases
        files = [_exercise_files(REFERENCE, REGIONS, sorted(assignment.points), right) for _ in exercises]
        (workdir / "task" / "files.json").write_text(json.dumps(files), encoding="utf-8")
        _task(workdir, cases)
        if isolation.user:
            open_for_student(workdir)
        paths = isolation.paths(workdir)
        task = Path(paths["task"])
        code = PARTS.format(root=paths["package_root"], site=paths["site"], harness=str(Path(paths["runner"]).parent),
                            package=f"{paths['package_root']}/minitransformer", task=str(task / "task.json"),
                            files=str(task / "files.json"), inputs=str(task / "inputs.npz"))
        runs = []
        for _ in range(repeats):
            done = subprocess.run(isolation.command(workdir, "-c", code), cwd=workdir / "cwd", env=ENVIRONMENT,
                                  check=True, capture_output=True, text=True, encoding="utf-8")
            runs.append(json.loads(done.stdout.splitlines()[-1]))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    median = [sorted(run[i] for run in runs)[len(runs) // 2] for i in range(3)]
    return median, grader, numbers


def _task(workdir, cases):
    """task.json and inputs.npz as the grader writes them (`grade._write_task`'s layout) for these cases."""
    arrays, exercises = {}, []
    for index, mine in enumerate(cases):
        for case in mine:
            arrays.update({f"{index}/{case.key}.input{i}": value for i, value in enumerate(case.inputs)})
            arrays.update({f"{index}/{case.key}.param{j}": value for j, value in enumerate(case.params)})
            arrays[f"{index}/{case.key}.upstream"] = case.upstream
        exercises.append({"cases": [{"key": case.key, "index": case.index, "id": case.id, "inputs": len(case.inputs),
                                     "rng": case.rng} for case in mine]})
    np.savez(workdir / "task" / "inputs.npz", **arrays)
    (workdir / "task" / "task.json").write_text(json.dumps({"exercises": exercises}), encoding="utf-8")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=60)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--levels", nargs="+", default=["bubblewrap", "process"])
    parser.add_argument("--exercises", default="linear,relu,gelu,softmax,layernorm,embedding,attention,multihead,"
                                                "crossentropy")
    parser.add_argument("--no-compare", action="store_true", help="leave out one contained process per exercise")
    args = parser.parse_args(argv)
    exercises = args.exercises.split(",")
    print(f"load average before: {load_average():.1f} (1 min), {os.cpu_count()} cores; "
          f"{args.students} submissions, {len(exercises)} exercises each, -j {args.jobs}")
    with tempfile.TemporaryDirectory() as scratch:
        folder, assignment = make_class(Path(scratch), exercises, args.students)
        for level in args.levels:
            isolation = choose_isolation(level, REFERENCE)
            layouts = [("one process per submission", True)] + [("one process per exercise", False)] * (not args.no_compare)
            seconds = {}
            for layout, batched in layouts:
                isolation = copy.copy(isolation)
                isolation.batched = batched and (isolation.fresh or level == "process")
                seconds[batched] = grade_class(folder, assignment, args.jobs, isolation)
                print(f"{level:>10}, {layout}: {seconds[batched]:6.1f} s in all, {seconds[batched] / args.students:5.2f} "
                      f"s per submission; 200 students: {seconds[batched] / args.students * 200:5.0f} s "
                      f"(load {load_average():.1f})")
            if len(seconds) == 2:
                print(f"{level:>10}: one process per exercise takes {seconds[False] / seconds[True]:.2f} times as long")
    for level in args.levels:
        (start, package, child), grader, numbers = parts(choose_isolation(level, REFERENCE), exercises)
        print(f"{level:>10}, where one submission's time goes: starting Python and importing NumPy {start:.2f} s, "
              f"compiling and importing the package {package:.2f} s (once each); one exercise's child {child:.2f} s "
              f"(x {len(exercises)}); the grader's copy of the reference and hash checks {grader:.2f} s; the reference's "
              f"numbers for the {len(exercises)} exercises {numbers:.2f} s (once per worker)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
