"""The masked language model: BERT's pre-training objective, and the character corpus it reads.

Devlin et al. (2019, §3.1); Kumar, *Language Modeling III: Transformers* (CSE 5525, Ohio State, 2025),
"BERT". `MaskedLMObjective` is the loss: cross-entropy on the masked positions (80/10/10 masking is
`models.bert.mask_tokens`), plus next-sentence prediction if asked. `CharCorpus` turns a text into examples

    [CLS] chunk_a [SEP] chunk_b [SEP]

of character ids after the special tokens [PAD], [MASK], [CLS], [SEP] (ids 0-3); chunk_b follows chunk_a in the
text half of the time and is a random chunk otherwise (the NSP label). The `mlm` command trains them.

Left out: WordPiece input (tokenizers/wordpiece.py has it; here a token is a character), whole-word masking.
"""

import numpy as np

from ..core.module import Module
from ..layers.loss import CrossEntropyLoss
from ..models.bert import mask_tokens
from ..tokenizers import CharTokenizer
from ..training.data import train_val_split
from ..training.loop import adam_warmup_loop

SPECIALS = ("[PAD]", "[MASK]", "[CLS]", "[SEP]")
PAD, MASK, CLS, SEP = range(4)


class MaskedLMObjective(Module):
    """BERT's pre-training loss: cross-entropy on the masked positions, plus next-sentence prediction if asked.

        loss = CE(token_logits, targets)                              targets -1 where nothing was masked
             + CE(nsp_logits, follows)                                with nsp only

    Each term is taken as a Python float before they are added; the first, the masked tokens' mean NLL,
    is kept as `token_loss` (its exp is the masked-token perplexity, which the NSP term would distort), and
    both in `parts`, which the training loop records and reports apart.

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
        self.parts = {"masked-token": self.token_loss}
        if not self.nsp:
            return self.token_loss
        self.parts["next-sentence"] = float(self.next_sentence_loss(nsp_logits, follows))
        return self.token_loss + self.parts["next-sentence"]

    def backward(self, grad=1.0):
        """Both terms' gradients, sent back through the model together (the NSP head's into [CLS])."""
        if not self.nsp:
            self.model.backward(self.masked_loss.backward(grad))
            return
        self.model.backward((self.masked_loss.backward(grad), self.next_sentence_loss.backward(grad)))

    def row_weights(self, inputs, targets, follows=None):
        """(B,) the masked positions each row counts, for data parallelism (training/distributed.py). With the
        next-sentence term, whose mean is over rows, no one weight per row makes the ranks' sum exact."""
        if self.nsp:
            raise ValueError(f"{self!r}: data parallelism is not offered with the next-sentence head: its two "
                             "terms are means over different counts (masked positions, rows)")
        return (np.asarray(targets) != -1).sum(axis=1)

    def __repr__(self):
        return f"MaskedLMObjective({self.model!r}, nsp={self.nsp})"


class CharCorpus:
    """Character ids of a text split 90/10 into train and held-out, and example batches drawn from either."""

    def __init__(self, text, chunk, rng):
        self.tokenizer = CharTokenizer.train(text)                 # character ids after the special tokens
        self.vocab_size = len(SPECIALS) + self.tokenizer.vocab_size
        ids = np.array(self.tokenizer.encode(text), dtype=np.int64) + len(SPECIALS)
        train, test = train_val_split(ids)
        self.parts = {"train": train, "test": test}
        self.chunk, self.rng = chunk, rng

    def check_length(self, where):
        """Raise ValueError naming `where` unless both parts hold one example: 2 chunks and a token more."""
        needed = 2 * self.chunk + 1
        short = {part: len(data) for part, data in self.parts.items() if len(data) < needed}
        if short:
            part, length = next(iter(short.items()))
            share = "the first 90%" if part == "train" else "the last 10%"
            raise ValueError(f"{where} is too short for --chunk {self.chunk}: its {part} part ({share} of the text) "
                             f"holds {length} characters, and one example needs {needed} (2 chunks + 1); give a "
                             f"text of about {10 * needed + 10} characters or more, or a smaller --chunk")

    def batch(self, size, part="train"):
        """ids (size, 2 chunk + 3) and NSP labels (size,): 1 when chunk_b really follows chunk_a."""
        data, n = self.parts[part], self.chunk
        starts = self.rng.integers(0, len(data) - 2 * n, size=size)
        follows = self.rng.random(size) < 0.5
        b_starts = np.where(follows, starts + n, self.rng.integers(0, len(data) - n, size=size))
        window = np.arange(n)
        first, second = data[starts[:, None] + window], data[b_starts[:, None] + window]
        cls, sep = np.full((size, 1), CLS), np.full((size, 1), SEP)
        return np.concatenate([cls, first, sep, second, sep], axis=1), follows.astype(np.int64)

    def show(self, ids):
        return "".join("_" if t == MASK else self.tokenizer.chars[t - len(SPECIALS)] if t >= len(SPECIALS) else "|"
                       for t in ids).replace("\n", "⏎")


def masked_lm_loop(model, corpus, rng, steps, batch_size=64, lr=1e-3, nsp=False, warmup=50, **loop_options):
    """The one training loop set up for BERT's pre-training on `corpus` (the `mlm` command, notebook 09).

    Each step draws `batch_size` examples, masks them 80/10/10 (`mask_tokens`) and takes a step of
    `MaskedLMObjective`; both draws come from `rng`, which the loop's checkpoints keep.

    Args:
        model: a BertMLM (with the next-sentence head if `nsp`).
        corpus: a CharCorpus drawing from `rng`.
        warmup: steps of the rate's linear warm-up (`adam_warmup_loop`).
        loop_options: TrainingLoop's (eval_interval, out_dir, meta, log, ...).
    """
    objective = MaskedLMObjective(model, nsp=nsp)

    def masked_batch():
        ids, follows = corpus.batch(batch_size)
        inputs, targets, _ = mask_tokens(ids, rng, MASK, len(SPECIALS), corpus.vocab_size)
        return (inputs, targets, follows) if nsp else (inputs, targets)

    return adam_warmup_loop(objective, masked_batch, steps, lr, warmup, generators={"data": rng}, name="mlm",
                            **loop_options)
