"""Resuming a run: what a checkpoint keeps of a command's run, what must match the options given again, what may change.

A command's checkpoint stores its run as `run` (`run_record`; the schema is checkpoint.py's): the command, the
options it was given (all but how to start this process, `NOT_STORED`), and what the run adds: the training
text's path and SHA-256 (`train`, `text_record`), the phase a run in two parts is in (`finetune`). `resume`
reads it back from the checkpoint, read once by the caller, by the same rules for every command (`RULES`):

* the checkpoint must be a run of this command (`ResumeRefused` otherwise);
* an option not given again takes its stored value, not its default, so the run goes on as configured (its
  length, its evaluations, its schedule);
* an option given again with another value is applied, and said in one `note:` line, if the command's rules
  list it as changeable (how far to go, where and how to run, how to watch; `WATCHING` are every command's),
  and refused (`ResumeRefused`) otherwise: the model (its style and shape), the data (the tokenizer, the text,
  the seed) and the optimisation define the run, and changing one would make another run;
* a language model's run (`train`'s) continues with its checkpoint's TrainConfig, whose `RESUMABLE` fields
  alone take the options given (`resumed_config`; a new `max_steps` keeps the schedule's horizon, so the steps
  already taken keep their rates, and a note says what the rate does past the old horizon), with the
  checkpoint's tokenizer, on the text the checkpoint names unless one is given (`check_text`: a text that
  changed since is refused unless given again), and on another number of MPI ranks with a note that its
  numbers no longer match an uninterrupted run's bit for bit (`continue_on_ranks`).

A checkpoint of 0.3 (or of a script's `Trainer`) stored no run: its train_config gives the options, and the
text is the one given (a note says so).

Left out: reading the checkpoint (checkpoint.py's `read_checkpoint`, which also checks it; the caller reads
it once and hands its contents on) and restoring the loop (the harness's `restore`).
"""

import argparse
import dataclasses
import hashlib
import os
import types

from .checkpoint import CheckpointError, checkpoint_tokenizer, checkpoint_train_config
from .config import TrainConfig

# dests of a parsed command line that say how to start this process, not what the run is: never stored
NOT_STORED = ("command", "out", "resume", "force", "given", "argv")
# options every command may change when it resumes: how often it evaluates and saves, how it shows progress,
# how the ranks share the work and how long they wait for each other
WATCHING = ("eval_interval", "no_progress", "parallel", "worker_timeout")


@dataclasses.dataclass(frozen=True)
class Rules:
    """What `--resume` of one command may change, and whether its run is the language model's."""

    changeable: tuple               # options given anew that are applied (and said); every other one defines the run
    language_model: bool = False    # Trainer's checkpoint: its TrainConfig, tokenizer and text go on too


RULES = {
    # how far to go, the evaluation, the ranks and their mode, the kernels, the ranks' wait (TrainConfig's
    # RESUMABLE fields), the progress bar, each rank's threads, the printed samples
    "train": Rules(WATCHING + TrainConfig.RESUMABLE + ("threads_per_rank", "prompt", "sample_tokens",
                                                       "temperature", "top_k"), language_model=True),
    "seq2seq": Rules(WATCHING + ("beam", "examples")),         # and what is printed after training
    "mlm": Rules(WATCHING),
    "finetune": Rules(WATCHING),
}


class ResumeRefused(CheckpointError):
    """Resuming would make another run: an option that defines the run changed, its text changed, or the
    checkpoint is another command's."""


# ---------------------------------------------------------------- what a checkpoint stores of its run
def run_record(command, args, **extra):
    """What a checkpoint stores of a command's run: {"command", "options": {dest: value} of `args` but
    NOT_STORED and the `extra` keys, **extra} (e.g. text=`text_record(...)`, phase=...)."""
    options = {dest: value for dest, value in sorted(vars(args).items()) if dest not in NOT_STORED + tuple(extra)}
    return {"command": command, "options": options, **extra}


def text_record(path, text):
    """What a checkpoint stores of the training text: {"path" (absolute; None for the default corpus),
    "sha256", "characters"}."""
    return {"path": None if path is None else os.path.abspath(path), "sha256": text_hash(text),
            "characters": len(text)}


