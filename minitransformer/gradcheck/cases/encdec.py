"""Gradient checks for encoders and encoder-decoders: masked attention, the decoder block, tiny models.

`all_cases()` (this package's __init__) joins them to the catalogue, so `python -m
minitransformer gradcheck` and tests/test_gradients.py both run them. Masks and token ids are
passed through unchanged; only float inputs and parameters are perturbed.
"""

import numpy as np

from ...layers.block import TransformerBlock
from ...layers.decoder_block import DecoderBlock
from ...layers.loss import CrossEntropyLoss
from ...layers.multihead import MultiHeadAttention
from ...layers.padding import lengths_to_mask
from ...models.bert import BertMLM, mask_tokens
from ...models.encoder import InputEmbedding, TransformerEncoder
from ...models.gpt import GPT
from ...models.gpt_classifier import FineTuningObjective, GPTClassifier
from ...models.seq2seq import Seq2SeqTransformer
from .case import GradcheckCase, WithLoss, normal, perturb

PAD = 0


def padded_ids(rng, lengths, T, V):
    """int (B, T) with real ids in [1, V) up to each length and PAD = 0 after."""
    ids = rng.integers(1, V, size=(len(lengths), T))
    ids[np.arange(T)[None, :] >= np.asarray(lengths)[:, None]] = PAD
    return ids


def _masked_mha_case(cross):
    def build(rng):
        layer = perturb(MultiHeadAttention(6, 2, causal=not cross, rng=rng), rng, 0.1)
        x = normal(rng, 2, 3, 6)
        context = normal(rng, 2, 4, 6) if cross else None
        mask = lengths_to_mask([4, 2] if cross else [3, 1], 4 if cross else 3)     # (B, 1, 1, S)
        inputs = [x, context] if cross else [x]
        return layer, inputs, lambda *args: layer.forward(*args, mask=mask)
    return build


def _masked_block_case(norm):
    def build(rng):
        block = perturb(TransformerBlock(8, 2, 12, norm=norm, causal=False, rng=rng), rng, 0.1)
        mask = lengths_to_mask([4, 2], 4)
        return block, [normal(rng, 2, 4, 8)], lambda x: block.forward(x, mask=mask)
    return build


def _decoder_block_case(norm, dropout_p):
    def build(rng):
        block = perturb(DecoderBlock(8, 2, 12, norm=norm, dropout=dropout_p, rng=rng), rng, 0.1)
        self_mask, memory_mask = lengths_to_mask([3, 2], 3), lengths_to_mask([4, 3], 4)

        def forward(x, memory):
            block.drop1.rng = block.drop2.rng = block.drop3.rng = np.random.default_rng(7)
            return block.forward(x, memory, self_mask=self_mask, memory_mask=memory_mask)
        return block, [normal(rng, 2, 3, 8), normal(rng, 2, 4, 8)], forward
    return build


def _input_embedding_case(positional):
    def build(rng):
        layer = perturb(InputEmbedding(7, 4, 6, positional=positional, rng=rng), rng, 0.3)
        return layer, [rng.integers(0, 7, size=(2, 5))], None
    return build


def _encoder_case(norm):
    def build(rng):
        model = perturb(TransformerEncoder(7, 8, 2, 2, 12, 6, pad_id=PAD, norm=norm, positional="learned",
                                           activation="gelu", rng=rng), rng, 0.1)
        return model, [padded_ids(rng, [5, 3], 5, 7)], None
    return build


def _seq2seq_case(norm, positional, shared, with_loss):
    def build(rng):
        model = perturb(Seq2SeqTransformer(7, 7, 8, 2, 2, 12, 6, pad_id=PAD, norm=norm, positional=positional,
                                           share_embeddings=shared, tie_output=shared, activation="gelu", rng=rng), rng, 0.1)
        src, tgt = padded_ids(rng, [4, 2], 4, 7), padded_ids(rng, [3, 2], 3, 7)
        if not with_loss:
            return model, [src, tgt], None
        targets = np.where(tgt == PAD, PAD, rng.integers(1, 7, size=tgt.shape))
        return WithLoss(model, targets, CrossEntropyLoss(ignore_index=PAD)), [src, tgt], None
    return build


