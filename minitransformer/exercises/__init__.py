"""Exercise mode for instructors: student copies with blanked solution regions, and an autograder.

    regions.py    the `### BEGIN SOLUTION <name>` / `### END SOLUTION` markers: find, blank, replace
    catalogue.py  the exercises, the layers each is graded on, and which layers use which exercise
    make.py       `exercises make`: the student copy (package, tests, manifest)
    notebook.py   student notebooks: outputs stripped, solution cells cleared
    grade.py      `exercises grade`: one subprocess per exercise, score table and JSON
    runner.py     what runs inside that subprocess
"""
