"""Training: the loop's machinery, the same for every objective: step, loop, optimizers, schedules, checkpoints.

Read in this order (each module imports only those above it and the rooms below training: core,
layers, models, generation):

    optim/          SGD, Adam, AdamW as the papers write them (fast.py: over one flat buffer); clipping
    schedules.py    every learning-rate schedule: noam, scaled noam, cosine, linear
    data.py         the corpus, the train/validation split, random windows
    metrics.py      perplexity: exp of the mean negative log-likelihood per predicted token
    config.py       TrainConfig and the builders of the GPT and its AdamW (Adam for the encoder family)
    checkpoint.py   saving and loading weights, optimizer state and generators; what a checkpoint must hold
    resuming.py     what a resumed run must keep from its checkpoint and what the options given again may change
    phases.py       where a step's time goes: laps around the step and in the hook, off unless asked
    step.py         train_step: zero_grad, forward, backward, clip, update; the same for every objective
    deadlines.py    how long a rank waits for the others; the one line that ends a job when one is gone
    distributed.py  data parallelism on MPI ranks, a hook of train_step: replicated (DDP) or sharded (ZeRO-1)
    harness.py      the loop's machinery: its options, progress, evaluation lines, checkpoints, Ctrl-C, the NaN stop
    loop.py         the one training loop: the step on the next batch, and fit, which repeats it and evaluates

What is trained (language model, seq2seq, masked LM, fine-tuning, ranking, PPO, denoising) is in objectives/;
the generated tasks in tasks/.
"""
