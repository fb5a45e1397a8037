"""`train --resume`: a run continues as it was configured, and says so when an option changes it.

Every option of `train` is stored in the checkpoint (`Trainer.run_info`): the options as parsed, and the
training text's path and SHA-256. On `--resume`:

* an option not given again takes its stored value, not its default, so the run goes on as configured
  (its length, its evaluations, its schedule);
* an option given again with another value is applied and announced in one `note:` line if it only says how
  far to go or how to watch (`CHANGEABLE`: --max-steps, evaluation, processes, kernels, samples), and refused
  in one `error:` line otherwise: the model, the data and the optimisation define the run, and changing one
  would make another run (start it with another --out);
* a new --max-steps keeps the learning-rate schedule's horizon (`lr_decay_steps`, `warmup_steps`): the steps
  already taken keep their rates, and the note says what the rate does past the old horizon;
* the text is read again from its stored path and its hash compared: a text that changed is refused, unless
  given again with --text, which continues on it and says so.

A checkpoint written by 0.3 stored no options: its train_config gives the model and the optimisation, and the
text is the one given (the note says so).
"""

import argparse
import dataclasses
import hashlib
import os

from .errors import UsageError

# dests of the parsed command line that are not options of the run itself
NOT_STORED = ("command", "out", "resume", "force", "given", "text", "argv")
# options a resumed run may change (announced); every other one is refused
CHANGEABLE = ("max_steps", "eval_interval", "eval_batches", "workers", "parallel", "threads_per_rank", "worker_timeout",
              "kernels",
              "no_progress", "prompt", "sample_tokens", "temperature", "top_k")


def run_info(args, text_path, text):
    """What a checkpoint stores to resume the run as it was: {"options": {...}, "text": {path, sha256, characters}}."""
    return {"options": {dest: value for dest, value in sorted(vars(args).items()) if dest not in NOT_STORED},
            "text": {"path": None if text_path is None else os.path.abspath(text_path), "sha256": text_hash(text),
                     "characters": len(text)}}


def text_hash(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def given_options(args, add_arguments):
    """The dests given on the command line (`args.given`, set by __main__), or, for a Namespace made by hand,
    those whose value differs from the default."""
    if getattr(args, "given", None) is not None:
        return set(args.given)
    defaults = vars(_parser(add_arguments).parse_args([]))
    return {dest for dest, value in vars(args).items() if dest in defaults and value != defaults[dest]}


class _Refusal(Exception):
    pass


class _StrictParser(argparse.ArgumentParser):
    def error(self, message):
        raise _Refusal(message.removeprefix("argument "))


def _parser(add_arguments):
    parser = _StrictParser(add_help=False)
    add_arguments(parser)
    return parser


def stored_options(info, where, add_arguments, not_stored=NOT_STORED, command="train"):
    """The checkpoint's options, checked by the command's own parser (a hand-edited value is refused as the
    command line would refuse it); CheckpointError naming the option."""
    from ..training.checkpoint import CheckpointError

    parser, argv = _parser(add_arguments), []
    actions = {action.dest: action for action in parser._actions}
    for dest, value in info["options"].items():
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
    wrong = [dest for dest, value in info["options"].items()
             if parsed[dest] != value or type(parsed[dest]) is not type(value)]
    if wrong:
        raise CheckpointError(f"{where}: run.options.{wrong[0]} is not a value {command} accepts: "
                              f"{info['options'][wrong[0]]!r:.80}")
    return {dest: parsed[dest] for dest in info["options"]}


def apply_stored_options(args, stored, given, directory, changeable=CHANGEABLE):
    """Set every option not given to its stored value; return the notes for the ones given anew; UsageError
    for a change that would make another run."""
    notes, refused = [], []
    for dest, value in stored.items():
        now = getattr(args, dest)
        if dest not in given:
            setattr(args, dest, value)
        elif now != value:
            option = "--" + dest.replace("_", "-")
            if dest in changeable:
                notes.append(f"note: {option} {now!r} (the run had {value!r}): applied")
            else:
                refused.append(f"{option} {now!r} (checkpoint: {value!r})")
    if refused:
        raise UsageError(f"--resume: checkpoint {directory} was trained with a different config: {', '.join(refused)}; "
                         "these define the run: start a new one (another --out) to change them")
    return notes


def horizon_note(old_steps, config):
    """The line that says what a new --max-steps does to the learning rate (the schedule itself is kept)."""
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


def resumed_config(saved, args):
    """The checkpoint's TrainConfig with the changeable fields taken from `args`."""
    from ..training.config import TrainConfig

    return dataclasses.replace(saved, **{field: getattr(args, field) for field in TrainConfig.RESUMABLE})


def options_of_an_old_checkpoint(saved, args):
    """For a checkpoint that stored no options (0.3): the train_config's fields that are options."""
    return {field.name: getattr(saved, field.name) for field in dataclasses.fields(saved)
            if hasattr(args, field.name) and field.name not in ("warmup_steps", "lr_decay_steps")}


def check_text(record, path, text, given):
    """None, or the note that the text differs from the run's; UsageError when it changed and was not given."""
    if record is None:
        return f"note: the checkpoint did not record its text (written by 0.3): training on {path or 'the default corpus'}"
    if text_hash(text) == record.get("sha256"):
        return None
    what = record.get("path") or "the default corpus (pydoc_data.topics)"
    if "text" not in given:
        raise UsageError(f"--resume: the training text {what} has changed since the checkpoint was written "
                         f"(sha256 {str(record.get('sha256'))[:12]}... then, {text_hash(text)[:12]}... now); "
                         f"give --text {record.get('path') or 'FILE'} to continue on the text as it is now")
    return f"note: --text {path} is not the text this run was trained on ({what}): continuing on it"
