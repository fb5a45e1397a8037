"""Run by tests/test_distributed.py under `mpiexec -n N python tests/_distributed_run.py '<json>'`.

Trains the compatibility record's run (tests/test_compatibility.py, part c: d_model 32, 2 layers, block 16,
batch 8, the stored corpus) with `TrainConfig(workers=N, **settings)`, optionally saving to and resuming
from a directory, and prints from rank 0 one JSON line: the losses, the evaluations, the number of ranks,
whether every rank ends with the very same weights (their SHA-256, all-gathered), the bytes of optimizer state
each rank holds at the end (all-gathered) and the bytes of the weights.

The JSON argument: {"settings": TrainConfig fields, "out": a directory or null, "resume": bool,
"steps": fit's max_steps or null, "announce": print "evaluated at step N" after each evaluation,
"fail": [rank, step]: that rank's loss raises RuntimeError at that step, "phases": record the phase timer
(training/phases.py) during fit and add every rank's [phase names, steps, whether they add up to the steps]}.
Every rank's number of window batches evaluated (the loss computed with the model in evaluation mode) is
printed too ("evaluated").
"""

import contextlib
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from minitransformer.objectives.language_model import Trainer
from minitransformer.tokenizers import CharTokenizer
from minitransformer.training.config import TrainConfig
from minitransformer.training.data import train_val_split
from minitransformer.training.distributed import mpi_world
from minitransformer.training.phases import recording

CORPUS = Path(__file__).parent / "fixtures" / "compat_corpus.txt"
RUN = dict(block_size=16, batch_size=8, n_layers=2, n_heads=2, d_model=32, d_ff=128, max_steps=20, warmup_steps=2,
           lr_decay_steps=20, eval_batches=2)


def fail_at(trainer, step):
    """Make this rank's loss raise RuntimeError at the 1-based `step`."""
    forward = trainer.loss_fn.forward

    def failing(*args):
        if trainer.step + 1 >= step:
            raise RuntimeError("an injected failure")
        return forward(*args)
    trainer.loss_fn.forward = failing


def count_evaluated(trainer):
    """A list whose length counts the losses this rank computes with the model in evaluation mode."""
    forward, evaluated = trainer.loss_fn.forward, []

    def counting(*args):
        if not trainer.model.training:
            evaluated.append(trainer.step)
        return forward(*args)
    trainer.loss_fn.forward = counting
    return evaluated


def announce(trainer, losses):
    print(f"evaluated at step {trainer.step}", flush=True)


def main(request):
    rank, size = mpi_world()
    text = CORPUS.read_text(encoding="utf-8")
    tokenizer = CharTokenizer.train(text)
    train_data, val_data = train_val_split(np.array(tokenizer.encode(text), dtype=np.int64))
    config = TrainConfig(**{**RUN, **request.get("settings", {}), "workers": size})
    out = request.get("out") if rank == 0 else None
    if request.get("resume"):
        trainer = Trainer.resume(request["out"], train_data, val_data, config=config, out_dir=out, progress=False)
    else:
        trainer = Trainer(config, train_data, val_data, tokenizer.vocab_size, out_dir=out, progress=False)
    if request.get("fail") and request["fail"][0] == rank:              # e.g. [1, 3]: rank 1 raises at step 3
        fail_at(trainer, request["fail"][1])
    evaluated = count_evaluated(trainer)
    with recording() if request.get("phases") else contextlib.nullcontext() as laps:
        trainer.fit(max_steps=request.get("steps"), on_eval=announce if request.get("announce") else None)
    phases = None if laps is None else [list(laps.wall), laps.table("") and laps.steps,
                                        bool(np.isclose(sum(laps.wall.values()), laps.step_wall, rtol=1e-9))]
    digest = hashlib.sha256(trainer.optimizer.data.tobytes()).hexdigest()
    digests = trainer.parallel.comm.allgather(digest) if trainer.parallel is not None else [digest]
    held = trainer.optimizer.state_nbytes()
    state_bytes = trainer.parallel.comm.allgather(held) if trainer.parallel is not None else [held]
    every_phases = trainer.parallel.comm.allgather(phases) if trainer.parallel is not None else [phases]
    every_evaluated = trainer.parallel.comm.allgather(len(evaluated)) if trainer.parallel else [len(evaluated)]
    if rank == 0:
        print(json.dumps({"loss": trainer.history["loss"], "eval": trainer.history["eval"], "ranks": size,
                          "same_weights": len(set(digests)) == 1, "state_bytes": state_bytes,
                          "weight_bytes": trainer.optimizer.data.nbytes, "phases": every_phases,
                          "evaluated": every_evaluated}))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
