"""Per-layer hidden states from every model, and Kumar's claim about which layers make the best features.

Kumar, *Language Modeling III: Transformers* (CSE 5525, Ohio State, 2025), BERT slides: each encoder layer's
output along a token's path is a feature of that token; on their NER table the embedding layer is the worst
feature, later layers better, and combinations of the last layers (sum, concatenation) better still.
"""

import numpy as np
import pytest

from minitransformer import GPT, BertMLM, GPTClassifier, Seq2SeqTransformer, TransformerEncoder, TransformerXL
from minitransformer.objectives.instruct import supervised_fine_tune
from minitransformer.tasks.even_digits import VOCAB_SIZE, EvenDigitsTask

RNG = np.random.default_rng(0)
IDS = RNG.integers(1, 7, size=(2, 5))


def _check_states(states, blocks, first, call_block):
    """n_layers + 1 arrays (B, T, C); state 0 is the embeddings; state l is block l applied to state l - 1."""
    assert len(states) == len(blocks) + 1
    np.testing.assert_allclose(states[0], first)
    for block, before, after in zip(blocks, states[:-1], states[1:]):
        np.testing.assert_allclose(call_block(block, before), after, atol=1e-12)


@pytest.mark.parametrize("kernels", ["plain", "fast"])
def test_gpt_and_the_classifier_keep_every_layers_output(kernels):
    gpt = GPT(7, 8, 2, 3, 16, 6, rng=0, kernels=kernels)
    final = gpt.hidden(IDS)
    states = [state.copy() for state in gpt.hidden_states]
    _check_states(states, gpt.blocks, gpt.position(gpt.token_embedding(IDS)), lambda block, x: block(x))
    np.testing.assert_allclose(gpt.ln_f(states[-1]), final)
    classifier = GPTClassifier(gpt, 2, rng=1)
    classifier(IDS)
    assert len(classifier.hidden_states) == 4 and classifier.hidden_states is gpt.hidden_states


def test_encoder_bert_and_seq2seq_keep_every_layers_output():
    encoder = TransformerEncoder(7, 8, 2, 2, 16, 6, pad_id=0, rng=0)
    final = encoder(IDS)
    states = [state.copy() for state in encoder.hidden_states]
    _check_states(states, encoder.blocks, encoder.embed(IDS), lambda block, x: block(x, mask=None))
    np.testing.assert_allclose(states[-1], final)                                  # post-norm: no final LayerNorm
    bert = BertMLM(7, 8, 2, 2, 16, 6, rng=0)
    bert(IDS)
    assert len(bert.hidden_states) == 3 and bert.hidden_states[0].shape == (2, 5, 8)
    model = Seq2SeqTransformer(7, 7, 8, 2, 2, 16, 6, pad_id=0, rng=0)
    model(IDS, IDS[:, :4])
    assert len(model.encoder_hidden_states) == 3 and len(model.decoder_hidden_states) == 3
    assert model.decoder_hidden_states[-1].shape == (2, 4, 8)
    xl = TransformerXL(7, 8, 2, 2, 16, mem_len=4, rng=0)
    xl(IDS)
    assert len(xl.hidden_states) == 3 and xl.hidden_states[0].shape == (2, 5, 8)


def _probe_accuracy(train_features, train_labels, test_features, test_labels, ridge=1e-2):
    """A linear probe: ridge regression onto one-hot labels, scored by the argmax on held-out features."""
    train = np.c_[train_features, np.ones(len(train_features))]
    weights = np.linalg.solve(train.T @ train + ridge * np.eye(train.shape[1]), train.T @ np.eye(10)[train_labels])
    return float(np.mean((np.c_[test_features, np.ones(len(test_features))] @ weights).argmax(1) == test_labels))


def test_later_layers_are_better_features_than_the_embedding_layer():
    """Our task: a GPT trained on careless counting demonstrations (`EvenDigitsTask`); the probe reads, at three
    answer positions, the digit the count started from, which only the context (position 2) holds. The token
    and its position alone (layer 0) get it right only when the digit happens to be counted right."""
    task = EvenDigitsTask(rng=0)
    gpt = GPT(VOCAB_SIZE, 16, 2, 2, 32, 8, rng=0)
    supervised_fine_tune(gpt, task, steps=60, batch_size=32, lr=1e-2)

    def features(n):
        ids = task.demonstrate(task.prompts(n))
        gpt.hidden(ids[:, :-1])
        return [state[:, 4:7].reshape(-1, 16) for state in gpt.hidden_states], np.repeat(ids[:, 2], 3)

    (train, labels), (test, test_labels) = features(1000), features(500)
    by_layer = [_probe_accuracy(train[layer], labels, test[layer], test_labels) for layer in range(3)]
    last_two = _probe_accuracy(np.c_[train[1], train[2]], labels, np.c_[test[1], test[2]], test_labels)
    assert by_layer[0] < 0.4 < 0.75 < by_layer[1] <= by_layer[2], by_layer          # measured 0.24, 0.79, 0.81
    assert last_two > by_layer[2] + 0.05, (last_two, by_layer)                      # measured 0.92
