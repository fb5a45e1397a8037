"""Command line: `python -m minitransformer <command> [options]`.

Each command lives in its own module under `minitransformer/commands/` and
exposes `HELP` (one line), `add_arguments(parser)` and `run(args) -> int`
(the exit code). Add a command by adding one line to `COMMANDS`. A user's
mistake is raised as `commands.errors.UsageError` and printed here as one
`error: ...` line with exit status 2.
"""

import argparse
import codecs
import importlib
import io
import sys

from .commands.errors import UsageError

COMMANDS = {
    "gradcheck": "minitransformer.commands.gradcheck",
    "train": "minitransformer.commands.train",
    "sample": "minitransformer.commands.sample",
    "bpe": "minitransformer.commands.bpe",
    "seq2seq": "minitransformer.commands.seq2seq",
    "mlm": "minitransformer.commands.mlm",
    "finetune": "minitransformer.commands.finetune",
    "exercises": "minitransformer.commands.exercises",
}


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """`--help` shows every option's default, `(default: 0.001)`, unless its help text already says it.

    A required option says "(required)", an option whose default is None "(default: none)" (better, its
    help says what None means, e.g. "(default: all tokens)"). Left unsaid: flags (off unless given).
    """

    def _get_help_string(self, action):
        help_text = action.help or ""
        if "default" in help_text.lower() or action.default is argparse.SUPPRESS or action.nargs == 0:
            return help_text
        if not action.option_strings:                   # a positional argument: always given
            return help_text
        if action.required:
            return f"{help_text} (required)"
        if action.default is None:
            return f"{help_text} (default: none)"
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors as one line in the style of every other error of the commands
    (`error: --max-steps: expected a whole number >= 0, got '-1' (see python -m minitransformer train --help)`),
    exit status 2."""

    def error(self, message):
        message = message.removeprefix("argument ")           # argparse's "argument --max-steps: ..."
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def given_options(subparser, argv):
    """The dests of the options that `argv` gives explicitly (not left at their defaults): `train --resume`
    tells an option given again from one it should take from the checkpoint."""
    defaults = [(action, action.default) for action in subparser._actions]
    try:
        for action, _ in defaults:
            action.default = argparse.SUPPRESS
        given, _ = subparser.parse_known_args(argv)
    finally:
        for action, default in defaults:
            action.default = default
    return set(vars(given))


def main(argv=None):
    """Run one command; its exit status. Ctrl-C ends any command with one line and status 130 (training saves
    first: see commands/train.py)."""
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C)", file=sys.stderr)
        return 130


def build_parser():
    """The command line's parser, its commands' modules and their parsers: (parser, {name: module},
    {name: subparser}). The documentation's tests parse every command line it shows with it, running none."""
    parser = _Parser(prog="python -m minitransformer", description=__doc__.splitlines()[0],
                     formatter_class=_HelpFormatter)
    subparsers = parser.add_subparsers(dest="command", metavar="command")
    subparsers.required = True
    modules, commands = {}, {}
    for name, module_path in COMMANDS.items():
        module = importlib.import_module(module_path)
        modules[name] = module
        commands[name] = subparsers.add_parser(name, help=module.HELP, description=module.HELP,
                                               formatter_class=_HelpFormatter)
        module.add_arguments(commands[name])
    return parser, modules, commands


def _main(argv):
    parser, modules, commands = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(argv)                  # the command line as given (train --workers N runs it under mpiexec)
    if getattr(modules[args.command], "RESUMES", False):
        args.given = given_options(commands[args.command], argv[argv.index(args.command) + 1:])
    try:
        return modules[args.command].run(args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def utf8_output():
    """Write stdout and stderr in UTF-8 where they are not already: the commands print σ, ≤, −, which a Windows
    code page (cp1252) cannot encode where the output is redirected to a file or a pipe (a console is UTF-8
    already). Python 3.15 does this by default (UTF-8 mode, PEP 686): remove once 3.15 is the oldest supported."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and codecs.lookup(stream.encoding).name != "utf-8":
            stream.reconfigure(encoding="utf-8", errors=stream.errors)


if __name__ == "__main__":
    utf8_output()
    sys.exit(main())
