"""One `train_step` for every objective (training/step.py, objectives/).

Each objective must give the loss and the gradients of the hand-written loop it replaced (written out
again here, as those loops had it), and `train_step` the very weights those loops reached, bit for bit.
"""

import numpy as np
import pytest
from test_checkpoint import tiny_config, tiny_trainer

from minitransformer.layers.loss import CrossEntropyLoss
from minitransformer.models.bert import BertMLM, mask_tokens
from minitransformer.models.gpt_classifier import GPTClassifier, next_token_targets
from minitransformer.models.seq2seq import Seq2SeqTransformer
from minitransformer.objectives.finetune import FineTuningObjective
from minitransformer.objectives.language_model import LanguageModelObjective
from minitransformer.objectives.masked_lm import MaskedLMObjective
from minitransformer.objectives.seq2seq import Seq2SeqObjective
from minitransformer.tasks.majority import majority_task
from minitransformer.tasks.reverse import PAD, ReverseTask
from minitransformer.training.config import build_model, transformer_adam
from minitransformer.training.optim import clip_factor, clip_grad_norm
from minitransformer.training.optim.fast import FastAdam
from minitransformer.training.step import train_step

V, B, T, STEPS = 7, 4, 8, 3


def tiny_gpt(seed=0):
    return build_model(tiny_config(dtype="float64", dropout=0.0, seed=seed), V)     # (B, T) -> (B, T, V), T <= 8


# ---------------------------------------------------------------- each case: model, objective, batches, the old loop
# `loop_loss(model, batch)`: the forward and backward that the loop replaced by train_step wrote inline.

def trainer_loop_loss(model, batch):                        # Trainer.step_on_next_batch, one process
    x, y = batch
    loss_fn = CrossEntropyLoss()
    loss = loss_fn(model(x), y)
    model.backward(loss_fn.backward())
    return float(loss)


def pretraining_loop_loss(model, batch):                    # commands/finetune.py's NextToken (L1 alone)
    ids, _ = batch
    loss_fn = CrossEntropyLoss(ignore_index=-1)
    loss = loss_fn.forward(model.forward(ids), next_token_targets(ids))
    model.backward(loss_fn.backward(1.0))
    return float(loss)


def seq2seq_loop_loss(model, batch):                        # objectives/seq2seq.py's train_seq2seq
    src, tgt_in, tgt_out = batch
    loss_fn = CrossEntropyLoss(ignore_index=PAD)
    loss = float(loss_fn(model(src, tgt_in), tgt_out))
    model.backward(loss_fn.backward())
    return loss


def mlm_loop_loss(model, batch):                            # commands/mlm.py, with or without --nsp
    mlm_loss, nsp_loss = CrossEntropyLoss(ignore_index=-1), CrossEntropyLoss()
    out = model(batch[0])
    if model.nsp:
        loss = float(mlm_loss(out[0], batch[1])) + float(nsp_loss(out[1], batch[2]))
        model.backward((mlm_loss.backward(), nsp_loss.backward()))
    else:
        loss = float(mlm_loss(out, batch[1]))
        model.backward(mlm_loss.backward())
    return loss


def fine_tuning_loop_loss(model, batch, lm_weight=0.5):     # L3 = L2 + lambda L1, by hand
    ids, labels = batch
    lm_logits, class_logits = model(ids)
    classification, language_model = CrossEntropyLoss(), CrossEntropyLoss(ignore_index=-1)
    l2 = classification(class_logits, labels)
    l1 = language_model(lm_logits, next_token_targets(ids))
    model.backward((language_model.backward(lm_weight), classification.backward(1.0)))
    return float(l2 + lm_weight * l1)


def language_model_case():
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T))) for _ in range(STEPS)]
    return tiny_gpt, LanguageModelObjective, batches, trainer_loop_loss


def pretraining_case():
    rng = np.random.default_rng(1)
    batches = []
    for _ in range(STEPS):
        ids = majority_task(B, length=T, rng=rng)[0]
        batches.append((ids, next_token_targets(ids)))
    return tiny_gpt, lambda gpt: LanguageModelObjective(gpt, CrossEntropyLoss(ignore_index=-1)), batches, \
        pretraining_loop_loss


def seq2seq_case():
    task = ReverseTask(n_symbols=4, min_len=2, max_len=3, n_test=10, rng=0)
    batches = [task.train_batch(B) for _ in range(STEPS)]

    def model(seed=0):
        return Seq2SeqTransformer(task.vocab_size, task.vocab_size, 16, 2, 1, 32, 5, pad_id=PAD, share_embeddings=True,
                                  tie_output=True, dtype=np.float64, rng=seed)
    return model, lambda model: Seq2SeqObjective(model, PAD), batches, seq2seq_loop_loss


