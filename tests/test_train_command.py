"""`python -m minitransformer train`: where runs go, what it refuses (one `error:` line, exit 2, before any model
is built), a NaN run (exit 1, the checkpoint kept), --max-steps 0, and --help showing every default."""

import dataclasses
import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from test_checkpoint_safety import MALFORMED, _files, _finite_weights

import minitransformer.commands.ranks
import minitransformer.objectives.language_model
import minitransformer.training.config
import minitransformer.training.harness
from minitransformer.__main__ import main
from minitransformer.commands.threads import cores_available
from minitransformer.training.checkpoint import read_checkpoint

FIXTURES = Path(__file__).parent / "fixtures"
RUN_1, RUN_2 = os.path.join("runs", "run-001"), os.path.join("runs", "run-002")     # as printed (runs\run-001 on Windows)
TINY = ["--block-size", "8", "--batch-size", "4", "--n-layers", "1", "--n-heads", "2", "--d-model", "16",
        "--d-ff", "32", "--eval-interval", "2", "--eval-batches", "1", "--no-progress", "--sample-tokens", "0"]


def cli(argv, capsys):
    """(exit status, stdout, stderr) of `python -m minitransformer <argv>` run in this process."""
    try:
        code = main(argv)
    except SystemExit as exit:                  # argparse's own errors and --help
        code = exit.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(err, *phrases):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for phrase in phrases:
        assert phrase in lines[0], (phrase, lines[0])


