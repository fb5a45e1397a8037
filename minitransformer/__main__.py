"""Command line: `python -m minitransformer <command> [options]`.

Each command lives in its own module under `minitransformer/commands/` and
exposes `HELP` (one line), `add_arguments(parser)` and `run(args) -> int`
(the exit code). Add a command by adding one line to `COMMANDS`. A user's
mistake is raised as `commands.errors.UsageError` and printed here as one
`error: ...` line with exit status 2.
"""

import argparse
import importlib
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
    """argparse, with its usage errors as one line (`error: python -m minitransformer train: ...`), exit 2."""

    def error(self, message):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def main(argv=None):
    parser = _Parser(prog="python -m minitransformer", description=__doc__.splitlines()[0],
                     formatter_class=_HelpFormatter)
    subparsers = parser.add_subparsers(dest="command", metavar="command")
    subparsers.required = True
    modules = {}
    for name, module_path in COMMANDS.items():
        module = importlib.import_module(module_path)
        modules[name] = module
        module.add_arguments(subparsers.add_parser(name, help=module.HELP, description=module.HELP,
                                                   formatter_class=_HelpFormatter))
    args = parser.parse_args(argv)
    try:
        return modules[args.command].run(args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