def masked_lm_case(nsp):
    rng = np.random.default_rng(2)
    batches = []
    for _ in range(STEPS):
        inputs, targets, _ = mask_tokens(rng.integers(4, 12, (B, 10)), rng, 1, 4, 12, p=0.3)
        batches.append((inputs, targets, rng.integers(0, 2, B)) if nsp else (inputs, targets))

    def model(seed=0):
        return BertMLM(12, 16, 2, 1, 32, 10, pad_id=0, nsp=nsp, dtype=np.float64, rng=seed)
    return model, lambda model: MaskedLMObjective(model, nsp=nsp), batches, mlm_loop_loss


def fine_tuning_case():
    rng = np.random.default_rng(3)
    batches = [majority_task(B, length=T, rng=rng) for _ in range(STEPS)]

    def model(seed=0):
        return GPTClassifier(tiny_gpt(seed), 2, dtype=np.float64, rng=seed + 1)
    return model, lambda model: FineTuningObjective(model, lm_weight=0.5), batches, fine_tuning_loop_loss


CASES = {"language model": language_model_case, "next token, ignore -1": pretraining_case, "seq2seq": seq2seq_case,
         "masked LM": lambda: masked_lm_case(False), "masked LM + NSP": lambda: masked_lm_case(True),
         "fine-tuning": fine_tuning_case}


@pytest.mark.parametrize("case", CASES)
def test_an_objective_gives_the_loss_and_gradients_of_the_loop_it_replaces(case):
    make_model, make_objective, batches, loop_loss = CASES[case]()
    ours, theirs = make_model(), make_model()
    objective = make_objective(ours)
    assert [id(p) for p in objective.parameters()] == [id(p) for p in ours.parameters()]
    loss = objective.forward(*batches[0])
    objective.backward()
    assert float(loss) == loop_loss(theirs, batches[0])                                # bit for bit
    for (name, mine), (_, expected) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert np.array_equal(mine.grad, expected.grad), name
    assert any(p.grad.any() for p in ours.parameters())


@pytest.mark.parametrize("form", ["plain", "fast"])
@pytest.mark.parametrize("clip", ["on", "off"])
@pytest.mark.parametrize("case", CASES)
def test_train_step_reaches_the_weights_of_the_loop_it_replaces(case, clip, form):
    """plain: clip_grad_norm on every .grad, then step (the loops of seq2seq, mlm and finetune); fast: the
    fast Adam keeps the clipping factor and folds it into its step (the trainer's); off: grad_clip 0."""
    make_model, make_objective, batches, loop_loss = CASES[case]()
    ours, theirs = make_model(), make_model()
    objective = make_objective(ours)
    make = transformer_adam if form == "plain" else (lambda params: FastAdam(list(params), betas=(0.9, 0.98), eps=1e-9))
    mine, their_optimizer = make(objective.parameters()), make(theirs.parameters())
    grad_clip = 0.0 if clip == "off" else 0.05                  # 0.05: every step clips
    for step in range(STEPS):
        lr = 1e-3 * (step + 1)
        loss = train_step(objective, mine, batches[step], lr, grad_clip)
        their_optimizer.lr = lr
        their_optimizer.zero_grad()
        assert loss == loop_loss(theirs, batches[step])
        if clip == "off":
            norm = np.inf
        elif form == "plain":
            norm = clip_grad_norm(their_optimizer.parameters(), grad_clip)
        else:
            norm, their_optimizer.grad_scale = clip_factor(their_optimizer.gradients(), grad_clip)
        their_optimizer.step()
        assert norm > grad_clip and mine.lr == lr
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert np.array_equal(a.data, b.data), name


def test_train_step_refuses_bad_arguments_naming_them():
    model = tiny_gpt()
    objective, optimizer = LanguageModelObjective(model), transformer_adam(model.parameters())
    x = np.zeros((2, 4), dtype=int)
    for lr, grad_clip, option in [(-1e-3, 1.0, "lr"), (float("nan"), 1.0, "lr"), ("1e-3", 1.0, "lr"),
                                  (1e-3, -1.0, "grad_clip"), (1e-3, float("inf"), "grad_clip")]:
        with pytest.raises(ValueError, match=rf"train_step expected {option} to be a finite number >= 0.*got"):
            train_step(objective, optimizer, (x, x), lr, grad_clip)
    with pytest.raises(TypeError, match=r"train_step expected batch as a tuple .* got ndarray"):
        train_step(objective, optimizer, x, 1e-3, 1.0)
    with pytest.raises(TypeError, match=r"train_step expected an objective with forward\(\*batch\) and backward"):
        train_step(model.forward, optimizer, (x, x), 1e-3, 1.0)
    with pytest.raises(TypeError, match=r"train_step expected an objective with forward\(\*batch\) and backward"):
        train_step(type("ForwardOnly", (), {"forward": lambda self, *batch: 0.0})(), optimizer, (x, x), 1e-3, 1.0)
    assert not any(p.grad.any() for p in model.parameters())                       # nothing ran
    with pytest.raises(ValueError, match="train_step expected grad_clip"):
        tiny_trainer(grad_clip=-1.0).step_on_next_batch()


