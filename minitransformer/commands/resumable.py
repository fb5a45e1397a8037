"""What `seq2seq`, `mlm` and `finetune` share around the one training loop: --out, --resume, Ctrl-C, the NaN stop.

* `--out DIR` keeps the run: a checkpoint every --eval-interval steps and at the end (with loss.png). Without
  it nothing is saved. An --out that already holds a checkpoint is refused unless --resume or --force.
* Ctrl-C stops at the end of the step under way, saves a checkpoint there (with --out) and exits with status
  130; `--resume --out DIR` continues from that step bit for bit.
* `--resume` reads the checkpoint once and continues the run as it was configured: every option is stored in
  it, an option not given again takes its stored value, and one given again with another value is refused in
  one `error:` line unless it only says how to watch (--eval-interval, --no-progress, the evaluation's
  printing); the checkpoint must be this command's. These rules are training/resuming.py's, the same as
  `train`'s.
* A loss or a gradient norm that becomes NaN or infinite stops the run with one `error:` line naming the step
  and exit status 1; the last checkpoint stays as it was.

`train` has options and a run directory of its own (commands/train.py) and shares `fit`: how a command says
that its loop stopped early.
"""

import os
import sys

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


def prepare(args, command, add_command_arguments, changeable):
    """Check --out and, on --resume, read its checkpoint once and apply its options to `args`
    (training/resuming.py's `resume_options`).

    Returns:
        (the checkpoint's contents `read_checkpoint` gave, or None for a fresh run, the notes to print).
    Raises:
        UsageError (one line) for an --out that cannot be used, a checkpoint of another run or command.
    """
    from ..training.checkpoint import CheckpointError, has_checkpoint, read_checkpoint

    if args.out is not None and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out} is a file, expected a directory")
    if not args.resume:
        if args.out is not None and has_checkpoint(args.out) and not args.force:
            raise UsageError(f"--out {args.out} already holds a checkpoint; continue it with --resume, replace it "
                             "with --force, or choose another --out")
        return None, []
    if args.out is None:
        raise UsageError("--resume needs --out, the directory of the run to continue")
    try:
        contents = read_checkpoint(args.out)                    # read and verified once
        notes = resuming.resume_options(contents[0], args.out, command, args,
                                        resuming.options_parser(add_command_arguments), changeable)
    except CheckpointError as error:                            # ResumeRefused among them
        raise UsageError(str(error)) from None
    return contents, notes


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
    options = resuming.run_options(args)
    parallel = DataParallel(args.parallel, args.seed, args.worker_timeout, interval) if size > 1 else None
    return {"out_dir": args.out if rank == 0 else None, "overwrite": args.resume or args.force,
            "progress": not args.no_progress, "eval_interval": interval, "parallel": parallel,
            "meta": lambda: {"objective": command, **meta, "run": {"options": options}}}


def restore(loop, args, contents):
    """On --resume, put the checkpoint read by `prepare` (`contents`) back into `loop`, if it is of this loop's
    phase (a run in two phases resumes the phase it was in)."""
    if contents is not None and contents[0].get("phase", loop.options.name) == loop.options.name:
        loop.restore(args.out, contents=contents)
        print(f"resuming {loop.options.name} at step {loop.step} ({args.out})", file=sys.stderr)


def fit(loop, command, out):
    """Run `loop` to its end: (exit status, the last evaluation's losses). (None, losses) when it trained to its
    end (losses None when no step was left to take); (1, None) when it diverged, and (130, None) on Ctrl-C, each
    said in one line (how to continue: `command` --resume --out `out`, when the run saves)."""
    from ..training.loop import TrainingDiverged, TrainingInterrupted

    try:
        return None, loop.fit()
    except TrainingDiverged as error:
        print(f"error: {error}", file=sys.stderr)
        return 1, None
    except TrainingInterrupted as stop:
        again = f"; continue with: python -m minitransformer {command} --resume --out {out}" if out else ""
        print(f"{stop}{again}", file=sys.stderr)
        return 130, None
