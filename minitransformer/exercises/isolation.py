"""Run a student's code contained, on Linux: out of reach of the grader, the reference and the machine.

`bubblewrap`: namespaces in which the student's process sees only Python, NumPy, its package and inputs,
read-only, an empty /tmp and no network. `process`, where bubblewrap is missing or refused: world-readable
files stay readable. Both: a new session, an empty environment, the grader as child subreaper (a process that
detaches by a double fork or setsid is still killed), `nobody` under root, each exercise's child in a pid
namespace of its own under root (no signal to another student's), the limits set by `runner.py` before
it imports the student's code, a seccomp filter refusing the kernel keyrings (a key outlives its process), a
timeout. Left out: cgroups, a filter on other system calls, a limit on files in /tmp.
"""

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import numpy

from ..core.checks import is_finite_number
from .runner import _processes, kill_descendants

NOBODY = "nobody"
USR = Path("/usr")
PYTHON = Path(sys.executable).resolve()                    # the student's code runs on the grader's Python
NUMPY = Path(numpy.__file__).resolve().parent              # and its NumPy
ENVIRONMENT = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}   # nothing of the grader's


@dataclass(frozen=True)
class Limits:
    """What one exercise may use: `timeout` seconds of wall-clock time, `memory_mb` of address space (NumPy and
    the package take ~200), `processes` (threads count) and files up to `file_mb`; ValueError for less."""

    timeout: float = 60.0
    memory_mb: int = 2048
    processes: int = 32
    file_mb: int = 64

    def __post_init__(self):
        for option, value, floor, expected in (("--timeout", self.timeout, 0, "a number of seconds > 0"),
                                               ("--memory", self.memory_mb, 256, "MB >= 256"),
                                               ("processes", self.processes, 1, "a whole number >= 1"),
                                               ("file size", self.file_mb, 1, "MB >= 1")):
            if not is_finite_number(value) or value <= 0 or value < floor:
                raise ValueError(f"{option} expected {expected}, got {value!r}")


def _others_can_read(path):
    """True when a user without any of the owner's rights can reach and read `path`."""
    path = Path(path).resolve()
    needed = [(parent, 0o001) for parent in path.parents] + [(path, 0o005 if path.is_dir() else 0o004)]
    return all(os.stat(place).st_mode & bits == bits for place, bits in needed)


class ProcessIsolation:
    """The fallback level, and what both levels share. `SANDBOX`: where the student's process sees the job
    directory's parts (None: where they are); `site`: where it finds NumPy."""

    name, SANDBOX, site = "process", None, str(NUMPY.parent)
    # fresh: each exercise's child gets a /tmp and IPC of its own; batched: one contained process per submission (else
    # one per exercise: where a level's promise of a private /tmp can only be kept by a sandbox of its own)
    fresh, batched = False, True
    SUMMARY = "no namespaces: a new session, an empty environment and limits only"    # also --isolation's help

    def __init__(self, reason="", reference=None):
        import pwd

        self.reason = reason                  # why this level was chosen (e.g. why bubblewrap is not used)
        self.reference = Path(reference or Path(__file__).resolve().parent.parent).resolve()
        self.user = None                      # (uid, gid) of nobody, who runs the student's code under root
        if os.geteuid() == 0:
            with suppress(KeyError):
                self.user = tuple(pwd.getpwnam(NOBODY)[2:4])

    def student_uid(self):
        """The uid the student's code runs as: nobody's under root, else the grader's own."""
        return self.user[0] if self.user else os.geteuid()

    def paths(self, workdir):
        """Where the student's process finds the package root, the task, the runner and NumPy (`site`)."""
        root = self.SANDBOX or workdir
        return {"package_root": str(root / "pkg"), "task": str(root / "task"),
                "runner": str(root / "harness" / "runner.py"), "site": [self.site]}

    def command(self, workdir, *args):
        """The argv of an isolated Python (`-I -S`) given `args`, for the job in `workdir` (None: no job)."""
        return [str(PYTHON), "-I", "-S", *args]

    def preload(self):
        """Modules the runner imports before it drops to `nobody` (under root, outside the sandbox): where the
        standard library or NumPy is unreadable for others, those of them that the grader has imported."""
        if not self.user or self.SANDBOX or all(map(_others_can_read, (PYTHON, Path(os.__file__).parent, NUMPY))):
            return []
        wanted = set(sys.stdlib_module_names) - {"antigravity", "this"} | {"numpy"}     # not those with side effects
        return sorted(name for name in list(sys.modules) if name.split(".")[0] in wanted)

    def describe(self, limits):
        """The grade's first line: this level, why it was chosen, and which guarantees hold under `limits`."""
        who = f"runs as {NOBODY} (uid {self.user[0]})" if self.user else "runs as the grader's own user"
        return (f"isolation: {self.name} {self._reach(who)}; a new session, an empty environment, every process "
                f"it starts killed at the end of the exercise (double forks and setsid included); limits: "
                f"{limits.timeout:g} s, {limits.memory_mb} MB of memory, {limits.processes} processes, files up to "
                f"{limits.file_mb} MB")

    def _reach(self, who):
        """Why this level was chosen, and what the student's code, which `who`, can reach (for `describe`)."""
        why = (f"fallback, bubblewrap unavailable ({self.reason})" if self.reason
               else "(as --isolation process asked; bubblewrap not used)")
        reach = ("can read and write what that user can (a change to the reference, its byte code included, stops the "
                 "grading)" + ("; the process limit does not hold for root"
                                                                    if os.geteuid() == 0 else ""))
        if self.user:
            reach = "cannot read the grader's /proc entries, " + (
                "nor write the reference, but can read world-readable files, the installed reference among them"
                if _others_can_read(self.reference / "__init__.py") else
                "nor read or write the reference (only its owner may), but can read world-readable files")
        return (f"{why}: {self.SUMMARY} (grade untrusted submissions where bubblewrap works): the "
                f"student's code {who}: it {reach}")


