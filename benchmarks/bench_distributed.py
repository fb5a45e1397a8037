"""Benchmark: the data-parallel step on 2 MPI ranks against one process and PyTorch eager, in one run.

    mpiexec -n 2 python benchmarks/bench_distributed.py --text ../shared/data/tinyshakespeare.txt

nanoGPT's Shakespeare-char CPU configuration (TrainConfig's defaults, float32, fast kernels), as
bench_train.py trains it. Rounds interleave five contenders, each in turns of BLOCK steps (the first
untimed) after an IDLE_GAP, so that all see the same machine load:
* 2 ranks, replicated (DDP) and sharded (ZeRO-1): every rank runs the loop's step (`step_on_next_batch`, as
  `train` runs it) with 1 BLAS thread; rank 0 times it;
* 1 rank: the same loop's step in rank 0 alone with --threads BLAS threads (default 2), while rank 1 sleeps;
* the floor: every matrix product of a rank's step (bench_train.py's replay of a share of 6 windows: forward
  and backward, on operands made beforehand), run by every rank at once with 1 BLAS thread, nothing else: what
  a rank's step would take if everything but its products were free;
* PyTorch 2.13 eager's whole step (bench_train.py's twin: the batch drawn, forward, backward, clipping,
  AdamW) with --threads threads, in rank 0, while rank 1 sleeps.
It prints the median ms per step of each and their ratios to PyTorch's; where each rank's step goes, phase
by phase (training/phases.py: batch, forward, backward, the control message, the gradient's collective,
clip, optimizer, the finite check), wall and CPU ms; then the alpha-beta model of `alpha_beta_table`
(bytes per collective per step, and the step time expected on 4, 16 and 64 machines).
`train` itself, as users run it, is timed by bench_train_command.py.
torch is optional; without it the PyTorch column is left out.

    for n in 1 2 3; do mpiexec -n $n python benchmarks/bench_distributed.py --memory sharded; done

measures memory instead, one mode per process (a peak is the process's own): the Trainer of that mode
(one process with -n 1) trains MEMORY_STEPS steps, then rank 0 gathers the moments and builds the
checkpoint's state as a save does. Per rank it prints the bytes of optimizer state held while training
(deterministic: Adam's m and v, whole or this rank's shard) and the peak resident memory
(resource.getrusage's ru_maxrss) after the steps and after the checkpoint's gather.
"""

import argparse
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _machine import peak_mb  # noqa: E402
from _threads import threads_from_argv  # noqa: E402

threads_from_argv(sys.argv, default=2)                      # the 1-rank turns use them; the 2-rank turns limit to 1

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench_train import matmul_products, product_replay  # noqa: E402
from mpi4py import MPI  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from minitransformer.objectives.language_model import LanguageModelObjective, Trainer  # noqa: E402
from minitransformer.tokenizers import CharTokenizer  # noqa: E402
from minitransformer.training.config import TrainConfig, build_model, build_optimizer  # noqa: E402
from minitransformer.training.data import get_batch, train_val_split  # noqa: E402
from minitransformer.training.loop import LoopOptions, TrainingLoop  # noqa: E402
from minitransformer.training.phases import recording  # noqa: E402

IDLE_GAP, BLOCK = 0.15, 5               # as bench_train.py: idle BLAS threads stop spinning; 4 timed steps a turn
ALPHA = 20e-6                           # seconds: one message's latency on a 10 Gb/s Ethernet (TCP) network
BETA = 10e9 / 8                         # bytes per second: 10 Gb/s
STEP_MS = 50.0                          # one machine's step (2 cores) on its 12 windows, measured here
MEMORY_STEPS = 5                        # --memory: steps trained before the peaks are read


def alpha_beta_table(weights, machines=(4, 16, 64), step_ms=STEP_MS, alpha=ALPHA, beta=BETA):
    """Rows (N, mode, bytes per collective per rank, communication ms, step ms) of the alpha-beta model.

    Each of N machines keeps 12 windows per step (the global batch grows with N), so its compute stays
    step_ms; the collectives add, with n = 4 * weights bytes (float32) and the bandwidth-optimal
    algorithms: all-reduce 2 (N-1) alpha + 2 (N-1)/N n / beta; reduce-scatter and all-gather each
    (N-1) alpha + (N-1)/N n / beta; the step's first message (24 bytes) and the sharded norm's (8 bytes),
    all-reduces by recursive doubling, 2 log2 N alpha each. Sharded, the AdamW update (2 ms here) shrinks to
    2/N ms.
    """
    n, rows = 4 * weights, []
    for N in machines:
        control = 2 * np.log2(N) * alpha
        ring = (N - 1) / N * n
        replicated = control + 2 * (N - 1) * alpha + 2 * ring / beta
        sharded = control + 2 * ((N - 1) * alpha + ring / beta) + 2 * np.log2(N) * alpha
        rows.append((N, "replicated", f"Allreduce {2 * ring / 1e6:.2f} MB", replicated * 1e3,
                     step_ms + replicated * 1e3))
        rows.append((N, "sharded", f"Reduce_scatter + Allgatherv {ring / 1e6:.2f} MB each", sharded * 1e3,
                     step_ms - 2.0 + 2.0 / N + sharded * 1e3))
    return rows


