"""BERT-style masked LM: the 15% / 80-10-10 corruption, bidirectional attention, the NSP head, a training smoke test."""

import numpy as np
import pytest

from minitransformer import CrossEntropyLoss
from minitransformer.models.bert import BertMLM, mask_tokens
from minitransformer.objectives.masked_lm import MASK, PAD, SPECIALS, CharCorpus
from minitransformer.training.config import transformer_adam

N_SPECIAL, V = len(SPECIALS), 30


def test_fifteen_percent_chosen_then_eighty_ten_ten():
    rng = np.random.default_rng(0)
    ids = rng.integers(N_SPECIAL, V, size=(4000, 40))
    ids[:, 30:] = PAD                                              # 30 real tokens per row
    inputs, targets, chosen = mask_tokens(ids, rng, MASK, N_SPECIAL, V)
    assert np.all(chosen.sum(axis=1) == round(0.15 * 30))          # 15% of the real positions of every row
    assert not chosen[:, 30:].any()                                # padding is never chosen
    assert np.array_equal(targets, np.where(chosen, ids, -1))      # loss only on the chosen positions
    assert np.array_equal(inputs[~chosen], ids[~chosen])           # nothing else is touched
    became_mask = np.mean(inputs[chosen] == MASK)
    changed = (inputs[chosen] != MASK) & (inputs[chosen] != ids[chosen])
    kept = np.mean(inputs[chosen] == ids[chosen])
    assert became_mask == pytest.approx(0.8, abs=0.01)
    # a random replacement equals the original with probability 1/(V - N_SPECIAL)
    p_same = 1 / (V - N_SPECIAL)
    assert np.mean(changed) == pytest.approx(0.1 * (1 - p_same), abs=0.01)
    assert kept == pytest.approx(0.1 + 0.1 * p_same, abs=0.01)
    assert not np.isin(inputs[chosen & (inputs != MASK)], range(N_SPECIAL)).any()


def test_short_rows_still_get_one_masked_position():
    rng = np.random.default_rng(1)
    ids = np.array([[5, 6, PAD, PAD], [7, PAD, PAD, PAD]])
    _, _, chosen = mask_tokens(ids, rng, MASK, N_SPECIAL, V)
    assert chosen.sum(axis=1).tolist() == [1, 1]


def test_encoder_is_bidirectional():
    model = BertMLM(V, 16, 2, 2, 32, 10, rng=0)
    ids = np.array([[5, 6, 7, 8, 9, 10]])
    later_changed = ids.copy()
    later_changed[0, -1] = 11
    assert not np.allclose(model(ids)[0, 0], model(later_changed)[0, 0])    # position 0 sees the last token


def test_nsp_head_shapes_and_gradient_only_through_position_zero():
    model = BertMLM(V, 16, 2, 1, 32, 10, nsp=True, rng=0)
    mlm, nsp = model(np.array([[2, 5, 6, 3, 7, 3], [2, 8, 9, 3, 10, 3]]))
    assert mlm.shape == (2, 6, V) and nsp.shape == (2, 2)
    model.zero_grad()
    model.backward((np.zeros_like(mlm), np.ones_like(nsp)))
    assert np.abs(model.nsp_head.weight.grad).sum() > 0
    assert np.abs(model.transform.weight.grad).sum() == 0      # no MLM gradient was sent


def test_bad_inputs_are_named():
    with pytest.raises(IndexError, match=r"token ids in \[0, 30\)"):
        BertMLM(V, 16, 2, 1, 32, 10, rng=0)(np.array([[1, 30]]))
    with pytest.raises(ValueError, match="max_len=10"):
        BertMLM(V, 16, 2, 1, 32, 10, rng=0)(np.ones((1, 11), dtype=int))


def test_training_smoke_masked_lm_loss_falls():
    """The short demonstration run is `python -m minitransformer mlm`; this only checks that learning happens.

    Below the unigram entropy of the text, the model must be reading the context around each mask.
    """
    rng = np.random.default_rng(0)
    text = "the cat sat on the mat. "
    corpus = CharCorpus(text * 40, chunk=8, rng=rng)
    frequencies = np.unique(list(text), return_counts=True)[1] / len(text)
    unigram_entropy = -np.sum(frequencies * np.log(frequencies))                    # about 2.14 nats
    model = BertMLM(corpus.vocab_size, 32, 2, 1, 64, 19, pad_id=PAD, dtype=np.float32, rng=1)
    optimizer, loss_fn = transformer_adam(model.parameters(), lr=3e-3), CrossEntropyLoss(ignore_index=-1)
    losses = []
    for _ in range(120):
        ids, _ = corpus.batch(32)
        inputs, targets, _ = mask_tokens(ids, rng, MASK, N_SPECIAL, corpus.vocab_size, p=0.3)
        optimizer.zero_grad()
        losses.append(float(loss_fn(model(inputs), targets)))
        model.backward(loss_fn.backward())
        optimizer.step()
    assert model(inputs).dtype == np.float32                                    # nothing upcasts to float64
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])
    assert np.mean(losses[-10:]) < unigram_entropy - 0.1


def test_the_masked_token_loss_is_kept_apart_from_the_nsp_term():
    """The masked-token perplexity is exp(token_loss): the masked positions' mean NLL alone, the NSP term aside."""
    from minitransformer.objectives.masked_lm import MaskedLMObjective

    rng = np.random.default_rng(0)
    ids = rng.integers(N_SPECIAL, V, size=(3, 10))
    inputs, targets, _ = mask_tokens(ids, rng, MASK, N_SPECIAL, V)
    follows = np.array([0, 1, 1])
    model = BertMLM(V, 16, 2, 1, 32, 10, nsp=True, rng=0)
    objective = MaskedLMObjective(model, nsp=True)
    loss = objective.forward(inputs, targets, follows)
    token_logits, nsp_logits = model(inputs)
    assert objective.token_loss == pytest.approx(float(CrossEntropyLoss(ignore_index=-1)(token_logits, targets)))
    assert loss == pytest.approx(objective.token_loss + float(CrossEntropyLoss()(nsp_logits, follows)))


def test_the_mlm_command_prints_the_masked_token_perplexity(tmp_path, capsys):
    import math
    import re

    from minitransformer.__main__ import main

    path = tmp_path / "text.txt"
    path.write_text("the cat sat on the mat. " * 40, encoding="utf-8")
    assert main(["mlm", "--text", str(path), "--steps", "2", "--batch-size", "4", "--d-model", "16",
                 "--layers", "1", "--nsp"]) == 0
    out = capsys.readouterr().out
    step = re.search(r"step +2: masked-token loss [\d.]+ \(perplexity ([\d.]+)\), next-sentence loss", out)
    held_out = re.search(r"held-out masked-token loss ([\d.]+), perplexity ([\d.]+)", out)
    assert step and held_out, out
    assert float(held_out[2]) == pytest.approx(math.exp(float(held_out[1])), rel=1e-3)     # both rounded
    assert 1 < float(step[1]) < 2 * (N_SPECIAL + len(set("the cat sat on the mat. ")))   # about uniform, untrained
