"""Training objectives: what `train_step` minimises, one small class per task of the course.

An objective joins a model to its loss. Every one offers the same three things,
so that one `train_step` (step.py) trains them all:

    loss = objective.forward(*batch)     the scalar to minimise (its inputs are the batch's arrays)
    objective.backward()                 adds d loss / d W into every parameter's .grad
    objective.parameters()               the model's parameters (to build the optimizer over)

    objective                   batch                         loss
    LanguageModelObjective      (x, y)                        CE(model(x), y)                    GPT, §1.6
    Seq2SeqObjective            (src, tgt_in, tgt_out)        CE(model(src, tgt_in), tgt_out)    padding ignored
    MaskedLMObjective           (inputs, targets[, follows])  CE_masked (+ CE_next_sentence)     BERT
    FineTuningObjective         (ids, labels)                 L3 = L2 + lambda L1                GPT classifier

FineTuningObjective is the model family's own (models/gpt_classifier.py),
re-exported here so that every objective is found in one place; it already
has this interface.

Each `forward` keeps what its `backward` needs in the loss layers it owns, so
`backward` must follow the `forward` it differentiates.

Left out: label smoothing, loss weights per token, gradient accumulation over
several batches (call `forward` / `backward` several times before a step).
"""

from ..core.module import Module
from ..layers.loss import CrossEntropyLoss
from ..models.gpt_classifier import FineTuningObjective  # noqa: F401 (one of the objectives, see above)


class LanguageModelObjective(Module):
    """Next-token prediction: the mean cross-entropy of model(x) against the targets y.

    Args:
        model: maps x int (B, T) to logits (B, T, V), e.g. a GPT.
        loss: the loss layer (default CrossEntropyLoss(); pass CrossEntropyLoss(ignore_index=-1) when some
            targets are to be ignored).
    """

    def __init__(self, model, loss=None):
        self.model = model
        self.loss = CrossEntropyLoss() if loss is None else loss

    def forward(self, x, y):
        """x int (B, T), y int (B, T) -> the loss, a 0-d float."""
        return self.loss(self.model(x), y)

    def backward(self, grad=1.0):
        """dlogits = d loss / d logits, sent back through the model."""
        self.model.backward(self.loss.backward(grad))

    def __repr__(self):
        return f"LanguageModelObjective({self.model!r}, {self.loss!r})"


class Seq2SeqObjective(Module):
    """The encoder-decoder's teacher-forced cross-entropy; target positions holding `pad_id` are ignored.

    Args:
        model: maps (src int (B, S), tgt_in int (B, T)) to logits (B, T, V), e.g. a Seq2SeqTransformer.
        pad_id: the padding id of the targets.
    """

    def __init__(self, model, pad_id):
        self.model, self.pad_id = model, pad_id
        self.loss = CrossEntropyLoss(ignore_index=pad_id)

    def forward(self, src, tgt_in, tgt_out):
        """src int (B, S), tgt_in int (B, T) (BOS, y_1 ..), tgt_out int (B, T) (y_1 .., EOS) -> the loss."""
        return self.loss(self.model(src, tgt_in), tgt_out)

    def backward(self, grad=1.0):
        self.model.backward(self.loss.backward(grad))

    def __repr__(self):
        return f"Seq2SeqObjective({self.model!r}, pad_id={self.pad_id})"


class MaskedLMObjective(Module):
    """BERT's pre-training loss: cross-entropy on the masked positions, plus next-sentence prediction if asked.

        loss = CE(token_logits, targets)                              targets -1 where nothing was masked
             + CE(nsp_logits, follows)                                with nsp only

    Each term is taken as a Python float before they are added; the first, the masked tokens' mean NLL,
    is kept as `token_loss` (its exp is the masked-token perplexity, which the NSP term would distort).

    Args:
        model: a BertMLM; built with nsp=True it returns (token_logits (B, T, V), nsp_logits (B, 2)).
        nsp: whether the model has the next-sentence head (then the batch carries `follows`).
    """

    def __init__(self, model, nsp=False):
        if getattr(model, "nsp", nsp) != nsp:
            raise ValueError(f"MaskedLMObjective(nsp={nsp}) expected a model {'with' if nsp else 'without'} "
                             f"the next-sentence head, got {model!r}")
        self.model, self.nsp = model, nsp
        self.masked_loss, self.next_sentence_loss = CrossEntropyLoss(ignore_index=-1), CrossEntropyLoss()

    def forward(self, inputs, targets, follows=None):
        """inputs int (B, T) with [MASK]s, targets int (B, T) (-1: not masked), follows int (B,) -> the loss."""
        if self.nsp and follows is None:
            raise ValueError(f"{self!r}.forward expected the next-sentence labels `follows` (B,), got None")
        if not self.nsp and follows is not None:
            raise ValueError(f"{self!r}.forward got next-sentence labels `follows`, but it was built with nsp=False")
        out = self.model(inputs)
        token_logits, nsp_logits = out if self.nsp else (out, None)
        self.token_loss = float(self.masked_loss(token_logits, targets))
        if not self.nsp:
            return self.token_loss
        return self.token_loss + float(self.next_sentence_loss(nsp_logits, follows))

    def backward(self, grad=1.0):
        """Both terms' gradients, sent back through the model together (the NSP head's into [CLS])."""
        if not self.nsp:
            self.model.backward(self.masked_loss.backward(grad))
            return
        self.model.backward((self.masked_loss.backward(grad), self.next_sentence_loss.backward(grad)))

    def __repr__(self):
        return f"MaskedLMObjective({self.model!r}, nsp={self.nsp})"
