"""Exercise mode for instructors: student copies with blanked solution regions, and an autograder.

    regions.py    the `### BEGIN SOLUTION <name>` / `### END SOLUTION` markers: find, blank, replace
    catalogue.py  the exercises, the layers each is graded on, and which layers use which exercise
    make.py       `exercises make`: the student copy (package, tests, manifest, self-check outputs)
    leaks.py      every other place that shows an assigned answer (tests, text, notebooks), blanked in the copy
    check.py      `exercises check` and the `pytest -m NAME` markers: a student's self-check
    assignment.py the instructor's assignment: graded regions, points, the inputs' seed, the reference's hashes
    grade.py      `exercises grade`: one contained process per exercise, the verdict computed outside it
    verdict.py    the reference's numbers, the student's arrays read as untrusted, the comparison
    isolation.py  bubblewrap, or a process group with limits: what the student's process can see and use
    runner.py     what runs inside that process (the only trusted code there)
    gradescope.py Gradescope's results.json, and the autograder zip

The command line is commands/exercises.py.
"""
