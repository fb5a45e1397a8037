"""Edges a hostile review of issue 25's cut found: each test failed on the code it was found in.

What a student's process hands back, what a copy's own exercises.json says, an assignment that cannot be written,
a form feed in a test module, a results.json behind a link, and a copy with softmax assigned but not attention.
"""

import json
import os

import pytest
from _grading_answers import REFERENCE, REGIONS

from minitransformer.__main__ import main
from minitransformer.exercises import make
from minitransformer.exercises.assignment import Assignment
from minitransformer.exercises.grade import OutputRefused, copy_notes, read_records
from minitransformer.exercises.gradescope import write_results
from minitransformer.exercises.leaks import package_secrets, strip_tests


def test_records_with_an_unhashable_key_or_deep_nesting_are_refused_and_messages_stay_on_one_line(tmp_path):
    path = tmp_path / "result.json"
    for text in ('[{"key": ["case0"]}]', "[" * 200_000 + "]" * 200_000):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(OutputRefused):
            read_records(path, {"case0"})
    path.write_text(json.dumps([{"key": "case0", "forward_error": "boom\ntotal 2/2\n", "backward_error": None}]), encoding="utf-8")
    assert read_records(path, {"case0"})["case0"]["forward_error"] == "boom total 2/2"      # no fake score lines


@pytest.mark.parametrize("manifest", ["[1]", '{"regions": 5}', "not json", '{"minitransformer": ["0.1"]}'])
def test_a_broken_exercises_json_in_the_copy_gives_no_note_and_no_crash(tmp_path, manifest):
    (tmp_path / "exercises.json").write_text(manifest, encoding="utf-8")
    notes = copy_notes(tmp_path, Assignment({"relu.backward": 1}, seed=1))
    assert all(note.startswith("warning: this copy was made by") for note in notes)


def test_an_assignment_that_cannot_be_written_is_one_error_line_naming_it(tmp_path, monkeypatch, capsys):
    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(make, "unavailable_layers", lambda *args: {})          # not under test: no tracing
    monkeypatch.setattr("minitransformer.commands.exercises.write_assignment", refuse)
    assert main(["exercises", "make", str(tmp_path / "copy"), "--only", "relu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: exercises make: ") and "Permission denied" in err[0], err
    assert "copy.assignment.json" in err[0], err


def test_a_form_feed_in_a_test_module_does_not_shift_the_lines_that_are_left_out():
    name = "layernorm.backward"
    secrets = package_secrets(REFERENCE, REGIONS, [name])
    answer = next(line for line in REGIONS[name][1].body if line.strip() in secrets[name].values())
    text = f"import numpy as np\n\x0c\n\ndef test_x():\n{answer}\n\n\ndef test_kept():\n    assert True\n"
    new, removed = strip_tests(text, secrets)
    assert removed == [("test_x", "layernorm")] and "def test_kept" in new and answer not in new


def test_results_json_replaces_a_link_there_instead_of_writing_through_it(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep", encoding="utf-8")
    os.symlink(target, tmp_path / "results.json")
    write_results(tmp_path / "results.json", {"score": 1})
    assert target.read_text(encoding="utf-8") == "keep" and not (tmp_path / "results.json").is_symlink()
    assert json.loads((tmp_path / "results.json").read_text(encoding="utf-8")) == {"score": 1}


def test_assigning_softmax_leaves_out_the_fast_attention_that_imports_it(tmp_path, monkeypatch):
    monkeypatch.setattr(make, "unavailable_layers", lambda *args: {})
    manifest = make.make_student_copy(tmp_path / "copy", only=["softmax"])
    assert not (tmp_path / "copy" / "minitransformer" / "fast" / "attention.py").exists()
    assert {"minitransformer/fast/softmax.py", "minitransformer/fast/attention.py"} <= {
        entry["path"] for entry in manifest["left_out"]}