def test_the_masked_lm_objective_refuses_a_model_or_batch_without_the_next_sentence_head():
    with pytest.raises(ValueError, match=r"MaskedLMObjective\(nsp=True\) expected a model with the next-sentence"):
        MaskedLMObjective(BertMLM(12, 16, 2, 1, 32, 10, nsp=False, rng=0), nsp=True)
    objective = MaskedLMObjective(BertMLM(12, 16, 2, 1, 32, 10, nsp=True, rng=0), nsp=True)
    ids = np.full((2, 10), 5)
    with pytest.raises(ValueError, match=r"expected the next-sentence labels `follows` \(B,\), got None"):
        objective.forward(ids, ids)


def test_the_steps_docstring_names_every_objective_that_trains_with_it():
    """Every module of objectives/ that builds a training loop (so steps with train_step) is named in step.py's
    list of its users, and every module the list names builds one."""
    import ast
    import re
    from pathlib import Path

    import minitransformer.training.step as step_module

    package = Path(step_module.__file__).resolve().parent.parent
    building = set()
    for path in sorted((package / "objectives").glob("*.py")):
        names = {node.id for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.Name)}
        if names & {"TrainingLoop", "adam_warmup_loop"}:                  # a loop built, or subclassed (Trainer)
            building.add(f"objectives/{path.name}")
    named = set(re.findall(r"objectives/\w+\.py", step_module.__doc__))
    assert "objectives/language_model.py" in building and "objectives/ppo.py" in building
    assert building == named, (f"step.py's docstring names {sorted(named - building)} that build no loop and "
                               f"leaves out {sorted(building - named)}")


def test_a_batch_may_be_a_list():
    model, twin = tiny_gpt(), tiny_gpt()
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T))
    losses = [train_step(LanguageModelObjective(gpt), transformer_adam(gpt.parameters()), batch, 1e-3, 0.0)
              for gpt, batch in ((model, (x, y)), (twin, [x, y]))]
    assert losses[0] == losses[1]
    for (name, a), (_, b) in zip(model.named_parameters(), twin.named_parameters()):
        assert np.array_equal(a.data, b.data), name


class QuarterOfTheBatch:
    """Stands in for DataParallel on a rank holding the batch's first row of 4 (share 1/4, a power of two: scaling by
    it is exact): keeps the loss and clipping norm it is handed and the gradients at that moment, then clips and
    updates as one process would."""

    def __init__(self, optimizer):
        self.optimizer, self.handed = optimizer, None

    def rows_and_share(self, objective, batch):
        return tuple(item[:1] for item in batch), 0.25

    def reduce_clip_update(self, loss, grad_clip):
        self.handed = loss, grad_clip, [p.grad.copy() for p in self.optimizer.parameters()]
        clip_grad_norm(self.optimizer.parameters(), grad_clip)
        self.optimizer.step()
        return loss


def test_on_ranks_a_step_hands_the_hook_its_rows_share_of_loss_and_gradient_and_the_clipping_norm():
    """Under the hook, the forward and backward passes run on this rank's rows and are scaled by their share
    (N_k / N) L_k and (N_k / N) dL_k/dW; the hook gets the clipping norm given, and what it returns is the step's
    loss. Expected: the old loop on the same row, scaled by hand."""
    ours, theirs = tiny_gpt(), tiny_gpt()
    rng = np.random.default_rng(4)
    x, y = rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T))
    optimizer, their_optimizer = transformer_adam(ours.parameters()), transformer_adam(theirs.parameters())
    hook = QuarterOfTheBatch(optimizer)
    loss = train_step(LanguageModelObjective(ours), optimizer, (x, y), 1e-3, 0.05, parallel=hook)
    their_optimizer.lr = 1e-3
    their_optimizer.zero_grad()
    expected_loss = 0.25 * trainer_loop_loss(theirs, (x[:1], y[:1]))
    handed_loss, handed_clip, handed_grads = hook.handed
    assert loss == handed_loss == expected_loss and handed_clip == 0.05
    for (name, _), grad, their in zip(theirs.named_parameters(), handed_grads, theirs.parameters()):
        assert np.array_equal(grad, 0.25 * their.grad), name
    for their in theirs.parameters():
        their.grad *= 0.25
    assert clip_grad_norm(their_optimizer.parameters(), 0.05) > 0.05                      # the step clipped
    their_optimizer.step()
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert np.array_equal(a.data, b.data), name
