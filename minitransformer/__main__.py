"""Command line: `python -m minitransformer <command> [options]`.

Each command lives in its own module under `minitransformer/commands/` and
exposes `HELP` (one line), `add_arguments(parser)` and `run(args) -> int`
(the exit code). Add a command by adding one line to `COMMANDS`.
"""

import argparse
import importlib
import sys

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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m minitransformer", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="command")
    subparsers.required = True
    modules = {}
    for name, module_path in COMMANDS.items():
        module = importlib.import_module(module_path)
        modules[name] = module
        module.add_arguments(subparsers.add_parser(name, help=module.HELP, description=module.HELP))
    args = parser.parse_args(argv)
    return modules[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