def one_process_loop(config, train_data, V):
    """The loop a one-process Trainer runs (its model, optimizer, batches and schedule), built apart since a
    Trainer in an MPI job of 2 ranks must use both."""
    model = build_model(config, V)
    rng = np.random.default_rng([config.seed, 1])
    return TrainingLoop(LanguageModelObjective(model), build_optimizer(model, config),
                        lambda: get_batch(train_data, config.block_size, config.batch_size, rng),
                        config.learning_rate, LoopOptions(grad_clip=config.grad_clip, max_steps=config.max_steps,
                                                          progress=False))


def sleep_until_all_arrive(comm):
    """A barrier whose waiting rank sleeps between looks (MPICH's own Barrier spins, taking a core)."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(1e-3)


def contenders(config, train_data, V, comm, threads):
    """{name: (ranks it runs on, BLAS threads, step function)}, for each contender that this machine has.

    Ours are the training loop's step (`step_on_next_batch`: the batch, train_step, the finite check and
    the history), as `train` runs it."""
    made = {}
    for mode in ("replicated", "sharded"):
        trainer = Trainer(TrainConfig(**{**vars(config), "workers": comm.Get_size(), "parallel": mode}),
                          train_data, train_data, V, progress=False)
        made[f"{comm.Get_size()} ranks, {mode}"] = (comm.Get_size(), 1, trainer.step_on_next_batch)
    made["1 rank"] = (1, threads, one_process_loop(config, train_data, V).step_on_next_batch
                      if comm.Get_rank() == 0 else None)
    share = dataclasses.replace(config, batch_size=-(-config.batch_size // comm.Get_size()))   # the largest share
    made[f"{comm.Get_size()} ranks, matrix products alone"] = (
        comm.Get_size(), 1, product_replay(matmul_products(share, V)))   # the floor: a rank's products, nothing else
    try:
        import torch
        from bench_train import torch_model, torch_step
    except ImportError:
        if comm.Get_rank() == 0:
            print("torch not installed: no PyTorch comparison (pip install torch==2.13.0 to add it)")
        return made
    torch.set_num_threads(threads)
    rng = np.random.default_rng([config.seed, 1])
    model, optimizer = torch_model(config, V)
    made[f"PyTorch {torch.__version__} eager ({threads} threads)"] = (      # a whole step: the batch drawn too
        1, threads, lambda: torch_step(model, optimizer, config, *get_batch(train_data, config.block_size,
                                                                             config.batch_size, rng), config.lr))
    return made


def timed_rounds(made, rounds, comm):
    """(rank 0's wall seconds of each timed step, per contender; this rank's phases of them, per contender:
    {name: (wall {phase: s}, CPU {phase: s}, steps)}); ranks a contender does not use sleep."""
    times, phases = {name: [] for name in made}, {}
    for _ in range(rounds):
        for name, (ranks, threads, step) in made.items():
            sleep_until_all_arrive(comm)
            time.sleep(IDLE_GAP)
            if comm.Get_rank() < ranks:
                with threadpool_limits(limits=threads, user_api="blas"):
                    step()                                          # untimed: the turn's first step
                    with recording() as laps:
                        for _ in range(BLOCK - 1):
                            started = time.perf_counter()
                            step()
                            times[name].append(time.perf_counter() - started)
                    add_phases(phases, name, laps)
    return times, phases


def add_phases(phases, name, laps):
    """Add a turn's laps (phases.py) to `phases[name]` = (wall {phase: s}, CPU {phase: s}, steps)."""
    laps.table("")                                                  # counts the last step
    wall, cpu, steps = phases.setdefault(name, ({}, {}, [0]))
    for phase in laps.wall:
        wall[phase] = wall.get(phase, 0.0) + laps.wall[phase]
        cpu[phase] = cpu.get(phase, 0.0) + laps.cpu[phase]
    steps[0] += laps.steps


