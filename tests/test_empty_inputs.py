"""An empty batch (B = 0) or an empty sequence (T = 0) is refused by every model with one clear ValueError.

The rule, in each model's forward docstring: token ids are (B, T) with B >= 1 and T >= 1. Before,
every model failed deep inside attention with NumPy's "cannot reshape array of size 0".
"""

import re

import numpy as np
import pytest

from minitransformer import GPT, MultiHeadAttention
from minitransformer.models.bert import BertMLM
from minitransformer.models.encoder import TransformerEncoder
from minitransformer.models.gpt_classifier import GPTClassifier
from minitransformer.models.seq2seq import Seq2SeqTransformer

V = 7


def tiny_gpt(kernels="plain"):
    return GPT(V, 8, 2, 1, 16, 6, rng=0, kernels=kernels)


MODELS = {
    "GPT": (tiny_gpt, lambda model, ids: model.forward(ids)),
    "GPT fast": (lambda: tiny_gpt("fast"), lambda model, ids: model.forward(ids)),
    "TransformerEncoder": (lambda: TransformerEncoder(V, 8, 2, 1, 16, 6, pad_id=0, rng=0),
                           lambda model, ids: model.forward(ids)),
    "BertMLM": (lambda: BertMLM(V, 8, 2, 1, 16, 6, rng=0), lambda model, ids: model.forward(ids)),
    "GPTClassifier": (lambda: GPTClassifier(tiny_gpt(), 2, rng=0), lambda model, ids: model.forward(ids)),
    "Seq2SeqTransformer (source)": (lambda: Seq2SeqTransformer(V, V, 8, 2, 1, 16, 6, pad_id=0, rng=0),
                                    lambda model, ids: model.forward(ids, np.ones((max(len(ids), 1), 2), int))),
    "Seq2SeqTransformer (target)": (lambda: Seq2SeqTransformer(V, V, 8, 2, 1, 16, 6, pad_id=0, rng=0),
                                    lambda model, ids: model.forward(np.ones((max(len(ids), 1), 2), int), ids)),
}


@pytest.mark.parametrize("shape", [(0, 3), (2, 0), (0, 0)], ids=str)
@pytest.mark.parametrize("name", MODELS, ids=str)
def test_every_model_refuses_an_empty_batch_or_sequence_naming_itself(name, shape):
    build, call = MODELS[name]
    model = build()
    what = "target ids" if "(target)" in name else "source ids" if "(source)" in name else "token ids"
    message = (rf"^{re.escape(repr(model))} expected {what} \(B, T\) with B >= 1 and T >= 1 "
               rf"\(an empty batch or sequence is refused\), got shape {re.escape(str(shape))}$")
    with pytest.raises(ValueError, match=message):
        call(model, np.ones(shape, dtype=np.int64))


@pytest.mark.parametrize("name", MODELS, ids=str)
def test_the_smallest_non_empty_batch_still_works(name):
    build, call = MODELS[name]
    out = call(build(), np.ones((1, 1), dtype=np.int64))
    first = out[0] if isinstance(out, tuple) else out
    assert first.shape[0] == 1 and first.shape[1] in (1, 2) and np.all(np.isfinite(first))


def test_the_encoder_decoders_halves_refuse_empty_inputs_too():
    model = Seq2SeqTransformer(V, V, 8, 2, 1, 16, 6, pad_id=0, rng=0)
    with pytest.raises(ValueError, match=r"expected source ids \(B, T\) with B >= 1 and T >= 1"):
        model.encode(np.ones((2, 0), dtype=np.int64))
    memory, memory_mask = model.encode(np.ones((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match=r"expected target ids \(B, T\) with B >= 1 and T >= 1"):
        model.decode(np.ones((2, 0), dtype=np.int64), memory, memory_mask)


@pytest.mark.parametrize("kernels", ["plain", "fast"])
@pytest.mark.parametrize("shape", [(0, 3, 4), (2, 0, 4)], ids=str)
def test_multihead_attention_names_an_empty_batch_or_sequence(kernels, shape):
    from minitransformer.fast import use_kernels

    layer = use_kernels(MultiHeadAttention(4, 2, rng=0), kernels)
    with pytest.raises(ValueError, match=r"MultiHeadAttention.* expected x \(B, T, 4\) with B >= 1 and T >= 1, got "
                                         + re.escape(str(shape))):
        layer.forward(np.zeros(shape))