def text_hash(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- the one way to resume
def resume(contents, directory, command, args, parser, ranks=1):
    """The run of `command` in a checkpoint (`contents`, as `read_checkpoint` gave it) continued with `args`:
    its stored options applied to `args` (`apply_stored_options`), and for the language model its config,
    tokenizer and text.

    Args:
        parser: the command's parser (`options_parser`), which checks stored options as the command line would.
        ranks: the MPI ranks this job runs on.
    Returns:
        SimpleNamespace(contents, given: the dests given on the command line, notes: the lines to say; for the
        language model config (TrainConfig), tokenizer, text (the stored `text_record` or None), text_path
        (the text to read: the one given, else the recorded one); else those None).
    Raises:
        ResumeRefused for a run of another command or an option that would make another run; CheckpointError
        for stored options that the command would not accept.
    """
    meta, rules = contents[0], RULES[command]
    run, given = meta["run"], given_options(args, parser)
    if run is not None and run["command"] != command:
        raise ResumeRefused(f"--resume: checkpoint {directory} is a run of {run['command']}, not of {command}")
    saved = checkpoint_train_config(meta, directory) if rules.language_model else None
    if run is not None:
        kept_apart = NOT_STORED + tuple(key for key in run if key not in ("command", "options"))   # e.g. its text
        stored = stored_options(run["options"], f"checkpoint {directory}", parser, kept_apart, command)
    elif rules.language_model:                  # 0.3's, or a script's Trainer: its config is the options
        stored = options_of_an_old_checkpoint(saved, args)
    else:
        raise ResumeRefused(f"--resume: checkpoint {directory} holds no command's run (saved by a script?): "
                            f"{command} --resume continues a run of {command}")
    notes = apply_stored_options(args, stored, given, directory, rules.changeable, said_elsewhere=("max_steps",))
    resumed = types.SimpleNamespace(contents=contents, given=given, notes=notes, config=None, tokenizer=None,
                                    text=None, text_path=None)
    if rules.language_model:
        resumed.config, ranks_note = continue_on_ranks(resumed_config(saved, args), ranks)
        args.workers = ranks
        resumed.tokenizer = checkpoint_tokenizer(meta, directory)
        resumed.text = None if run is None else run.get("text")
        resumed.text_path = args.text if "text" in given or resumed.text is None else resumed.text["path"]
        resumed.notes += [note for note in (horizon_note(saved.max_steps, resumed.config), ranks_note) if note]
    return resumed


# ---------------------------------------------------------------- the options given again and the stored ones
class _Refusal(Exception):
    pass


class _StrictParser(argparse.ArgumentParser):
    def error(self, message):
        raise _Refusal(message.removeprefix("argument "))


def options_parser(add_arguments):
    """A command's parser (its `add_arguments`) that raises instead of exiting: it checks stored options as the
    command line would."""
    parser = _StrictParser(add_help=False)
    add_arguments(parser)
    return parser


def given_options(args, parser):
    """The dests given on the command line (`args.given`, set by __main__), or, for a Namespace made by hand,
    those whose value differs from `parser`'s default."""
    if getattr(args, "given", None) is not None:
        return set(args.given)
    defaults = vars(parser.parse_args([]))
    return {dest for dest, value in vars(args).items() if dest in defaults and value != defaults[dest]}


def stored_options(options, where, parser, not_stored=NOT_STORED, command="train"):
    """A checkpoint's stored `options`, checked by the command's `parser` (`options_parser`): a hand-edited
    value is refused as the command line would refuse it; CheckpointError naming the option."""
    argv = []
    actions = {action.dest: action for action in parser._actions}
    for dest, value in options.items():
        action = actions.get(dest)
        if action is None or dest in not_stored:
            raise CheckpointError(f"{where}: run.options.{dest} is not an option of {command}")
        if isinstance(action, argparse._StoreTrueAction):
            argv += [action.option_strings[0]] if value is True else []
        elif value is not None:
            argv += [action.option_strings[0], str(value)]
    try:
        parsed = vars(parser.parse_args(argv))
    except _Refusal as error:
        raise CheckpointError(f"{where}: run.options: {error}") from None
    wrong = [dest for dest, value in options.items() if parsed[dest] != value or type(parsed[dest]) is not type(value)]
    if wrong:
        raise CheckpointError(f"{where}: run.options.{wrong[0]} is not a value {command} accepts: "
                              f"{options[wrong[0]]!r:.80}")
    return {dest: parsed[dest] for dest in options}


def apply_stored_options(args, stored, given, directory, changeable, said_elsewhere=()):
    """Set every option not `given` to its stored value; return the notes for the ones given anew (none for
    those `said_elsewhere`, whose note says more); ResumeRefused for a change that would make another run."""
    notes, refused = [], []
    for dest, value in stored.items():
        now = getattr(args, dest)
        if dest not in given:
            setattr(args, dest, value)
        elif now != value:
            option = "--" + dest.replace("_", "-")
            if dest not in changeable:
                refused.append(f"{option} {now!r} (checkpoint: {value!r})")
            elif dest not in said_elsewhere:
                notes.append(f"note: {option} {now!r} (the run had {value!r}): applied")
    if refused:
        raise ResumeRefused(f"--resume: checkpoint {directory} was trained with a different config: "
                            f"{', '.join(refused)}; these define the run: start a new one (another --out) to change them")
    return notes


# ---------------------------------------------------------------- the language model's run (`train`)
def options_of_an_old_checkpoint(saved, args):
    """For a checkpoint that stored no options (0.3): the train_config's fields that are options."""
    return {field.name: getattr(saved, field.name) for field in dataclasses.fields(saved)
            if hasattr(args, field.name) and field.name not in ("warmup_steps", "lr_decay_steps")}


def resumed_config(saved, args):
    """The checkpoint's TrainConfig with its `RESUMABLE` fields taken from `args`."""
    return dataclasses.replace(saved, **{field: getattr(args, field) for field in TrainConfig.RESUMABLE})


def continued_config(saved, config, directory):
    """`config`, if it differs from the checkpoint's `saved` TrainConfig only in `RESUMABLE` fields; else
    ResumeRefused naming each field that differs."""
    differences = [f"{field.name}: checkpoint {getattr(saved, field.name)!r}, now {getattr(config, field.name)!r}"
                   for field in dataclasses.fields(saved) if field.name not in TrainConfig.RESUMABLE
                   and getattr(saved, field.name) != getattr(config, field.name)]
    if differences:
        raise ResumeRefused(f"checkpoint {directory} was trained with a different config: " + "; ".join(differences))
    return config


def horizon_note(old_steps, config):
    """The line that says what a new max_steps does to the learning rate (the schedule itself is kept)."""
    if config.max_steps == old_steps:
        return None
    head = f"note: --max-steps {config.max_steps} (the run was configured for {old_steps}): "
    if config.schedule != "cosine":
        return head + f"the {config.schedule} schedule is kept as it was"
    if config.max_steps > config.lr_decay_steps:
        return head + (f"the cosine schedule keeps its horizon of {config.lr_decay_steps} steps, so steps "
                       f"{config.lr_decay_steps + 1}-{config.max_steps} run at its floor, --min-lr {config.min_lr:g}")
    return head + (f"the cosine schedule keeps its horizon of {config.lr_decay_steps} steps, so the run stops "
                   "before the learning rate reaches its floor")


def check_text(record, path, text, given):
    """None, or the note that the text differs from the run's; ResumeRefused when it changed and was not given.

    Args:
        record: the checkpoint's `text_record`, or None (a 0.3 checkpoint, or a script's).
        path, text: the text's path (None: the default corpus) and the text read from it now.
        given: the dests given on the command line (`text` among them: the text was given again).
    """
    if record is None:
        return (f"note: the checkpoint did not record its text (written by 0.3, or by a script): training on "
                f"{path or 'the default corpus'}")
    if text_hash(text) == record.get("sha256"):
        return None
    what = record.get("path") or "the default corpus (pydoc_data.topics)"
    if "text" not in given:
        raise ResumeRefused(f"--resume: the training text {what} has changed since the checkpoint was written "
                            f"(sha256 {str(record.get('sha256'))[:12]}... then, {text_hash(text)[:12]}... now); "
                            f"give --text {record.get('path') or 'FILE'} to continue on the text as it is now")
    return f"note: --text {path} is not the text this run was trained on ({what}): continuing on it"


def continue_on_ranks(config, size):
    """(the TrainConfig for a job of `size` MPI ranks, the note when the checkpoint had another number or None)."""
    if config.workers == size:
        return config, None
    note = (f"note: the checkpoint was trained on {config.workers} rank(s) and continues on {size}: its numbers "
            "will no longer match an uninterrupted run's bit for bit")
    return dataclasses.replace(config, workers=size), note
