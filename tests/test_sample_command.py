"""`python -m minitransformer sample`: bad options and malformed checkpoints are one `error:` line with exit
status 2 (options before any model is built); without --checkpoint it samples the newest run."""

import shutil
from pathlib import Path

import pytest
from test_checkpoint_safety import MALFORMED
from test_train_command import TINY, assert_one_error_line, cli, refuse_models

FIXTURES = Path(__file__).parent / "fixtures"
GREEDY = ["--prompt", "it was the ", "--max-new-tokens", "10", "--temperature", "0"]


@pytest.fixture()
def checkpoint(tmp_path):
    """A copy of the checkpoint 0.2 wrote (tests/fixtures/checkpoint_0_2), which must still load."""
    target = tmp_path / "checkpoint"
    shutil.copytree(FIXTURES / "checkpoint_0_2", target)
    return target


@pytest.fixture()
def no_model(monkeypatch):
    refuse_models(monkeypatch)


OPTION_ERRORS = {
    "max-new-tokens negative": (["--max-new-tokens", "-3"], "error: --max-new-tokens: expected a whole number >= 0"),
    "temperature nan": (["--temperature", "nan"], "error: --temperature: expected a finite number >= 0, got 'nan'"),
    "temperature inf": (["--temperature", "inf"], "error: --temperature"),
    "temperature negative": (["--temperature", "-0.5"], "error: --temperature"),
    "top-k 0": (["--top-k", "0"], "error: --top-k: expected a positive whole number, got 0"),
    "top-k negative": (["--top-k", "-2"], "error: --top-k"),
    "num-samples 0": (["--num-samples", "0"], "error: --num-samples"),
    "seed negative": (["--seed", "-1"], "error: --seed"),
    "prompt not in the vocabulary": (["--prompt", "xyz"], "--prompt 'xyz' cannot be encoded"),
    "prompt empty": (["--prompt", ""], "--prompt is empty"),
}


@pytest.mark.parametrize("case", list(OPTION_ERRORS))
def test_a_bad_option_is_one_line_exit_2_before_any_model(case, checkpoint, capsys, no_model):
    options, message = OPTION_ERRORS[case]
    code, out, err = cli(["sample", "--checkpoint", str(checkpoint), *options], capsys)
    assert code == 2 and not out
    assert_one_error_line(err, message)


@pytest.mark.parametrize("case", [case for case in MALFORMED                          # sample loads no optimizer
                                  if case not in ("wrong optimizer shape", "optimizer null")])
def test_a_malformed_checkpoint_is_one_line_exit_2(case, checkpoint, capsys):
    MALFORMED[case][0](checkpoint)
    code, out, err = cli(["sample", "--checkpoint", str(checkpoint), *GREEDY], capsys)
    assert code == 2 and not out
    assert_one_error_line(err, "checkpoint")


def test_a_missing_checkpoint_and_no_runs_are_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(["sample", "--checkpoint", str(tmp_path / "nowhere")], capsys)
    assert code == 2
    assert_one_error_line(err, "no checkpoint at")
    code, _, err = cli(["sample"], capsys)
    assert code == 2
    assert_one_error_line(err, "no --checkpoint given and no run under runs/")


def test_without_checkpoint_it_samples_the_newest_run(checkpoint, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expected = cli(["sample", "--checkpoint", str(checkpoint), *GREEDY], capsys)
    assert expected[0] == 0
    shutil.copytree(checkpoint, tmp_path / "runs" / "latest")              # 0.2's runs/latest, a real directory
    assert cli(["sample", *GREEDY], capsys) == expected
    shutil.move(tmp_path / "runs" / "latest", tmp_path / "runs" / "run-007")  # a numbered run, no link
    assert cli(["sample", *GREEDY], capsys) == expected
    (tmp_path / "runs" / "run-003").mkdir()                                  # an older run
    assert cli(["sample", *GREEDY], capsys) == expected


def test_a_checkpoint_asking_for_a_model_larger_than_memory_is_one_line_exit_2(checkpoint, capsys):
    from test_checkpoint_safety import _set

    _set("train_config.d_model", 10**9)(checkpoint)         # 4 heads divide it; the table would need ~400 GB
    code, out, err = cli(["sample", "--checkpoint", str(checkpoint), *GREEDY], capsys)
    assert code == 2 and not out
    assert_one_error_line(err, "too large for this machine's memory")


def test_it_samples_a_llama_style_run_as_train_did(tmp_path, text_file, capsys):
    """`sample` rebuilds the Llama-style model from the checkpoint's train_config and continues a prompt
    greedily exactly as `train` did with the model it had just trained."""
    prompt, tokens = "the lazy", 12                   # the prompt fills the window of --block-size 8
    code, out, err = cli(["train", "--text", str(text_file), "--max-steps", "4", *TINY[:-2], "--style", "llama",
                          "--sample-tokens", str(tokens), "--prompt", prompt, "--temperature", "0",
                          "--out", str(tmp_path / "run")], capsys)
    assert code == 0, err
    trained = out.split("--- sample after training ---\n")[1].split("\n---")[0]
    code, out, err = cli(["sample", "--checkpoint", str(tmp_path / "run"), "--prompt", prompt,
                          "--max-new-tokens", str(tokens), "--temperature", "0"], capsys)
    assert code == 0, err
    assert out == trained + "\n" and out.startswith(prompt) and len(out) == len(prompt) + tokens + 1