class BubblewrapIsolation(ProcessIsolation):
    """Linux namespaces through bubblewrap: the student's process sees only what it needs, read-only."""

    name, SANDBOX, site = "bubblewrap", Path("/sandbox"), "/sandbox/site"
    SUMMARY = "pid/net/mount namespaces, read-only reference hidden"

    def __init__(self, bwrap, reference):
        super().__init__("", reference)
        self.bwrap = bwrap

    def _python(self):
        """(host prefix, its path inside, the interpreter inside): a Python outside /usr is bound at /sandbox/python."""
        prefix = Path(sys.base_prefix).resolve()
        if prefix.is_relative_to(USR):
            return USR, USR, PYTHON
        return prefix, self.SANDBOX / "python", self.SANDBOX / "python" / PYTHON.relative_to(prefix)

    def _hidden(self, roots):
        """Where, in the bound `roots` ((host, inside) pairs), an empty tmpfs hides the installed packages and the reference."""
        hidden = []
        for source, target in sorted(roots):
            found = [*source.glob("lib*/python3*/*-packages"), *source.glob("local/lib*/python3*/*-packages")]
            found += [self.reference] if self.reference.is_relative_to(source) else []
            hidden += [str(target / path.relative_to(source)) for path in sorted(found)]
        return hidden

    def command(self, workdir, *args):
        prefix, inside, executable = self._python()
        argv = [self.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
        if os.geteuid() != 0:
            argv.append("--unshare-user")
        for top in ("/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin"):
            argv += ["--ro-bind-try", top, top]
        argv += ["--perms", "0755", "--dir", str(self.SANDBOX), "--perms", "0755", "--dir", self.site]
        if prefix != USR:
            argv += ["--ro-bind", str(prefix), str(inside)]
        for name in ("numpy", "numpy.libs"):
            argv += ["--ro-bind-try", str(NUMPY.parent / name), f"{self.site}/{name}"]
        for hidden in self._hidden({(USR, USR), (prefix, inside)}):
            argv += ["--tmpfs", hidden]
        for part in ("pkg", "task", "harness") if workdir else ():
            argv += ["--ro-bind", str(workdir / part), str(self.SANDBOX / part)]
        return argv + ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(64 * 2**20), "--tmpfs",
                       "/tmp", "--chdir", "/tmp", str(executable), "-I", "-S", *args]

    def _reach(self, who):
        return (f"({self.SUMMARY}): the student's code {who} and sees only "
                f"Python, NumPy, its temporary package and inputs, read-only, and an empty /tmp; the reference, "
                f"your files and the network are out of reach")


# why `exercises grade` is refused off Linux (commands/exercises.py) or without /proc
LINUX_ONLY = ("grading needs Linux with /proc (the student's code runs in a Linux sandbox: namespaces, seccomp, its "
              "processes found and killed in /proc): grade on a Linux machine, or on Gradescope, whose autograder runs "
              "on its Linux image (exercises gradescope-bundle writes it); students check their answers with exercises "
              "check on any system")