class _BertPretrainingLoss(WithLoss):
    """BertMLM with NSP: L = masked-LM loss + next-sentence loss, one scalar for the checker."""

    def __init__(self, model, mlm_targets, nsp_labels):
        super().__init__(model, mlm_targets, CrossEntropyLoss(ignore_index=-1))
        self.nsp_labels, self.nsp_loss = nsp_labels, CrossEntropyLoss()

    def forward(self, ids):
        mlm_logits, nsp_logits = self.model.forward(ids)
        return self.loss.forward(mlm_logits, self.targets) + self.nsp_loss.forward(nsp_logits, self.nsp_labels)

    def backward(self, grad):
        return self.model.backward((self.loss.backward(grad), self.nsp_loss.backward(grad)))


def _bert_case(nsp):
    def build(rng):
        model = perturb(BertMLM(9, 8, 2, 2, 12, 6, pad_id=PAD, nsp=nsp, rng=rng), rng, 0.1)
        ids = padded_ids(rng, [6, 4], 6, 9)
        ids[ids == 1] = 2                                       # 0 = pad, 1 = [MASK], ordinary tokens from 2
        inputs, targets, _ = mask_tokens(ids, rng, mask_id=1, n_special=2, vocab_size=9, p=0.4)
        if nsp:
            return _BertPretrainingLoss(model, targets, np.array([0, 1])), [inputs], None
        return WithLoss(model, targets, CrossEntropyLoss(ignore_index=-1)), [inputs], None
    return build


def _classifier_case(norm, lm_weight, positional="learned"):
    def build(rng):
        gpt = GPT(vocab_size=7, d_model=8, n_heads=2, n_layers=2, d_ff=12, max_len=6, norm=norm,
                  positional=positional, rng=rng)
        model = perturb(GPTClassifier(gpt, 3, rng=rng), rng, 0.3)
        labels = rng.integers(0, 3, size=2)
        return FineTuningObjective(model, lm_weight), [rng.integers(0, 7, size=(2, 5)), labels], None
    return build


CASES = [
    GradcheckCase("MultiHeadAttention", "self, causal + key padding, (2, 3, 6)", _masked_mha_case(False)),
    GradcheckCase("MultiHeadAttention", "cross + key padding, (2, 3, 6) -> (2, 4, 6)", _masked_mha_case(True)),
    GradcheckCase("TransformerBlock", "encoder, post-norm, key padding", _masked_block_case("post")),
    GradcheckCase("TransformerBlock", "encoder, pre-norm, key padding", _masked_block_case("pre")),
    GradcheckCase("DecoderBlock", "post-norm, masks, x (2, 3, 8), memory (2, 4, 8)", _decoder_block_case("post", 0.0)),
    GradcheckCase("DecoderBlock", "pre-norm, masks", _decoder_block_case("pre", 0.0)),
    GradcheckCase("DecoderBlock", "post-norm, dropout 0.2", _decoder_block_case("post", 0.2)),
    GradcheckCase("InputEmbedding", "sinusoidal, ids (2, 5)", _input_embedding_case("sinusoidal")),
    GradcheckCase("InputEmbedding", "learned, ids (2, 5)", _input_embedding_case("learned")),
    GradcheckCase("TransformerEncoder", "post-norm, padded (2, 5)", _encoder_case("post")),
    GradcheckCase("TransformerEncoder", "pre-norm, padded (2, 5)", _encoder_case("pre")),
    GradcheckCase("Seq2SeqTransformer", "post-norm, sinusoidal, separate tables", _seq2seq_case("post", "sinusoidal", False, False)),
    GradcheckCase("Seq2SeqTransformer", "pre-norm, learned, shared + tied tables", _seq2seq_case("pre", "learned", True, False)),
    GradcheckCase("Seq2SeqTransformer + loss", "post-norm, ignore_index = pad", _seq2seq_case("post", "sinusoidal", True, True)),
    GradcheckCase("BertMLM + masked loss", "post-norm, padded (2, 6), ignore_index -1", _bert_case(False)),
    GradcheckCase("BertMLM + MLM and NSP losses", "post-norm, padded (2, 6)", _bert_case(True)),
    GradcheckCase("GPTClassifier + L3", "pre-norm, L2 + 0.5 L1", _classifier_case("pre", 0.5)),
    GradcheckCase("GPTClassifier + L3", "post-norm, L2 only (lambda 0)", _classifier_case("post", 0.0)),
    GradcheckCase("GPTClassifier + L3", "pre-norm, rope", _classifier_case("pre", 0.5, "rope")),
    GradcheckCase("GPTClassifier + L3", "pre-norm, alibi", _classifier_case("pre", 0.5, "alibi")),
    GradcheckCase("GPTClassifier + L3", "post-norm, no positions", _classifier_case("post", 0.5, "none")),
]