def print_phases(gathered):
    """Per contender and rank: each phase's mean wall / CPU ms per step (`gathered`: every rank's phases)."""
    print("\nwhere each rank's step goes (mean wall ms / CPU ms of the rank per timed step; phases.py):")
    for name in gathered[0]:
        ranks = [(rank, phases[name]) for rank, phases in enumerate(gathered) if phases.get(name, [0, 0, [0]])[2][0]]
        if not ranks:                                               # PyTorch: no laps
            continue
        print(f"  {name}")
        names = list(ranks[0][1][0])
        print("    " + f"{'rank':<6}" + "".join(f"{phase:>16}" for phase in names) + f"{'step':>16}")
        for rank, (wall, cpu, steps) in ranks:
            cells = [(wall[phase], cpu[phase]) for phase in names] + [(sum(wall.values()), sum(cpu.values()))]
            print("    " + f"{rank:<6}" + "".join(f"{1e3 * w / steps[0]:7.2f} /{1e3 * c / steps[0]:7.2f}"
                                                 for w, c in cells))


def memory_per_rank(config, train_data, V, comm, mode):
    """Rank 0: [(rank, optimizer-state bytes, peak MiB after MEMORY_STEPS steps, after the checkpoint's gather)]."""
    trainer = Trainer(TrainConfig(**{**vars(config), "workers": comm.Get_size(), "parallel": mode}),
                      train_data, train_data, V, progress=False)
    for _ in range(MEMORY_STEPS):
        trainer.step_on_next_batch()
    held, trained = trainer.optimizer.state_nbytes(), peak_mb()
    if trainer.parallel is not None:
        trainer.parallel.gather_state()
    if comm.Get_rank() == 0:
        trainer.optimizer.state_dict()                      # the arrays a checkpoint writes, as a save builds them
    rows = comm.gather((comm.Get_rank(), held, trained, peak_mb()), root=0)
    return None if rows is None else sorted(rows)


def print_memory(rows, mode, size, weights):
    print(f"{size} rank(s), {mode if size > 1 else 'one process'}: {weights:,} float32 weights, "
          f"Adam's whole m and v {8 * weights / 1e6:.2f} MB")
    for rank, held, trained, saved in rows:
        print(f"  rank {rank}: optimizer state {held:>10,} bytes ({held / (8 * weights):.3f} of the whole), "
              f"peak {trained:6.1f} MiB after {MEMORY_STEPS} steps, {saved:6.1f} MiB after the checkpoint's gather")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default="../shared/data/tinyshakespeare.txt", help="training text (read by path)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds of turns (each contender: 4 timed steps)")
    parser.add_argument("--threads", type=int, default=2,
                        help="BLAS and PyTorch threads of the one-process contenders (the ranks use 1 each)")
    parser.add_argument("--memory", choices=("replicated", "sharded"),
                        help="measure optimizer-state bytes and peak memory per rank in this mode instead of time")
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    with open(args.text, encoding="utf-8") as file:
        text = file.read()
    tokenizer = CharTokenizer.train(text)
    train_data, _ = train_val_split(np.array(tokenizer.encode(text), dtype=np.int64))
    config = TrainConfig()
    if args.memory:
        rows = memory_per_rank(config, train_data, tokenizer.vocab_size, comm, args.memory)
        if rows is not None:
            weights = sum(param.size for param in build_model(config, tokenizer.vocab_size).parameters())
            print_memory(rows, args.memory, comm.Get_size(), weights)
        return 0
    made = contenders(config, train_data, tokenizer.vocab_size, comm, args.threads)
    timed_rounds(made, 1, comm)                                          # warm up
    times, phases = timed_rounds(made, args.rounds, comm)
    gathered = comm.gather(phases, root=0)
    if comm.Get_rank() != 0:
        return 0
    medians = {name: 1e3 * float(np.median(values)) for name, values in times.items()}
    torch_ms = next((ms for name, ms in medians.items() if name.startswith("PyTorch")), None)
    print(f"median ms per step over {len(times['1 rank'])} timed steps each, interleaved, {comm.Get_size()} ranks:")
    for name, ms in medians.items():
        print(f"  {name:<36} {ms:7.1f} ms" + (f"   ratio to PyTorch {ms / torch_ms:.2f}" if torch_ms else ""))
    print_phases(gathered)
    weights = sum(param.size for param in build_model(config, tokenizer.vocab_size).parameters())
    print(f"\nalpha-beta model, {weights:,} float32 weights, 12 windows per machine, {STEP_MS:g} ms of compute, "
          f"alpha {ALPHA * 1e6:g} us, 10 Gb/s:")
    for machines, mode, collective, communication, step in alpha_beta_table(weights):
        print(f"  {machines:>3} machines, {mode:<10} {collective:<40} comm {communication:5.2f} ms, step {step:5.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
