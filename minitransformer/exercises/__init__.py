"""Exercise mode for instructors. `exercises make` writes a student copy with chosen solution regions blanked
(`regions.py`: the markers; `make.py`: the copy; `leaks.py`: every other place an answer shows, notebooks too;
`derivations.py`: the derivations a copy made to derive leaves out);
students check their work with `exercises check` (`check.py`); `exercises grade` grades a copy by the instructor's
assignment (`assignment.py`), each exercise's answer run contained (`isolation.py`, `runner.py`) and judged outside
it (`grade.py`), also on Gradescope (`gradescope.py`). The exercises are listed in `catalogue.py`; the command line
is commands/exercises.py.
"""
