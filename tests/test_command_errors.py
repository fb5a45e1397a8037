"""User errors of `bpe`, `gradcheck`, `mlm`, `seq2seq` and `finetune`: one `error: ...` line on stderr, exit status 2.

Each is found before any model is built (the model classes are replaced by ones that fail if
constructed), and nothing is printed on stdout before it. A few valid edge values run to the end
(`--steps 0` evaluates without training).
"""

import json
import subprocess
import sys

import pytest

import minitransformer.__main__ as cli
from minitransformer.tokenizers import BPETokenizer

COMMANDS = ("bpe", "gradcheck", "mlm", "seq2seq", "finetune")
TEXT = "the cat sat on the mat. the dog sat on the log. " * 20


def run(monkeypatch, capsys, *argv):
    """Run one command in this process; return (exit status, stdout, stderr)."""
    monkeypatch.setattr(cli, "COMMANDS", {name: f"minitransformer.commands.{name}" for name in COMMANDS})
    try:
        status = cli.main(list(argv))
    except SystemExit as exit_:                      # argparse's own errors
        status = exit_.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_one_error_line(status, out, err, *fragments):
    assert status == 2, (status, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert out == "", out
    for fragment in fragments:
        assert fragment in err, (fragment, err)


@pytest.fixture
def no_models(monkeypatch):
    """Building any model fails the test: errors must be found before."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was built before the user error was reported")

    import minitransformer.models.bert as bert
    import minitransformer.models.gpt as gpt
    import minitransformer.models.seq2seq as seq2seq

    for module, name in [(bert, "BertMLM"), (gpt, "GPT"), (seq2seq, "Seq2SeqTransformer")]:
        monkeypatch.setattr(module, name, refuse)


@pytest.fixture
def files(tmp_path):
    paths = {"text": tmp_path / "text.txt", "binary": tmp_path / "binary.txt", "latin1": tmp_path / "latin1.txt",
             "blank": tmp_path / "blank.txt", "short": tmp_path / "short.txt", "dir": tmp_path / "a-directory",
             "missing": tmp_path / "missing.txt"}
    paths["text"].write_text(TEXT, encoding="utf-8")
    paths["binary"].write_bytes(b"PK\x03\x04\x00\x00 zip")
    paths["latin1"].write_bytes("café au lait".encode("latin-1"))
    paths["blank"].write_text("  \n\t\n", encoding="utf-8")
    paths["short"].write_text("a tiny text", encoding="utf-8")
    paths["dir"].mkdir()
    return paths


# ---------------------------------------------------------------- text files, for every command that reads one
@pytest.mark.parametrize("command, extra", [("bpe", ["--merges", "3"]), ("mlm", ["--steps", "1"])])
@pytest.mark.parametrize("kind, fragment", [("missing", "no such file"), ("dir", "is a directory"),
                                            ("binary", "looks binary"), ("latin1", "is not UTF-8 text")])
def test_an_unusable_text_file_is_one_error_line(monkeypatch, capsys, files, no_models, command, extra, kind, fragment):
    status, out, err = run(monkeypatch, capsys, command, "--text", str(files[kind]), *extra)
    assert_one_error_line(status, out, err, "--text", str(files[kind]), fragment)


def test_bpe_text_without_words(monkeypatch, capsys, files):
    assert_one_error_line(*run(monkeypatch, capsys, "bpe", "--text", str(files["blank"]), "--merges", "3"),
                          "has no words")


def test_mlm_text_too_short_for_one_example(monkeypatch, capsys, files, no_models):
    status, out, err = run(monkeypatch, capsys, "mlm", "--text", str(files["short"]), "--chunk", "8")
    assert_one_error_line(status, out, err, "is too short for --chunk 8", "one example needs 17 (2 chunks + 1)")


# ---------------------------------------------------------------- numbers that must be positive (or >= 0)
@pytest.mark.parametrize("argv, option", [
    (["bpe", "--text", "{text}", "--merges", "0"], "--merges"),
    (["bpe", "--text", "{text}", "--merges", "-4"], "--merges"),
    (["bpe", "--text", "{text}", "--merges", "many"], "--merges"),
    (["bpe", "--text", "{text}", "--merges", "3", "--min-count", "0"], "--min-count"),
    (["gradcheck", "--tolerance", "0"], "--tolerance"),
    (["gradcheck", "--tolerance", "nan"], "--tolerance"),
    (["gradcheck", "--tolerance", "-0.5"], "--tolerance"),
    (["gradcheck", "--seed", "-1"], "--seed"),
    (["mlm", "--steps", "-1"], "--steps"),
    (["mlm", "--batch-size", "0"], "--batch-size"),
    (["mlm", "--chunk", "0"], "--chunk"),
    (["mlm", "--d-model", "0"], "--d-model"),
    (["mlm", "--layers", "0"], "--layers"),
    (["mlm", "--lr", "nan"], "--lr"),
    (["mlm", "--lr", "-0.1"], "--lr"),
    (["mlm", "--seed", "-3"], "--seed"),
    (["seq2seq", "--steps", "-1"], "--steps"),
    (["seq2seq", "--batch-size", "0"], "--batch-size"),
    (["seq2seq", "--heads", "0"], "--heads"),
    (["seq2seq", "--d-model", "0"], "--d-model"),
    (["seq2seq", "--layers", "0"], "--layers"),
    (["seq2seq", "--symbols", "0"], "--symbols"),
    (["seq2seq", "--min-len", "0"], "--min-len"),
    (["seq2seq", "--max-len", "0"], "--max-len"),
    (["seq2seq", "--test-size", "0"], "--test-size"),
    (["seq2seq", "--beam", "-1"], "--beam"),
    (["seq2seq", "--examples", "-2"], "--examples"),
    (["seq2seq", "--lr", "inf"], "--lr"),
    (["seq2seq", "--seed", "-1"], "--seed"),
    (["finetune", "--pretrain-steps", "-1"], "--pretrain-steps"),
    (["finetune", "--steps", "-5"], "--steps"),
    (["finetune", "--lm-weight", "-0.5"], "--lm-weight"),
    (["finetune", "--lm-weight", "nan"], "--lm-weight"),
    (["finetune", "--batch-size", "0"], "--batch-size"),
    (["finetune", "--lr", "-1"], "--lr"),
    (["finetune", "--length", "0"], "--length"),
    (["finetune", "--seed", "-1"], "--seed"),
], ids=lambda value: " ".join(value) if isinstance(value, list) else value)
def test_a_bad_number_is_one_error_line_naming_the_option(monkeypatch, capsys, files, no_models, argv, option):
    argv = [str(files["text"]) if value == "{text}" else value for value in argv]
    assert_one_error_line(*run(monkeypatch, capsys, *argv), option)


# ---------------------------------------------------------------- combinations
@pytest.mark.parametrize("argv, fragment", [
    (["mlm", "--d-model", "6"], "--d-model must be a multiple of 4"),
    (["seq2seq", "--d-model", "64", "--heads", "3"], "--heads must divide --d-model"),
    (["seq2seq", "--d-model", "9", "--heads", "3"], "--d-model must be even"),
    (["seq2seq", "--min-len", "5", "--max-len", "3"], "--min-len must be at most --max-len"),
    # only 1 string exists: the held-out set takes it and drawing a training string never ended
    (["seq2seq", "--symbols", "1", "--min-len", "3", "--max-len", "3", "--test-size", "1"],
     "--test-size 1 is more than half of the 1 distinct strings"),
    (["seq2seq", "--symbols", "2", "--min-len", "1", "--max-len", "3", "--test-size", "8"],
     "--test-size 8 is more than half of the 14 distinct strings"),
    (["finetune", "--length", "1"], "--length must be at least 2"),
])
def test_options_that_cannot_make_a_run_are_refused_before_the_model(monkeypatch, capsys, no_models, argv, fragment):
    assert_one_error_line(*run(monkeypatch, capsys, *argv), fragment)


def test_seq2seq_held_out_set_of_exactly_half_is_accepted():
    from minitransformer.commands.seq2seq import count_sources

    assert count_sources(2, 1, 3, enough=100) == 14
    assert count_sources(10, 3, 8, enough=2000) == 2000                    # stops counting once enough
    assert count_sources(10**6, 1, 10**6, enough=5) == 5                    # never builds a huge number


# ---------------------------------------------------------------- gradcheck --only
def test_gradcheck_only_with_an_unknown_name_lists_the_names(monkeypatch, capsys):
    status, out, err = run(monkeypatch, capsys, "gradcheck", "--only", "Linear,LayerNrom,Sofmax")
    assert_one_error_line(status, out, err, "unknown layers 'LayerNrom', 'Sofmax'", "the layers are: Softmax, Linear",
                          "LayerNorm", "GPTClassifier + L3")


def test_gradcheck_only_with_no_name(monkeypatch, capsys):
    assert_one_error_line(*run(monkeypatch, capsys, "gradcheck", "--only", " , "), "names no layer")


# ---------------------------------------------------------------- bpe --save
def test_bpe_save_to_a_directory_is_refused_before_learning(monkeypatch, capsys, files):
    assert_one_error_line(*run(monkeypatch, capsys, "bpe", "--text", str(files["text"]), "--merges", "3",
                               "--save", str(files["dir"])), "--save", "is a directory")


def test_bpe_save_into_a_missing_directory_is_refused(monkeypatch, capsys, files, tmp_path):
    target = tmp_path / "no" / "such" / "tokenizer.json"
    assert_one_error_line(*run(monkeypatch, capsys, "bpe", "--text", str(files["text"]), "--merges", "3",
                               "--save", str(target)), "does not exist")


def test_bpe_save_never_replaces_a_file_unless_forced(monkeypatch, capsys, files, tmp_path):
    target = tmp_path / "mine.json"
    target.write_text("my notes", encoding="utf-8")
    assert_one_error_line(*run(monkeypatch, capsys, "bpe", "--text", str(files["text"]), "--merges", "3",
                               "--save", str(target)), "already exists", "--force")
    assert target.read_text(encoding="utf-8") == "my notes"
    status, _, _ = run(monkeypatch, capsys, "bpe", "--text", str(files["text"]), "--merges", "3", "--save",
                       str(target), "--force")
    assert status == 0 and BPETokenizer.load(target).vocab_size == 259


def test_bpe_save_with_too_many_merges_for_the_text_prints_nothing_but_the_error(monkeypatch, capsys, files):
    status, out, err = run(monkeypatch, capsys, "bpe", "--text", str(files["short"]), "--merges", "50", "--save",
                           str(files["dir"] / "tokenizer.json"))
    assert_one_error_line(status, out, err, "--save: the byte-level tokenizer cannot have 50 merges",
                          "lower --merges or --min-count")
    assert not (files["dir"] / "tokenizer.json").exists()


def test_bpe_save_says_plainly_that_the_saved_tokenizer_learned_its_own_merges(monkeypatch, capsys, files, tmp_path):
    target = tmp_path / "tokenizer.json"
    status, out, _ = run(monkeypatch, capsys, "bpe", "--text", str(files["text"]), "--merges", "6", "--save",
                         str(target))
    assert status == 0
    tokenizer = BPETokenizer.load(target)
    saved = [(tokenizer.vocab[left].decode(), tokenizer.vocab[right].decode()) for left, right in tokenizer.merges]
    printed = [tuple(line.split()[2:4]) for line in out.splitlines()[2:8]]
    assert "they are not the merges printed above" in out and "learned its own merges" in out
    listed = out.split("Its first 5: ", 1)[1].strip()
    assert listed == ", ".join(f"{left!r} + {right!r}" for left, right in saved[:5])     # what the file holds
    assert printed != saved                                                            # which differ here
    assert json.loads(target.read_text(encoding="utf-8"))["vocab_size"] == 262


def test_a_real_process_prints_one_line_and_exits_2(files):
    result = subprocess.run([sys.executable, "-m", "minitransformer", "bpe", "--text", str(files["text"]),
                             "--merges", "3", "--save", str(files["dir"])], capture_output=True, text=True, timeout=60, encoding="utf-8")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: --save") and result.stderr.count("\n") == 1


# ---------------------------------------------------------------- valid edge values run
def test_mlm_with_zero_steps_evaluates_the_untrained_model(monkeypatch, capsys, files):
    status, out, err = run(monkeypatch, capsys, "mlm", "--text", str(files["text"]), "--steps", "0", "--d-model", "8",
                           "--layers", "1", "--batch-size", "2", "--chunk", "4")
    assert status == 0, err
    assert "held-out masked-token accuracy" in out


def test_seq2seq_with_zero_steps_evaluates_the_untrained_model(monkeypatch, capsys):
    status, out, err = run(monkeypatch, capsys, "seq2seq", "--steps", "0", "--test-size", "6", "--d-model", "8",
                           "--heads", "2", "--layers", "1", "--beam", "2", "--examples", "1")
    assert status == 0, err
    assert "trained 0 steps" in out and "beam search (K=2)" in out


def test_finetune_with_zero_steps_evaluates(monkeypatch, capsys):
    status, out, err = run(monkeypatch, capsys, "finetune", "--pretrain-steps", "0", "--steps", "0", "--length", "2")
    assert status == 0, err
    assert "held-out accuracy" in out
