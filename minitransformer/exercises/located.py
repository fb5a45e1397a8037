"""Where the student's code raised: one line naming the error and the package file, line and function it came from.

Both sides of checking an answer say it the same way: the student's self-check (`check.py`, `exercises check`, on
any system) and the grader's contained runner (`runner.py`, Linux only, which finds this file beside it). So this
file imports nothing of the package and nothing that one system lacks.
"""

import traceback
from pathlib import Path


def located(error, package, prefix=""):
    """`raised Type: message (at layers/x.py:12 in f: source line)` at `error`'s deepest frame in the directory
    `package` (`prefix` goes before the relative path), at most 500 characters. The hint `exercises make`
    leaves becomes `not implemented (layernorm.backward) at layers/x.py:12 in f`."""
    package = Path(package).resolve()

    def relative(filename):
        path = Path(filename or "").resolve()
        return path.is_relative_to(package) and prefix + path.relative_to(package).as_posix()

    if isinstance(error, SyntaxError) and relative(error.filename):
        return f"raised {type(error).__name__}: {error.msg} (at {relative(error.filename)}:{error.lineno})"[:500]
    message = f"raised {type(error).__name__}: {error}".strip()
    unfinished = isinstance(error, NotImplementedError) and str(error).startswith("Exercise ")
    if unfinished:
        message = f"not implemented ({str(error).split(':')[0].split()[-1]})"
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if relative(frame.filename)]
    if frames:
        where = f"{relative(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name}"
        message += f" at {where}" if unfinished else f" (at {where}: {(frames[-1].line or '').strip()})"
    return message[:500]
