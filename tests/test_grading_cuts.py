"""Smaller cuts an instructor met: the score table's unassigned parts, the self-check's "1 case", the copy's install
bringing pytest, and `--isolation`'s help saying what the grade's first line says.
"""

import configparser
import sys

import pytest
from _grading_answers import REFERENCE, make_once

from minitransformer.commands.exercises import add_arguments
from minitransformer.exercises.check import CaseCheck, ExerciseCheck, describe
from minitransformer.exercises.grade import ExerciseGrade, score_table
from minitransformer.exercises.isolation import LINUX_ONLY, BubblewrapIsolation, Limits, ProcessIsolation


def test_a_part_that_was_not_assigned_reads_not_assigned_never_as_a_pass():
    grades = [ExerciseGrade("relu", ["ReLU"], ["relu.backward"], forward_ok=True, backward_error=0.5, max_points=1),
              ExerciseGrade("gelu", ["GELU"], ["gelu.forward"], forward_ok=False, max_points=1),
              ExerciseGrade("linear", ["Linear"], ["linear.backward", "linear.forward"], forward_ok=True,
                            backward_error=1e-9, points=2, max_points=2)]
    rows = {line.split()[0]: line for line in score_table(grades).splitlines()[1:4]}
    assert rows["relu"].split()[2:4] == ["not", "assigned"] and "5.0e-01" in rows["relu"]
    assert rows["gelu"].split()[2:] == ["no", "not", "assigned", "0/1"]
    assert rows["linear"].split()[2:] == ["yes", "1.0e-09", "2/2"]


def test_one_case_is_one_case():
    one = ExerciseCheck("relu", [CaseCheck("ReLU[x]", "ok", "ok", 0.0, 0.0)])
    assert describe(one).startswith("relu (ReLU), 1 case: PASSED")
    two = ExerciseCheck("relu", [CaseCheck("ReLU[x]", "ok", "ok", 0.0, 0.0)] * 2)
    assert describe(two).startswith("relu (ReLU), 2 cases: PASSED")


def test_the_copys_install_brings_pytest_for_its_self_check(tmp_path_factory):
    copy = make_once(tmp_path_factory, ["relu"])
    setup = configparser.ConfigParser()
    setup.read(copy / "setup.cfg")
    assert "pytest>=7" in setup["options"]["install_requires"].split()
    reference = configparser.ConfigParser()
    reference.read(REFERENCE.parent / "setup.cfg")
    assert "pytest" not in reference["options"]["install_requires"]          # the reference's install is lean
    assert "`pip install -e .` (pytest, for the self-check, comes with it)" in (copy / "README.md").read_text(encoding="utf-8")


@pytest.mark.skipif(sys.platform != "linux", reason=LINUX_ONLY)
def test_the_isolation_option_says_what_each_level_prints():
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    grade = parser._subparsers._group_actions[0].choices["grade"]
    help_text = " ".join(next(a.help for a in grade._actions if "--isolation" in a.option_strings).split())
    limits = Limits()
    for level in (ProcessIsolation(reference=REFERENCE), BubblewrapIsolation("/usr/bin/bwrap", REFERENCE)):
        assert f"{level.name} ({level.SUMMARY}" in help_text
        assert level.SUMMARY in level.describe(limits)
