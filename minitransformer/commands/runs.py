"""Where `train` puts a run when no --out is given, and which run `sample` and `train --resume` pick.

    runs/run-001/        the first run: checkpoint.json, its arrays file, loss.png
    runs/run-002/        the next one: every run gets a new numbered directory, so running
                         `python -m minitransformer train` twice never replaces the first run
    runs/latest -> run-002   a relative symlink naming the newest run (where the OS allows symlinks)

`latest_run` is what `sample` and `train --resume` use when not given a
directory: the run `runs/latest` links to; else (no symlinks, or the link was
removed) the highest-numbered run; else a real directory `runs/latest`, which
0.2 wrote its one run into. Such a directory is never deleted or replaced: new
runs are numbered beside it, and the link is then simply not made.

Left out: naming runs, cleaning old runs up (delete the directories you no
longer need).
"""

import os
import re
import secrets

RUNS_DIRECTORY = "runs"
LATEST = "latest"
RUN_NAME = re.compile(r"run-(\d+)")


def _run_numbers(root):
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return {}
    return {int(match.group(1)): name for name in names
            if (match := RUN_NAME.fullmatch(name)) and os.path.isdir(os.path.join(root, name))}


def new_run_directory(root=RUNS_DIRECTORY):
    """Create the next numbered run directory under `root` and point `root/latest` at it.

    Returns:
        (path of the new directory, a note for the user or None): the note says why `latest` was not
        made to name it (a real directory or file of that name is left alone).
    Raises:
        OSError if `root` or the run directory cannot be created.
    """
    os.makedirs(root, exist_ok=True)
    number = max(_run_numbers(root), default=0) + 1
    while True:                                 # another run starting at the same moment may take a number
        name = f"run-{number:03d}"
        try:
            os.mkdir(os.path.join(root, name))
            break
        except FileExistsError:
            number += 1
    path = os.path.join(root, name)
    return path, _point_latest(root, name)


def _point_latest(root, name):
    """Make root/latest a symlink to `name` (atomically, by renaming a new link over the old one)."""
    link = os.path.join(root, LATEST)
    if os.path.lexists(link) and not os.path.islink(link):
        kind = "directory" if os.path.isdir(link) else "file"
        return (f"note: {link} is a {kind} (from an earlier version?) and is left as it is; "
                f"this run is {os.path.join(root, name)}")
    temporary = os.path.join(root, f".latest-{secrets.token_hex(4)}")
    try:
        os.symlink(name, temporary, target_is_directory=True)
        try:
            os.replace(temporary, link)
        except OSError:                         # Windows renames nothing onto a directory, nor onto a link to one:
            if not os.path.islink(link):        # the old link goes first (meanwhile latest_run takes the highest
                raise                           # number, which is this run)
            os.remove(link)
            os.replace(temporary, link)
    except (OSError, NotImplementedError):      # no symlinks here (e.g. Windows without the privilege)
        if os.path.lexists(temporary):
            os.remove(temporary)
        return None                             # latest_run falls back to the highest number
    return None


def latest_run(root=RUNS_DIRECTORY):
    """The newest run under `root` (see the module docstring), or None if there is none."""
    link = os.path.join(root, LATEST)
    if os.path.islink(link) and os.path.isdir(link):
        target = os.readlink(link)
        return target if os.path.isabs(target) else os.path.join(root, target)
    numbers = _run_numbers(root)
    if numbers:
        return os.path.join(root, numbers[max(numbers)])
    if os.path.isdir(link):                     # 0.2's runs/latest, a real directory
        return link
    return None


def remove_if_empty(path, root=RUNS_DIRECTORY):
    """Remove the run directory `path` if nothing was put in it (a run that saved nothing), and point
    `root/latest` back at the newest run left. A directory holding anything is left as it is."""
    try:
        os.rmdir(path)
    except OSError:                             # not empty, or already gone: nothing of the user's is touched
        return
    link = os.path.join(root, LATEST)
    if os.path.islink(link) and not os.path.exists(link):
        numbers = _run_numbers(root)
        if numbers:
            _point_latest(root, numbers[max(numbers)])
        else:
            os.remove(link)