_CHOSEN = {}                                    # reference -> (BubblewrapIsolation or None, why not): probed once


def choose_isolation(level="auto", reference=None):
    """The isolation level to grade with: "auto" (bubblewrap where it works, else the process fallback),
    "bubblewrap" (RuntimeError where it does not work) or "process"; `reference`: the reference package's directory."""
    if level not in ("auto", "bubblewrap", "process"):
        raise ValueError(f"--isolation expected auto, bubblewrap or process, got {level!r}")
    if sys.platform != "linux" or not Path("/proc/self/status").exists():
        raise RuntimeError(LINUX_ONLY)
    if level == "process":
        return ProcessIsolation(reference=reference)
    if str(reference) not in _CHOSEN:
        _CHOSEN[str(reference)] = _bubblewrap(reference)
    sandbox, reason = _CHOSEN[str(reference)]
    if sandbox is None and level == "bubblewrap":
        raise RuntimeError(f"--isolation bubblewrap: not available here: {reason}")
    return sandbox or ProcessIsolation(reason, reference)


def _bubblewrap(reference):
    """(a BubblewrapIsolation that works here: starts, and imports NumPy, None) or (None, why not)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "bwrap not found (apt-get install bubblewrap)"
    sandbox = BubblewrapIsolation(bwrap, reference)
    script = (f"import sys, ctypes; sys.path.insert(0, {sandbox.site!r}); import numpy; print('ok', "   # as root: fresh
              f"ctypes.CDLL(None).unshare(0x20000 | 0x8000000) == 0)")     # namespaces for each child (runner.py)
    try:
        done = subprocess.run(sandbox.command(None, "-c", script), capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL, env=ENVIRONMENT, encoding="utf-8")
    except (OSError, subprocess.TimeoutExpired, ValueError) as error:    # ValueError: a Python outside its prefix
        return None, f"bwrap did not start: {error}"
    if done.returncode != 0 or done.stdout.split()[:1] != ["ok"]:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return None, f"bwrap did not run Python with NumPy here: {last}"
    sandbox.fresh = sandbox.batched = done.stdout.split()[-1] == "True"    # else one sandbox per exercise
    return sandbox, None


# ---------------------------------------------------------------- running and killing

@contextmanager
def contained(isolation, workdir, runner_args, pass_fds, stdout_path, stderr_path):
    """Start the runner for the job in `workdir` under `isolation` and yield its Popen; when the block ends (also on
    Ctrl-C), kill it, its group and every process it started (this process their child subreaper meanwhile)."""
    argv = isolation.command(workdir, isolation.paths(workdir)["runner"], *runner_args)
    before = {pid for pid, (parent, _, _) in _processes().items() if parent == os.getpid()}
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)                 # PR_SET_CHILD_SUBREAPER: orphans come back to us
    try:
        private = {"opener": lambda path, flags: os.open(path, flags, 0o600)}    # not reopened by nobody (/proc/self/fd)
        with open(stdout_path, "wb", **private) as out, open(stderr_path, "wb", **private) as err:
            process = subprocess.Popen(argv, cwd=workdir / "cwd", env=ENVIRONMENT, stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=err, pass_fds=pass_fds, start_new_session=True)
        try:
            yield process
        finally:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.kill()
            process.wait()
            kill_descendants(before)
    finally:
        ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)


def scratch():
    """Where the grader writes its temporary packages: /dev/shm (in memory: fast) where it is writable, else None."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def new_workdir(isolation, prefix):
    """A temporary job directory: pkg/, task/, harness/ (the student's process reads them), cwd/, private/
    (the output files, opened by the grader and handed over as descriptors: the grader's alone)."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch()))
    for part in ("pkg", "task", "harness", "cwd", "private"):
        (workdir / part).mkdir(mode=0o700 if part == "private" else 0o777)
    if isolation.user:                                    # nobody runs the student's code: let it in
        open_for_student(workdir)
        if isolation.name == "process" and not _others_can_read(workdir):
            shutil.rmtree(workdir)
            raise RuntimeError(f"the grader's temporary directory {workdir.parent} cannot be reached by {NOBODY}, "
                               f"who runs the student's code: set TMPDIR to a directory others may enter (e.g. /tmp)")
    return workdir


def open_for_student(workdir):
    """Make the job directory and all in it but private/ readable (not writable) by the student's user."""
    workdir.chmod(0o755)
    for path in workdir.rglob("*"):
        if path.relative_to(workdir).parts[0] != "private":
            path.chmod(0o755 if path.is_dir() else 0o644)