def refuse_models(monkeypatch):
    """Any model built from here on fails the test: the error must be found before."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was built before the error was found")
    monkeypatch.setattr(minitransformer.objectives.language_model, "build_model", refuse)
    monkeypatch.setattr(minitransformer.training.config, "build_model", refuse)


@pytest.fixture()
def no_model(monkeypatch):
    refuse_models(monkeypatch)


def train(text_file, *options, steps=2):
    return ["train", "--text", str(text_file), "--max-steps", str(steps), *TINY, *options]


# ---------------------------------------------------------------- never lose a run
def test_an_out_holding_a_checkpoint_is_refused_before_a_model_is_built(tmp_path, text_file, capsys, monkeypatch):
    out = tmp_path / "run"
    assert cli(train(text_file, "--out", str(out)), capsys)[0] == 0
    before = _files(out)
    refuse_models(monkeypatch)
    code, _, err = cli(train(text_file, "--out", str(out), "--seed", "5"), capsys)
    assert code == 2
    assert_one_error_line(err, f"--out {out} already holds a checkpoint", "--resume", "--force")
    assert _files(out) == before


def test_force_replaces_the_checkpoint_and_nothing_else(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    assert cli(train(text_file, "--out", str(out)), capsys)[0] == 0
    old_arrays = read_checkpoint(out)[0]["arrays_file"]
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    (out / "checkpoint-best.npz").write_bytes(b"my best weights")
    assert cli(train(text_file, "--out", str(out), "--seed", "5", "--force"), capsys)[0] == 0
    assert read_checkpoint(out)[0]["train_config"]["seed"] == 5
    assert not (out / old_arrays).exists()
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine" and (out / "checkpoint-best.npz").read_bytes() == b"my best weights"
    code, _, err = cli(train(text_file, "--out", str(out), "--force", "--resume"), capsys)
    assert code == 2 and "not allowed with argument" in err
    assert_one_error_line(err)


def test_without_out_every_run_gets_a_new_directory_and_latest_names_the_newest(tmp_path, text_file, capsys,
                                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli(train(text_file), capsys)[0] == 0                # the README's main command, twice
    first = _files(tmp_path / "runs" / "run-001")
    code, out, _ = cli(train(text_file, "--seed", "5"), capsys)
    assert code == 0 and f"checkpoint: {RUN_2}" in out
    assert _files(tmp_path / "runs" / "run-001") == first      # the first run untouched
    latest = tmp_path / "runs" / "latest"
    if latest.is_symlink():                                     # where the OS allows symlinks
        assert os.readlink(latest) == "run-002"
    assert read_checkpoint(latest)[0]["train_config"]["seed"] == 5
    code, out, _ = cli(train(text_file, "--resume", steps=4), capsys)   # --resume alone: the newest run
    assert code == 0 and f"resuming at step 2 ({RUN_2})" in out
    assert read_checkpoint(tmp_path / "runs" / "run-002")[0]["step"] == 4
    assert _files(tmp_path / "runs" / "run-001") == first


def test_a_real_runs_latest_directory_from_0_2_is_kept(tmp_path, text_file, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(FIXTURES / "checkpoint_0_2", tmp_path / "runs" / "latest")
    kept = _files(tmp_path / "runs" / "latest")
    code, out, err = cli(train(text_file), capsys)
    assert code == 0 and f"checkpoint: {RUN_1}" in out
    assert f"{os.path.join('runs', 'latest')} is a directory" in err and "left as it is" in err
    assert not (tmp_path / "runs" / "latest").is_symlink() and _files(tmp_path / "runs" / "latest") == kept
    code, out, _ = cli(train(text_file, "--resume", steps=4), capsys)   # the newest run is the numbered one
    assert code == 0 and f"({RUN_1})" in out


def test_resume_of_a_malformed_checkpoint_is_one_error_line(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    assert cli(train(text_file, "--out", str(out)), capsys)[0] == 0
    saved = _files(out)
    for case in ("a list at the top", "step a string", "train_config missing", "history.loss a dict",
                 "arrays file missing", "NaN weights"):
        for name in os.listdir(out):
            os.remove(out / name)
        for name, data in saved.items():
            (out / name).write_bytes(data)
        MALFORMED[case][0](out)
        code, _, err = cli(train(text_file, "--out", str(out), "--resume", steps=4), capsys)
        assert code == 2, case
        assert_one_error_line(err, "checkpoint")


# ---------------------------------------------------------------- a run that diverges
def test_a_nan_run_exits_1_naming_the_step_and_keeps_the_last_checkpoint(tmp_path, text_file, capsys, monkeypatch):
    out = tmp_path / "run"
    snapshots = []
    save = minitransformer.training.harness.save_checkpoint

    def save_and_remember(directory, *args):
        save(directory, *args)
        snapshots.append({name: data for name, data in _files(Path(directory)).items() if name != "loss.png"})
    monkeypatch.setattr(minitransformer.training.harness, "save_checkpoint", save_and_remember)
    code, _, err = cli(train(text_file, "--out", str(out), "--lr", "1e6", "--eval-interval", "1", steps=50), capsys)
    assert code == 1
    assert_one_error_line(err, "training diverged at step", "nan")     # the step's loss, or the evaluation after it
    step = int(err.split("at step ")[1].split(":")[0])
    assert snapshots and read_checkpoint(out)[0]["step"] == step - 1
    checkpoint = {name: data for name, data in _files(out).items() if name != "loss.png"}   # redrawn after a save
    assert checkpoint == snapshots[-1]                          # the last good checkpoint, byte for byte
    assert _finite_weights(out)


# ---------------------------------------------------------------- user errors: one line, exit 2, no model
def _write(name, data):
    def make(tmp_path):
        path = tmp_path / name
        path.write_bytes(data)
        return ["--text", str(path)]
    return make


def _options(*options):
    return lambda tmp_path: list(options)


def _a_directory(tmp_path):
    return ["--text", str(tmp_path)]


def _out_is_a_file(tmp_path):
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    return ["--out", str(tmp_path / "a-file")]


USER_ERRORS = {
    "text missing": (_options("--text", "/nonexistent/text.txt"), "--text /nonexistent/text.txt: no such file"),
    "text a directory": (_a_directory, "is a directory, expected a UTF-8 text file"),
    "text binary": (_write("binary.bin", b"\x00\x01\x02" * 100), "looks binary"),
    "text not UTF-8": (_write("latin1.txt", "café ".encode("latin-1") * 100), "is not UTF-8 text: byte 0xe9"),
    "text empty": (_write("empty.txt", b""), "is empty"),
    "text too short": (_write("short.txt", b"abcdefg"), "fewer than one window of --block-size + 1 = 9 tokens"),
    "validation too short": (_write("short.txt", b"abcdefghij" * 7), "validation (last 10 %) part has 7"),
    "validation a token short": (_write("short.txt", b"abcdefghij" * 8),          # 72 / 8 tokens: a window is 8 + 1
                                 "validation (last 10 %) part has 8, fewer than one window of --block-size + 1 = 9"),
    "worker timeout 0": (_options("--worker-timeout", "0"), "error: --worker-timeout: expected a finite number > 0, got '0'"),
    "block size 0": (_options("--block-size", "0"), "error: --block-size: expected a positive whole number, got 0"),
    "batch size 0": (_options("--batch-size", "0"), "error: --batch-size"),
    "eval interval 0": (_options("--eval-interval", "0"), "error: --eval-interval"),
    "eval batches 0": (_options("--eval-batches", "0"), "error: --eval-batches"),
    "layers 0": (_options("--n-layers", "0"), "error: --n-layers"),
    "d_model negative": (_options("--d-model", "-16"), "error: --d-model"),
    "d_ff not a number": (_options("--d-ff", "wide"), "error: --d-ff: expected a positive whole number, got 'wide'"),
    "style unknown": (_options("--style", "mistral"), "error: --style: invalid choice: 'mistral' (choose from 'gpt2', "
                      "'llama')"),
    "max steps negative": (_options("--max-steps", "-1"), "error: --max-steps: expected a whole number >= 0"),
    "sample tokens negative": (_options("--sample-tokens", "-3"), "error: --sample-tokens"),
    "temperature nan": (_options("--temperature", "nan"), "error: --temperature: expected a finite number >= 0"),
    "temperature negative": (_options("--temperature", "-1"), "error: --temperature"),
    "top-k 0": (_options("--top-k", "0"), "error: --top-k"),
    "lr nan": (_options("--lr", "nan"), "error: --lr"),
    "lr negative": (_options("--lr", "-0.1"), "error: --lr"),
    "grad clip inf": (_options("--grad-clip", "inf"), "error: --grad-clip"),
    "dropout 1": (_options("--dropout", "1"), "error: --dropout: expected a probability 0 <= p < 1"),
    "seed negative": (_options("--seed", "-1"), "error: --seed"),
    "workers 0": (_options("--workers", "0"), "error: --workers"),
    "workers above the batch": (_options("--workers", "5"), "--workers 5 must be at most the batch size 4"),
    "threads per rank 0": (_options("--threads-per-rank", "0"), "error: --threads-per-rank: expected a positive whole"),
    "threads per rank not a number": (_options("--threads-per-rank", "two"), "error: --threads-per-rank"),
    "threads per rank above the cores": (_options("--threads-per-rank", str(cores_available() + 1)),
                                         f"--threads-per-rank {cores_available() + 1} is more than the "
                                         f"{cores_available()} cores"),
    "heads do not divide": (_options("--n-heads", "3"), "--d-model 16 must be divisible by --n-heads 3"),
    "vocab size 0": (_options("--tokenizer", "bpe", "--vocab-size", "0"), "error: --vocab-size"),
    "out a file": (_out_is_a_file, "is a file, expected a directory"),
    "prompt not in the vocabulary": (_options("--sample-tokens", "5", "--prompt", "ß"), "--prompt 'ß' cannot be encoded"),
    "prompt empty": (_options("--sample-tokens", "5", "--prompt", ""), "--prompt is empty"),
    "resume without a checkpoint": (lambda tmp_path: ["--resume", "--out", str(tmp_path)], "no checkpoint at"),
    "resume with no run at all": (_options("--resume"), "--resume: no run to continue"),
    "resume and force": (_options("--resume", "--force"), "not allowed with argument"),
}


@pytest.mark.parametrize("case", list(USER_ERRORS))
def test_a_user_error_is_one_line_exit_2_before_any_model(case, tmp_path, text_file, capsys, monkeypatch, no_model):
    monkeypatch.chdir(tmp_path)                                 # no runs/ here
    make, message = USER_ERRORS[case]
    extra = make(tmp_path)
    argv = train(text_file, *extra)
    code, out, err = cli(argv, capsys)
    assert code == 2, (out, err)
    assert_one_error_line(err, message)
    assert not (tmp_path / "runs").exists()                     # nothing made


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0,
                    reason="chmod 0 does not stop root, nor anyone on Windows (only its read-only flag)")
def test_an_unreadable_text_is_one_error_line(tmp_path, text_file, capsys, no_model):
    text_file.chmod(0)
    try:
        code, _, err = cli(train(text_file), capsys)
    finally:
        text_file.chmod(0o644)
    assert code == 2
    assert_one_error_line(err, "cannot be read")


def test_max_steps_0_evaluates_and_samples_without_training_or_saving(tmp_path, text_file, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = [option for option in TINY if option != "--sample-tokens"]
    options.remove("0")
    code, out, err = cli(["train", "--text", str(text_file), "--max-steps", "0", *options, "--sample-tokens", "5",
                          "--prompt", "the"], capsys)
    assert code == 0, err
    assert "untrained: val loss" in out and "sample before training" in out
    assert "nothing trained, nothing saved" in out and "nothing to do" not in out
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- --help shows every default
def _help_entries(command, capsys):
    """{option: its help paragraph, whitespace collapsed} of `python -m minitransformer <command> --help`."""
    code, out, _ = cli([command, "--help"], capsys)
    assert code == 0
    entries, current = {}, None
    for line in out.splitlines():
        stripped = line.strip()
        if line.startswith("  -"):                              # an option (its help continues indented deeper)
            current = stripped.split()[0].rstrip(",")
            entries[current] = stripped
        elif current and line.startswith("    ") and stripped:
            entries[current] += " " + stripped
        else:
            current = None
    return {option: " ".join(text.split()) for option, text in entries.items()}


FLAGS = {"-h", "--no-progress", "--resume", "--force"}


@pytest.mark.parametrize("command, expected", [
    ("train", {"--lr": "(default: 0.001)", "--eval-interval": "(default: 250)", "--out": "runs/run-NNN",
               "--temperature": "(default: 0.8)", "--max-steps": "(default: 2000)", "--block-size": "(default: 64)",
               "--top-k": "(default: all tokens)", "--warmup-steps": "(default: 100)"}),
    ("sample", {"--max-new-tokens": "(default: 300)", "--temperature": "(default: 0.8)", "--top-k": "all tokens",
                "--checkpoint": "runs/latest", "--seed": "(default: 0)", "--num-samples": "(default: 1)"}),
])
def test_help_shows_every_default(command, expected, capsys):
    entries = _help_entries(command, capsys)
    for option, text in expected.items():
        assert text in entries[option], (option, entries[option])
    for option, text in entries.items():
        if option not in FLAGS:
            assert "default" in text, f"{command} --help: {option} shows no default: {text!r}"



def test_without_symlinks_the_newest_run_is_the_highest_number(tmp_path, text_file, capsys, monkeypatch):
    """Where the OS refuses symlinks (Windows without the privilege) there is no runs/latest, and --resume and
    sample take the highest-numbered run."""
    def no_symlinks(*args, **kwargs):
        raise OSError("symbolic links are not allowed here")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "symlink", no_symlinks)
    for _ in range(2):
        assert cli(train(text_file), capsys)[0] == 0
    assert sorted(os.listdir(tmp_path / "runs")) == ["run-001", "run-002"]
    code, out, _ = cli(train(text_file, "--resume", steps=4), capsys)
    assert code == 0 and f"({RUN_2})" in out
    assert cli(["sample", "--max-new-tokens", "3", "--prompt", "the"], capsys)[0] == 0


EVERY_HELP = [["train"], ["sample"], ["bpe"], ["gradcheck"], ["seq2seq"], ["mlm"], ["finetune"],
              ["exercises", "make"], ["exercises", "check"], ["exercises", "grade"], ["exercises", "gradescope-bundle"]]


@pytest.mark.parametrize("argv", EVERY_HELP, ids=" ".join)
def test_every_commands_help_shows_the_default_of_every_option_that_takes_a_value(argv, capsys):
    code, out, _ = cli([*argv, "--help"], capsys)
    assert code == 0
    entries, current = {}, None
    for line in out.splitlines():
        if line.startswith("  -"):
            current = line.split()[0].rstrip(",")
            entries[current] = line.strip()
        elif current and line.startswith("    ") and line.strip():
            entries[current] += " " + line.strip()
        else:
            current = None
    assert entries, out
    for option, text in entries.items():
        words = text.split()
        takes_a_value = len(words) > 1 and (words[1].isupper() or words[1][0] in "{[")
        if takes_a_value and option != "-h":
            assert "(default" in text or "(required)" in text, \
                f"{' '.join(argv)} --help: {option} shows no default: {' '.join(words)!r}"


def test_train_prints_perplexity_beside_the_validation_loss(tmp_path, text_file, capsys):
    """Untrained, at each evaluation, and at the end: perplexity = exp(loss), printed next to it."""
    import math
    import re

    code, out, err = cli(train(text_file, "--out", str(tmp_path / "run")), capsys)
    assert code == 0, err
    untrained = re.search(r"untrained: val loss ([\d.]+), perplexity ([\d.]+) .*perplexity V = (\d+)", out)
    final = re.search(r"trained to step 2 .*: val loss ([\d.]+), perplexity ([\d.]+)", out)
    assert untrained and final, out
    for match in (untrained, final):
        assert float(match[2]) == pytest.approx(math.exp(float(match[1])), abs=0.006)
    assert float(untrained[2]) == pytest.approx(int(untrained[3]), rel=0.2)     # untrained is about uniform
    history = read_checkpoint(tmp_path / "run")[0]["history"]
    assert [row[0] for row in history["perplexity"]] == [0, 2]                 # the untrained evaluation too


def test_style_llama_trains_the_llama_decoder_and_the_checkpoint_records_it(tmp_path, text_file, capsys):
    """--style llama: RMSNorm, SwiGLU, rotary positions and no biases in every block, in the trained model the
    checkpoint holds, and the style in its train_config and options (what `sample` and --resume rebuild)."""
    from minitransformer.layers.rmsnorm import RMSNorm
    from minitransformer.layers.swiglu import SwiGLU
    from minitransformer.training.checkpoint import load_checkpoint
    from minitransformer.training.config import TrainConfig, build_model
    from minitransformer.variants.rope import RotaryEmbedding

    code, out, err = cli(train(text_file, "--style", "llama", "--out", str(tmp_path / "run")), capsys)
    assert code == 0, err
    assert "llama style, d_ff 32" in out
    meta = json.loads((tmp_path / "run" / "checkpoint.json").read_text(encoding="utf-8"))
    assert meta["train_config"]["style"] == "llama" and meta["run"]["options"]["style"] == "llama"
    assert {key: meta["model_config"][key] for key in ("positional", "norm_layer", "activation", "bias")} == \
        dict(positional="rope", norm_layer="rmsnorm", activation="swiglu", bias=False)     # the trained model's
    model = build_model(TrainConfig(**meta["train_config"]), meta["model_config"]["vocab_size"])
    load_checkpoint(tmp_path / "run", model)                    # the trained weights fit the Llama-style model
    assert model.position is None and isinstance(model.ln_f, RMSNorm)
    for block in model.blocks:
        assert isinstance(block.ln1, RMSNorm) and isinstance(block.ln2, RMSNorm) and isinstance(block.ff, SwiGLU)
        assert isinstance(block.attn.position, RotaryEmbedding)
    names = [name for name, _ in model.named_parameters()]
    assert names and not [name for name in names if name.split(".")[-1].startswith("b")], names   # no biases
    with np.load(tmp_path / "run" / meta["arrays_file"]) as arrays:          # the trained model's own parameters
        assert sorted(name for name in arrays.files if name.startswith("param.")) == sorted("param." + name
                                                                                            for name in names)


def test_style_gpt2_the_default_builds_gpt2s_decoder():
    """--style gpt2 (TrainConfig's default): learned positions, LayerNorm, GELU and biases in every linear map of
    the blocks (Radford et al. 2019), the model `train` built before it had styles."""
    from minitransformer.layers.activations import GELU
    from minitransformer.layers.feedforward import FeedForward
    from minitransformer.layers.layernorm import LayerNorm
    from minitransformer.layers.positional import LearnedPositionalEmbedding
    from minitransformer.training.config import TrainConfig, build_model

    config = TrainConfig(block_size=8, n_layers=1, n_heads=2, d_model=16, d_ff=32)
    model = build_model(config, 11)
    assert config.style == "gpt2" and model.config["norm"] == "pre"
    assert isinstance(model.position, LearnedPositionalEmbedding) and isinstance(model.ln_f, LayerNorm)
    block = model.blocks[0]
    assert isinstance(block.ln1, LayerNorm) and isinstance(block.ln2, LayerNorm) and block.attn.position is None
    assert isinstance(block.ff, FeedForward) and isinstance(block.ff.act, GELU)
    names = {name for name, _ in model.named_parameters()}
    assert {"blocks.0.attn.b_q", "blocks.0.attn.b_o", "blocks.0.ff.fc1.bias", "blocks.0.ff.fc2.bias"} <= names


def _model_line(out):
    """(style, d_ff, parameters) from the `model:` line train prints."""
    line = next(line for line in out.splitlines() if line.startswith("model: "))
    style, width, parameters = re.search(r", (\w+) style, d_ff (\d+), ([\d,]+) parameters", line).groups()
    return style, int(width), int(parameters.replace(",", ""))


def test_style_llama_without_d_ff_matches_the_gpt2_models_parameter_count(text_file, capsys):
    """Without --d-ff, --style llama takes the SwiGLU width whose model comes closest to the parameter count of
    the gpt2 model of the same options (whose d_ff is TrainConfig's 512): no width closer exists."""
    from minitransformer.tokenizers.char import CharTokenizer
    from minitransformer.training.config import TrainConfig, build_model

    options = [option for option in TINY if option not in ("--d-ff", "32")]
    counts = {}
    for style in ("gpt2", "llama"):
        code, out, err = cli(["train", "--text", str(text_file), "--max-steps", "0", *options, "--style", style],
                             capsys)
        assert code == 0, err
        counts[style] = _model_line(out)
    assert counts["gpt2"][:2] == ("gpt2", TrainConfig.d_ff)
    style, width, parameters = counts["llama"]
    config = TrainConfig(block_size=8, n_layers=1, n_heads=2, d_model=16, style="llama")
    vocab_size = CharTokenizer.train(text_file.read_text(encoding="utf-8")).vocab_size
    neighbours = [build_model(dataclasses.replace(config, d_ff=d_ff), vocab_size).num_parameters()
                  for d_ff in (width - 1, width + 1)]
    assert style == "llama" and width != TrainConfig.d_ff
    assert all(abs(parameters - counts["gpt2"][2]) <= abs(n - counts["gpt2"][2]) for n in neighbours)
    assert abs(parameters - counts["gpt2"][2]) <= 3 * 16 // 2                 # half of a hidden unit's 3 C


@pytest.mark.parametrize("positional", ["learned", "rope"])
@pytest.mark.parametrize("norm_layer", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("d_ff", [0, 24])
def test_the_parameter_count_computed_from_a_config_is_the_built_models(positional, norm_layer, activation, bias, d_ff,
                                                                        monkeypatch):
    """training.config.parameter_count (which `train --style llama` matches widths with, building nothing)
    against `build_model(...).num_parameters()`, for every kind of part a style can choose."""
    import minitransformer.training.config as config_module

    style = dict(positional=positional, norm_layer=norm_layer, activation=activation, bias=bias)
    monkeypatch.setitem(config_module.STYLES, "test", style)
    config = config_module.TrainConfig(block_size=7, n_layers=2, n_heads=2, d_model=8, d_ff=d_ff, style="test",
                                       kernels="plain")
    assert config_module.parameter_count(config, 13) == config_module.build_model(config, 13).num_parameters()


def test_every_option_of_the_config_reaches_the_checkpoints_train_config(tmp_path, text_file, capsys):
    """Each option given (none at its default) is the value the run stores, by hand; a --warmup-steps as long as the
    run is a short run's, a tenth of it (20 // 10 = 2), and the rate decays over the run's own steps."""
    out = tmp_path / "run"
    code, _, err = cli(train(text_file, "--out", str(out), "--lr", "0.002", "--min-lr", "0.0002", "--grad-clip", "0.5",
                             "--dropout", "0.2", "--kernels", "plain", "--worker-timeout", "30", "--dtype", "float64",
                             "--weight-decay", "0.05", "--seed", "7", "--parallel", "sharded", "--schedule", "constant",
                             "--warmup-steps", "20", "--eval-interval", "20", steps=20), capsys)
    assert code == 0, err
    stored = read_checkpoint(out)[0]["train_config"]
    expected = {"block_size": 8, "batch_size": 4, "n_layers": 1, "n_heads": 2, "d_model": 16, "d_ff": 32,
                "dropout": 0.2, "dtype": "float64", "style": "gpt2", "max_steps": 20, "lr": 0.002, "min_lr": 0.0002,
                "warmup_steps": 2, "lr_decay_steps": 20, "schedule": "constant", "weight_decay": 0.05,
                "grad_clip": 0.5, "eval_interval": 20, "eval_batches": 1, "seed": 7, "workers": 1,
                "parallel": "sharded", "kernels": "plain", "worker_timeout": 30.0}
    assert {name: stored[name] for name in expected} == expected


# nanoGPT's README, its CPU run of the Shakespeare-char model: --block_size=64 --batch_size=12 --n_layer=4
# --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 --eval_iters=20; its sample.py
# starts from "\n" at temperature 0.8
NANOGPT_CPU = {"block_size": 64, "batch_size": 12, "n_layers": 4, "n_heads": 4, "d_model": 128, "max_steps": 2000,
               "dropout": 0.0, "eval_batches": 20, "prompt": "\n", "temperature": 0.8}


def test_trains_defaults_are_nanogpts_cpu_run_and_its_samples_those_the_help_states():
    """Defaults that --help states in words, not as the value, are held here: the prompt "a newline", top-k "all
    tokens"; and the command's own: characters as tokens, 512 BPE tokens when asked for, 300 tokens per sample."""
    from minitransformer.__main__ import build_parser

    args = build_parser()[0].parse_args(["train"])
    assert {name: getattr(args, name) for name in NANOGPT_CPU} == NANOGPT_CPU
    assert (args.top_k, args.d_ff, args.text, args.threads_per_rank) == (None, None, None, None)
    assert (args.tokenizer, args.vocab_size, args.sample_tokens) == ("char", 512, 300)


def test_a_text_whose_validation_part_is_exactly_one_window_trains(tmp_path, capsys):
    """90 characters: 81 training and 9 validation tokens, one window of --block-size 8 + 1 (one fewer: refused,
    test_a_user_error_is_one_line_exit_2_before_any_model)."""
    text = tmp_path / "text.txt"
    text.write_bytes(b"abcdefghij" * 9)
    code, out, err = cli(["train", "--text", str(text), "--max-steps", "1", *TINY, "--out", str(tmp_path / "run")],
                         capsys)
    assert code == 0, err
    assert "90 characters -> 90 tokens" in out and "81 train / 9 validation" in out, out
    assert "(uniform guessing would be ln V = 2.3026, perplexity V = 10)" in out, out       # ln 10, 10 letters


def test_as_many_workers_as_windows_in_a_batch_is_allowed_and_one_more_refused():
    from minitransformer.commands.errors import UsageError
    from minitransformer.commands.train import _check_workers

    _check_workers(4, 4)                                        # a window each
    with pytest.raises(UsageError, match="--workers 5 must be at most the batch size 4"):
        _check_workers(5, 4)


def test_workers_above_1_alone_run_the_command_under_mpiexec(tmp_path, text_file, capsys, monkeypatch):
    """One process, --workers 2: the command starts again under `mpiexec -n 2` (stood in for here); the default
    --workers 1 trains in this process."""
    launched = []

    def launch(workers, argv, environment):
        launched.append(workers)
        raise SystemExit(0)
    monkeypatch.setattr(minitransformer.commands.ranks, "launch", launch)
    assert cli(train(text_file, "--workers", "2", "--max-steps", "0"), capsys)[0] == 0 and launched == [2]
    code, out, err = cli(train(text_file, "--max-steps", "0"), capsys)
    assert code == 0 and launched == [2] and "nothing trained" in out, err


# ---------------------------------------------------------------- what rank 0 alone does, on fakes of a rank
def _a_plan(tmp_path, **changes):
    """train's plan of a fresh run of the tiny trainer's config and text (commands/train.py's `_plan`)."""
    import types

    from test_checkpoint import TEXT, tiny_trainer

    from minitransformer.tokenizers import CharTokenizer

    trainer = tiny_trainer()
    plan = types.SimpleNamespace(notes=[], config=trainer.config, tokenizer=CharTokenizer.train(TEXT), source="a test",
                                 text=TEXT, text_path=None, ids=[], train_data=trainer.train_data,
                                 val_data=trainer.val_data, out=None, saves=True, contents=None)
    for name, value in changes.items():
        setattr(plan, name, value)
    return plan


def test_rank_0_alone_makes_the_run_directory_and_hands_its_trainer_a_place_to_save(tmp_path, monkeypatch):
    import types

    from minitransformer.commands.train import _build, _make_directory

    monkeypatch.chdir(tmp_path)
    plan = _a_plan(tmp_path)
    _make_directory(plan, 1)
    assert plan.out is None and plan.created is False and not (tmp_path / "runs").exists()
    _make_directory(plan, 0)
    assert plan.out == os.path.join("runs", "run-001") and plan.created is True and os.path.isdir(plan.out)
    args = types.SimpleNamespace(threads_per_rank=None, no_progress=True, force=False)
    for rank, out_dir in ((1, None), (0, plan.out)):
        trainer = _build(args, plan, types.SimpleNamespace(comm=None, rank=rank, size=2))
        assert trainer.options.out_dir == out_dir, rank


def test_rank_0_evaluates_the_untrained_model_also_for_a_trainer_that_keeps_its_evaluations_to_itself(tmp_path,
                                                                                                         capsys):
    """Trainer shares its evaluations with the ranks; a trainer that does not is still evaluated, on rank 0."""
    import types

    from test_checkpoint import tiny_trainer

    from minitransformer.commands.train import _introduce

    trainer = tiny_trainer()
    trainer.shares_evaluation = False
    _introduce(types.SimpleNamespace(sample_tokens=0), _a_plan(tmp_path), trainer,
               types.SimpleNamespace(rank=0, size=1))
    assert "untrained: val loss" in capsys.readouterr().out and trainer.history["eval"][0][0] == 0
