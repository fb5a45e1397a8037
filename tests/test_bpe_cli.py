"""`python -m minitransformer bpe`: prints the lecture's merges with counts and saves a tokenizer."""

import minitransformer.__main__ as cli
from minitransformer.tokenizers.bpe import BPETokenizer

TOY_TEXT = " ".join(["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3) + "\n"


def run_bpe(monkeypatch, *arguments):
    # Only this command: the other commands live in other modules and are tested there.
    monkeypatch.setattr(cli, "COMMANDS", {"bpe": "minitransformer.commands.bpe"})
    return cli.main(["bpe", *arguments])


def test_bpe_is_registered():
    assert cli.COMMANDS["bpe"] == "minitransformer.commands.bpe"


def test_prints_the_lecture_merges_with_counts_and_saves(monkeypatch, tmp_path, capsys):
    text_path, tokenizer_path = tmp_path / "toy.txt", tmp_path / "tokenizer.json"
    text_path.write_text(TOY_TEXT, encoding="utf-8")
    assert run_bpe(monkeypatch, "--text", str(text_path), "--merges", "10", "--save", str(tokenizer_path)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("10 merges from 4 distinct words")
    assert lines[2].split() == ["0", "9", "e", "s"]
    assert lines[9].split() == ["7", "6", "new", "est</w>"]
    tokenizer = BPETokenizer.load(tokenizer_path)
    assert tokenizer.vocab_size == 266
    assert tokenizer.decode(tokenizer.encode(TOY_TEXT)) == TOY_TEXT


def test_reference_method_prints_the_same_merges(monkeypatch, tmp_path, capsys):
    text_path = tmp_path / "toy.txt"
    text_path.write_text(TOY_TEXT, encoding="utf-8")
    run_bpe(monkeypatch, "--text", str(text_path), "--merges", "10")
    fast_lines = capsys.readouterr().out.splitlines()[1:]
    run_bpe(monkeypatch, "--text", str(text_path), "--merges", "10", "--method", "reference")
    assert capsys.readouterr().out.splitlines()[1:] == fast_lines


def test_missing_text_file_is_an_error_not_a_traceback(monkeypatch, tmp_path, capsys):
    assert run_bpe(monkeypatch, "--text", str(tmp_path / "nothing.txt"), "--merges", "3") == 2
    assert capsys.readouterr().err == f"error: --text {tmp_path / 'nothing.txt'}: no such file\n"
