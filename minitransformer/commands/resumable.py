"""What the commands that train share around the one training loop: --out, --resume, Ctrl-C, the NaN stop.

* `--out DIR` keeps the run: a checkpoint every --eval-interval steps and at the end (with loss.png). An --out
  that already holds a checkpoint is refused unless --resume or --force (`run_directory`). Without it,
  `seq2seq`, `mlm` and `finetune` save nothing and `train` makes a new runs/run-NNN (commands/runs.py).
* `--resume` reads the checkpoint once and continues the run as it was configured (`prepare`): every option is
  stored in it, an option not given again takes its stored value, and one given again with another value is
  applied and said, or refused in one `error:` line; the checkpoint must be this command's. The rules are
  training/resuming.py's, one set for every command.
* Ctrl-C stops at the end of the step under way, saves a checkpoint there (when the run saves) and exits with
  status 130; `--resume` continues from that step bit for bit (`fit`, which also puts the checkpoint back).
* A loss or a gradient norm that becomes NaN or infinite stops the run with one `error:` line naming the step
  and exit status 1; the last checkpoint stays as it was.

`seq2seq`, `mlm` and `finetune` also share their run options (`add_arguments`), the loop's options
(`loop_options`) and joining the MPI ranks (`ranks`); `train` has options and ranks of its own
(commands/train.py).
"""

import os
import sys
import types

from ..training import resuming
from .errors import UsageError, positive_float, positive_int


def add_arguments(parser):
    """--out, --resume, --force, --eval-interval, --no-progress."""
    group = parser.add_argument_group("run (checkpoints, Ctrl-C and --resume)")
    group.add_argument("--out", default=None, help="directory for the checkpoint and loss.png (default: none)")
    again = group.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue the run whose checkpoint is in --out")
    again.add_argument("--force", action="store_true", help="replace the checkpoint already in --out")
    group.add_argument("--eval-interval", type=positive_int, default=None,
                       help="steps between progress lines and checkpoints (default: a tenth of the run)")
    group.add_argument("--no-progress", action="store_true", help="no progress bar")
    numbers = parser.add_argument_group("numbers and ranks (under `mpiexec -n N` every rank takes a share of each "
                                        "batch; needs the [mpi] extra)")
    numbers.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="parameter dtype")
    numbers.add_argument("--parallel", choices=("replicated", "sharded"), default="replicated",
                         help="under mpiexec: the gradient all-reduced (as PyTorch's DDP) or the update sharded "
                              "(as ZeRO-1)")
    numbers.add_argument("--worker-timeout", type=positive_float, default=60.0, metavar="SECONDS",
                         help="under mpiexec: the least a step waits for a rank before the job stops")


def prepare(args, command, add_command_arguments, newest=None, ranks=1):
    """The run's directory, checked (`run_directory`), and on --resume its checkpoint read once, with the run's
    rules applied to `args` (training/resuming.py's `resume`: the same for every command).

    Args:
        add_command_arguments: the command's `add_arguments`, which checks the stored options.
        newest: () -> the newest run's directory or None, for --resume without --out (`train`'s runs/).
        ranks: the MPI ranks of this job.
    Returns:
        `resume`'s SimpleNamespace with `out`, the directory; for a fresh run SimpleNamespace(out, contents=None,
        notes=[]).
    Raises:
        UsageError (one line) for an --out that cannot be used, a checkpoint of another run or command.
    """
    from ..training.checkpoint import CheckpointError, read_checkpoint

    out = run_directory(args, newest)
    if not args.resume:
        return types.SimpleNamespace(out=out, contents=None, notes=[])
    try:
        contents = read_checkpoint(out)                         # read and checked once
        resumed = resuming.resume(contents, out, command, args, resuming.options_parser(add_command_arguments),
                                  ranks)
    except CheckpointError as error:                            # ResumeRefused among them
        raise UsageError(str(error)) from None
    resumed.out = out
    return resumed


def run_directory(args, newest=None):
    """The directory this run reads and writes (None: a new one, or none), after checking --out: a file is
    refused; without --resume, one that holds a checkpoint unless --force; --resume needs --out, or for `train`
    (`newest`) a run to continue."""
    from ..training.checkpoint import has_checkpoint

    if args.out is not None and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out} is a file, expected a directory")
    if not args.resume:
        if args.out is not None and has_checkpoint(args.out) and not args.force:
            raise UsageError(f"--out {args.out} already holds a checkpoint; continue it with --resume, replace it "
                             "with --force, or choose another --out")
        return args.out
    if args.out is not None:
        return args.out
    if newest is None:
        raise UsageError("--resume needs --out, the directory of the run to continue")
    directory = newest()
    if directory is None:
        from .runs import RUNS_DIRECTORY

        raise UsageError(f"--resume: no run to continue: no --out given and no run under {RUNS_DIRECTORY}/")
    return directory


def ranks():
    """(this process's rank, the number of ranks) under mpiexec, (0, 1) for one process; ranks but 0 are
    silenced (commands/ranks.py)."""
    from ..training.distributed import mpi_world
    from .ranks import quiet_unless_rank_0

    rank, size = mpi_world()
    if size > 1:
        quiet_unless_rank_0(rank)
    return rank, size


def loop_options(args, command, steps, **meta):
    """The TrainingLoop options every one of these commands passes: where it saves (rank 0 alone), how often,
    what it stores (the command, its options, and `meta`, e.g. the phase of a run in two), and under mpiexec
    the data-parallel hook of its steps."""
    from ..training.distributed import DataParallel, mpi_world

    rank, size = mpi_world()
    interval = args.eval_interval or max(steps // 10, 1)
    record = resuming.run_record(command, args, **meta)
    parallel = DataParallel(args.parallel, args.seed, args.worker_timeout, interval) if size > 1 else None
    return {"out_dir": args.out if rank == 0 else None, "overwrite": args.resume or args.force,
            "progress": not args.no_progress, "eval_interval": interval, "parallel": parallel,
            "meta": lambda: {"run": record}}


def fit(loop, command, out, contents=None):
    """Run `loop` to its end, first putting back the checkpoint `prepare` read (`contents`, on --resume) if it
    is of this loop's phase (a run in two phases resumes the phase it was in): (exit status, the last
    evaluation's losses). (None, losses) when it trained to its end (losses None when no step was left to
    take); (1, None) when it diverged, and (130, None) on Ctrl-C, each said in one line (how to continue:
    `command` --resume --out `out`, when the run saves)."""
    from ..training.loop import TrainingDiverged, TrainingInterrupted

    name = loop.options.name
    if contents is not None and contents[0]["run"].get("phase", name) == name:
        loop.restore(out, contents=contents)
        print(f"resuming {name} at step {loop.step} ({out})", file=sys.stderr)
    try:
        return None, loop.fit()
    except TrainingDiverged as error:
        print(f"error: {error}", file=sys.stderr)
        return 1, None
    except TrainingInterrupted as stop:
        again = f"; continue with: python -m minitransformer {command} --resume --out {out}" if out else ""
        print(f"{stop}{again}", file=sys.stderr)
        return 130, None
