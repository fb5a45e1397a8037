"""Objectives: what the course trains a Transformer to do, each an objective for the one training loop and its run.

An objective joins a model to its loss. Every one offers the same three things, so that one `train_step`
(training/step.py) trains them all:

    loss = objective.forward(*batch)     the scalar to minimise (its inputs are the batch's arrays)
    objective.backward()                 adds d loss / d W into every parameter's .grad
    objective.parameters()               the model's parameters (to build the optimizer over)

    module              objective                 batch                          loss
    language_model.py   LanguageModelObjective    (x, y)                         CE(model(x), y)            GPT
    seq2seq.py          Seq2SeqObjective          (src, tgt_in, tgt_out)         CE, padding ignored        §1.4
    masked_lm.py        MaskedLMObjective         (inputs, targets[, follows])   CE_masked (+ CE_NSP)       BERT
    finetune.py         FineTuningObjective       (ids, labels)                  L3 = L2 + lambda L1        GPT-1
    ranking.py          RankingObjective          (chosen, rejected)             -log sigma(r_c - r_r)      reward model
    ppo.py              PPOObjective              a Rollout's arrays             L_clip + c L_V             InstructGPT

and beside them what turns data into their batches: finetune_inputs.py (GPT's input transformations),
denoising.py (T5's span corruption, BART's noising), in_context.py (the in-context run and its induction
heads), instruct.py (InstructGPT's three steps). The generated tasks they train on are in tasks/.

Each `forward` keeps what its `backward` needs in the loss layers it owns, so `backward` must follow the
`forward` it differentiates. Left out: label smoothing, loss weights per token.
"""
