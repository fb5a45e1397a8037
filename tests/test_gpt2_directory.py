"""A Hugging Face GPT-2 checkpoint folder (interop/gpt2_directory.py) and `sample --gpt2 DIR`.

* definition: a small randomly initialised GPT-2 that `transformers` saves (config.json, model.safetensors)
  with GPT-2's tokenizer files beside it loads into a GPT whose logits are Hugging Face's (float64, 1e-9),
  and `sample --gpt2 DIR --temperature 0` continues a prompt with Hugging Face's greedy tokens; the weights
  our NumPy reader gives are the `safetensors` package's;
* `sample --gpt2 DIR --prompt '<|endoftext|>'` reads the special token as GPT-2's document separator (the
  prompt is the user's own text, allowed explicitly), with a small model of our own written to a folder;
* bad input: a missing folder, a missing file, a config of another model, damaged weights, --gpt2 with
  --checkpoint: one `error:` line, exit status 2, no traceback.

Needs torch and transformers (`pip install -e ".[parity]"`) and GPT-2's tokenizer files for the first
part; the bad-input tests need neither.
"""

import json
import shutil

import numpy as np
import pytest
from _gpt2_files import MERGES, VOCAB, requires_gpt2_files
from _torch_parity import requires_torch, torch
from test_gpt2_bpe_training import TEXT
from test_safetensors import write_by_hand
from test_train_command import assert_one_error_line, cli

from minitransformer import GPT, GPT2Tokenizer, rel_error, to_gpt2_state_dict
from minitransformer.generation.sampling import generate
from minitransformer.interop.gpt2_directory import load_gpt2_directory
from minitransformer.interop.safetensors import load_safetensors

try:
    import transformers
except ImportError:
    transformers = None
requires_transformers = pytest.mark.skipif(transformers is None, reason='transformers is missing: pip install -e ".[parity]"')


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A tiny random GPT-2 saved by transformers, with GPT-2's vocab.json and merges.txt beside it."""
    folder = tmp_path_factory.mktemp("gpt2-tiny")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=50257, n_positions=24, n_embd=16, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(config).double().eval()
    model.float().save_pretrained(folder, safe_serialization=True)
    for path in (VOCAB, MERGES):
        shutil.copy(path, folder / path.name)
    return folder, model.double()


@requires_torch
@requires_transformers
@requires_gpt2_files
def test_the_folder_loads_into_hugging_faces_function(hf_folder):
    folder, reference = hf_folder
    model, tokenizer = load_gpt2_directory(folder, dtype=np.float64)
    ids = tokenizer.encode("Hello, world! It's a test.")
    with torch.no_grad():
        expected = reference(torch.tensor([ids])).logits.numpy()
    assert rel_error(model(np.array([ids])), expected) <= 1e-9


@requires_torch
@requires_transformers
@requires_gpt2_files
def test_our_reader_gives_the_safetensors_packages_arrays(hf_folder):
    safetensors_numpy = pytest.importorskip("safetensors.numpy", reason='safetensors is missing: pip install -e ".[gpt2]"')
    ours, theirs = (read(hf_folder[0] / "model.safetensors") for read in (load_safetensors, safetensors_numpy.load_file))
    assert set(ours) == set(theirs) and all(np.array_equal(ours[name], theirs[name]) for name in theirs)


@requires_torch
@requires_transformers
@requires_gpt2_files
def test_sample_gpt2_continues_with_hugging_faces_greedy_tokens(hf_folder, capsys):
    folder, reference = hf_folder
    tokenizer = GPT2Tokenizer.from_files(VOCAB, MERGES)
    prompt = tokenizer.encode("The quick brown fox")
    with torch.no_grad():
        greedy = reference.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False,
                                    attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                    pad_token_id=50256)[0].tolist()
    model, _ = load_gpt2_directory(folder, dtype=np.float64)
    assert generate(model, np.array(prompt), 6, temperature=0.0).tolist() == greedy
    code, out, err = cli(["sample", "--gpt2", str(folder), "--prompt", "The quick brown fox", "--max-new-tokens", "6",
                          "--temperature", "0"], capsys)
    assert code == 0, err
    assert out.rstrip("\n") == tokenizer.decode(greedy)


def test_sample_gpt2_reads_endoftext_in_the_prompt_as_the_document_separator(tmp_path, capsys):
    """The prompt is the user's own text: `sample --gpt2` allows GPT-2's special token in it explicitly."""
    tokenizer = GPT2Tokenizer.train(TEXT, 300)                  # <|endoftext|> is id 299
    model = GPT(300, 16, 2, 1, 32, 16, rng=0, dtype=np.float32)
    write_by_hand(tmp_path / "model.safetensors", {name: ("F32", array.astype(np.float32))
                                                   for name, array in to_gpt2_state_dict(model).items()})
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 2}), encoding="utf-8")
    tokenizer.save(tmp_path)
    loaded, _ = load_gpt2_directory(tmp_path)
    code, out, err = cli(["sample", "--gpt2", str(tmp_path), "--prompt", "<|endoftext|>", "--max-new-tokens", "5",
                          "--temperature", "0"], capsys)
    assert code == 0, err
    as_separator = tokenizer.decode(generate(loaded, np.array([299]), 5, temperature=0.0).tolist())
    as_text = tokenizer.decode(generate(loaded, np.array(tokenizer.encode_ordinary("<|endoftext|>")), 5,
                                        temperature=0.0).tolist())
    assert out.rstrip("\n") == as_separator != as_text


# ---------------------------------------------------------------- bad input
@pytest.fixture()
def small_folder(tmp_path):
    """A folder with a small tokenizer and a config, but whatever weights a test writes."""
    GPT2Tokenizer.train(TEXT, 300).save(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 2}), encoding="utf-8")
    (tmp_path / "model.safetensors").write_bytes(b"\x10\0\0\0\0\0\0\0{}")
    return tmp_path


def _damage(folder, case):
    if case == "missing folder":
        shutil.rmtree(folder)
    elif case == "missing weights":
        (folder / "model.safetensors").unlink()
    elif case == "another model":
        (folder / "config.json").write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    elif case == "config not json":
        (folder / "config.json").write_text("{model_type: gpt2", encoding="utf-8")
    elif case == "merges damaged":
        (folder / "merges.txt").write_text("#version: 0.2\na b c\n", encoding="utf-8")


BAD_FOLDERS = {"missing folder": "is not a directory", "missing weights": "lacks model.safetensors",
               "another model": "expected a GPT-2 config (model_type 'gpt2'), got 'llama'",
               "config not json": "config.json is not a JSON file", "truncated weights": "model.safetensors",
               "merges damaged": "merges.txt, line 2: expected two tokens"}


@pytest.mark.parametrize("case", list(BAD_FOLDERS))
def test_a_bad_folder_is_one_error_line_exit_2(small_folder, case, capsys):
    _damage(small_folder, case)
    code, out, err = cli(["sample", "--gpt2", str(small_folder), "--prompt", "First", "--max-new-tokens", "2"], capsys)
    assert code == 2 and not out
    assert_one_error_line(err, f"--gpt2 {small_folder}", BAD_FOLDERS[case])


def test_gpt2_and_checkpoint_together_are_refused(small_folder, capsys):
    code, _, err = cli(["sample", "--gpt2", str(small_folder), "--checkpoint", str(small_folder)], capsys)
    assert code == 2
    assert_one_error_line(err, "--gpt2 and --checkpoint")

