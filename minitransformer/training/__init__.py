"""Training: one step for every objective, schedules in one place, the GPT trainer, data parallelism, checkpoints.

Read in this order (each module imports only those above it and the floors below training: core,
layers, models, generation):

    optim/          SGD, Adam, AdamW as the papers write them (fast.py: over one flat buffer); clipping
    schedules.py    every learning-rate schedule: noam, scaled noam, cosine, linear
    data.py         the corpus, the train/validation split, random windows
    tasks.py        generated tasks: string reversal, the majority task
    objectives.py   what is minimised: language model, seq2seq, masked LM (+ NSP), fine-tuning
    metrics.py      perplexity: exp of the mean negative log-likelihood per predicted token
    step.py         train_step: zero_grad, forward, backward, clip, update; the same for every objective
    config.py       TrainConfig and the builders of the GPT and its AdamW (Adam for the encoder family)
    checkpoint.py   saving and loading weights, optimizer state and generators
    distributed.py  data parallelism on MPI ranks: replicated (DDP's all-reduce) or sharded (ZeRO-1)
    trainer.py      the GPT trainer: the loop, evaluation, the loss curve, resuming
    encdec.py       the encoder-decoder's training run and its evaluation by decoding
    denoising.py    T5's span corruption and BART's noising functions as data transforms (DenoisingTask)
"""
