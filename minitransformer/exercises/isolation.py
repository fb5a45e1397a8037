"""Run a student's code contained: out of reach of the grader, the reference and the machine.

`bubblewrap` (Linux): namespaces in which the student's process sees only Python, NumPy, its package and
inputs, read-only, an empty /tmp and no network. `process`, where bubblewrap is missing or refused: a new
session, an empty environment, and the grader as child subreaper, so that a process that detaches (double
fork, setsid) is still killed; world-readable files stay readable. Both: under root the code runs as
`nobody`; `runner.py` sets the limits before it imports the student's code; a timeout kills everything.
`describe` says which guarantees hold. Left out: cgroups, seccomp filters, a limit on files in /tmp.
"""

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import numpy

from ..core.checks import is_finite_number

MIB = 2**20
NOBODY = "nobody"
USR = Path("/usr")
PYTHON = Path(sys.executable).resolve()                    # the student's code runs on the grader's Python
NUMPY = Path(numpy.__file__).resolve().parent              # and its NumPy
ENVIRONMENT = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}   # nothing of the grader's
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Limits:
    """What one exercise may use: `timeout` seconds of wall-clock time (> 0, finite), `memory_mb` of address
    space (NumPy and the package take ~200), `processes` (threads count) and files up to `file_mb`."""

    timeout: float = 60.0
    memory_mb: int = 2048
    processes: int = 32
    file_mb: int = 64

    def __post_init__(self):
        for option, value, floor, expected in (("--timeout", self.timeout, 0, "a number of seconds > 0"),
                                               ("--memory", self.memory_mb, 256, "MB >= 256"),
                                               ("processes", self.processes, 1, "a whole number >= 1"),
                                               ("file size", self.file_mb, 1, "MB >= 1")):
            if not is_finite_number(value) or not value > 0 or value < floor:
                raise ValueError(f"{option} expected {expected}, got {value!r}")

    def describe(self):
        return (f"{self.timeout:g} s, {self.memory_mb} MB of memory, {self.processes} processes, "
                f"files up to {self.file_mb} MB")


def _linux():
    return sys.platform.startswith("linux") and Path("/proc/self/stat").exists()


def _others_can_read(path):
    """True when a user without any of the owner's rights can reach and read `path`."""
    path = Path(path).resolve()
    needed = [(parent, 0o001) for parent in path.parents] + [(path, 0o005 if path.is_dir() else 0o004)]
    return all(os.stat(place).st_mode & bits == bits for place, bits in needed)


class ProcessIsolation:
    """The fallback level, and what both levels share: a new session and process group, an empty environment,
    limits, and a sweep at the end. `SANDBOX`: where the student's process sees the job directory's parts
    (None: where they are); `site`: where it finds NumPy."""

    name, SANDBOX, site = "process", None, str(NUMPY.parent)

    def __init__(self, reason="", reference=None):
        import pwd

        self.reason = reason                  # why this level was chosen (e.g. why bubblewrap is not used)
        self.reference = Path(reference or Path(__file__).resolve().parent.parent).resolve()
        self.user = None                      # (uid, gid) of nobody, who runs the student's code under root
        if os.geteuid() == 0:
            with suppress(KeyError):
                entry = pwd.getpwnam(NOBODY)
                self.user = entry.pw_uid, entry.pw_gid

    def paths(self, workdir):
        """Where the student's process finds the package root, the task, the runner and NumPy (`site`)."""
        root = self.SANDBOX or workdir
        return {"package_root": str(root / "pkg"), "task": str(root / "task"),
                "runner": str(root / "harness" / "runner.py"), "site": [self.site]}

    def command(self, workdir, runner_args):
        """The argv that starts the runner for the job in `workdir`."""
        return [*self._python_argv(workdir), self.paths(workdir)["runner"], *runner_args]

    def _python_argv(self, workdir):
        """The argv of an isolated Python (`-I -S`) in which the job in `workdir` (None: no job) runs."""
        return [str(PYTHON), "-I", "-S"]

    def preload(self):
        """Modules the runner imports before it drops to `nobody` (under root, outside the sandbox): where the
        standard library or NumPy is unreadable for others, those of them that the grader has imported."""
        if not self.user or self.SANDBOX or all(map(_others_can_read, (PYTHON, Path(os.__file__).parent, NUMPY))):
            return []
        wanted = set(sys.stdlib_module_names) - {"antigravity", "this"} | {"numpy"}     # not those with side effects
        return sorted(name for name in list(sys.modules) if name.split(".")[0] in wanted)

    def _who(self):
        import pwd

        return (f"runs as {NOBODY} (uid {self.user[0]})" if self.user
                else f"runs as {pwd.getpwuid(os.geteuid()).pw_name}, like the grader")

    def describe(self, limits):
        why = (f"fallback, bubblewrap unavailable ({self.reason})" if self.reason
               else "(as --isolation process asked; bubblewrap not used)")
        reach = ("can read and write what that user can (the reference is checked against the assignment's hash "
                 "before each exercise)")
        if self.user:
            reach = "cannot read the grader's /proc entries, " + (
                "nor write the reference, but can read world-readable files, the installed reference among them"
                if _others_can_read(self.reference / "__init__.py") else
                "nor read or write the reference (only its owner may), but can read world-readable files")
        sweep = ("every process it starts killed at the end of the exercise, double forks and setsid included"
                 if _linux() else "its process group killed at the end (a process that calls setsid escapes)")
        nproc = "; the process limit does not hold for root" if os.geteuid() == 0 and not self.user else ""
        return (f"isolation: process {why}: process group + rlimits only: a new session, an empty environment, "
                f"{sweep}; the student's code {self._who()}: it {reach}{nproc}; limits: {limits.describe()}. "
                f"Grade untrusted submissions where bubblewrap works")


class BubblewrapIsolation(ProcessIsolation):
    """Linux namespaces through bubblewrap: the student's process sees only what it needs, read-only."""

    name, SANDBOX, site = "bubblewrap", Path("/sandbox"), "/sandbox/site"

    def __init__(self, bwrap, reference, reason=""):
        super().__init__(reason, reference)
        self.bwrap = bwrap

    def _python(self):
        """(host prefix, its path inside, the interpreter inside): a Python outside /usr is bound at /sandbox/python."""
        prefix = Path(sys.base_prefix).resolve()
        if prefix.is_relative_to(USR):
            return USR, USR, PYTHON
        if not PYTHON.is_relative_to(prefix):
            raise RuntimeError(f"the Python executable {PYTHON} is not inside its prefix {prefix}")
        return prefix, self.SANDBOX / "python", self.SANDBOX / "python" / PYTHON.relative_to(prefix)

    def _hidden(self, roots):
        """Where, inside the bound `roots` ((host, inside) pairs), an empty tmpfs covers the installed packages
        (site-packages, dist-packages) and the reference."""
        hidden = []
        for source, target in sorted(roots):
            found = [*source.glob("lib*/python3*/*-packages"), *source.glob("local/lib*/python3*/*-packages")]
            found += [self.reference] if self.reference.is_relative_to(source) else []
            hidden += [str(target / path.relative_to(source)) for path in sorted(found)]
        return hidden

    def _python_argv(self, workdir):
        prefix, inside, executable = self._python()
        args = [self.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
        if os.geteuid() != 0:
            args.append("--unshare-user")
        for top in ("/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin"):
            args += ["--ro-bind-try", top, top]
        args += ["--perms", "0755", "--dir", str(self.SANDBOX), "--perms", "0755", "--dir", self.site]
        if prefix != USR:
            args += ["--ro-bind", str(prefix), str(inside)]
        for name in ("numpy", "numpy.libs"):
            args += ["--ro-bind-try", str(NUMPY.parent / name), f"{self.site}/{name}"]
        for hidden in self._hidden({(USR, USR), (prefix, inside)}):
            args += ["--tmpfs", hidden]
        for part in ("pkg", "task", "harness") if workdir else ():
            args += ["--ro-bind", str(workdir / part), str(self.SANDBOX / part)]
        return args + ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(64 * MIB), "--tmpfs",
                       "/tmp", "--chdir", "/tmp", str(executable), "-I", "-S"]

    def describe(self, limits):
        return (f"isolation: bubblewrap (pid/net/mount namespaces, read-only reference hidden): each exercise in "
                f"its own PID, network, IPC and mount namespaces; the student's code sees only Python, NumPy, "
                f"its temporary package and inputs, read-only, and an empty /tmp; the reference, your files and "
                f"the network are out of reach; it {self._who()}; every process it starts dies with the "
                f"exercise; limits: {limits.describe()}")


_CHOSEN = {}                                    # reference -> (BubblewrapIsolation or None, why not): probed once


def choose_isolation(level="auto", reference=None):
    """The isolation level to grade with: "auto" (bubblewrap where it works, else the process fallback),
    "bubblewrap" (RuntimeError where it does not work) or "process"; `reference`: the reference package's directory."""
    if level not in ("auto", "bubblewrap", "process"):
        raise ValueError(f"--isolation expected auto, bubblewrap or process, got {level!r}")
    if os.name != "posix":
        raise RuntimeError("grading needs Linux or macOS: the student's code runs in a POSIX process group with "
                           "resource limits (grade on a Linux machine, or with the Gradescope bundle)")
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
    if bwrap is None or not _linux():
        return None, "not Linux" if bwrap else "bwrap not found (apt-get install bubblewrap)"
    sandbox = BubblewrapIsolation(bwrap, reference)
    script = f"import sys; sys.path.insert(0, {sandbox.site!r}); import numpy; print('ok')"
    try:
        done = subprocess.run([*sandbox._python_argv(None), "-c", script], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL, env=ENVIRONMENT)
    except (OSError, subprocess.TimeoutExpired, RuntimeError) as error:        # RuntimeError: Python not bindable
        return None, f"bwrap did not start: {error}"
    if done.returncode != 0 or done.stdout.strip() != "ok":
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return None, f"bwrap did not run Python with NumPy here: {last}"
    return sandbox, None


# ---------------------------------------------------------------- running and killing

def _processes():
    """dict pid -> (parent pid, real uid, threads) of every process (Linux /proc)."""
    table = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with suppress(OSError, ValueError, KeyError):
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
            fields = dict(line.split(":", 1) for line in lines if ":" in line)
            table[int(pid)] = (int(fields["PPid"]), int(fields["Uid"].split()[0]), int(fields["Threads"]))
    return table


def count_processes(uid):
    """How many processes and threads the user `uid` has (what RLIMIT_NPROC counts); None without /proc."""
    return sum(threads for _, owner, threads in _processes().values() if owner == uid) if _linux() else None


def _subreaper(on):
    """Make this process the child subreaper of its descendants (Linux), so that orphans come back to it."""
    if _linux():
        ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


def _kill_descendants(process, before):
    """SIGKILL the exercise's `process` (a Popen), its group, and every descendant of this process but the children
    it had `before` (pids), until none is left: one that detached (double fork, setsid) came back to this one."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.kill()
    process.wait()
    if not _linux():
        return
    me = os.getpid()
    for _ in range(1000):
        parents = {pid: parent for pid, (parent, _, _) in _processes().items()}
        victims, frontier = set(), {pid for pid, parent in parents.items() if parent == me} - before
        while frontier:
            victims |= frontier
            frontier = {pid for pid, parent in parents.items() if parent in frontier} - victims
        if not victims:
            return
        for pid in victims:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid in victims:
            if parents[pid] == me:                       # handed to us: wait for it, so it leaves the table
                with suppress(ChildProcessError):
                    os.waitpid(pid, 0)
    raise RuntimeError("the student's processes could not all be killed (they fork faster than they die)")


@dataclass
class Outcome:
    """How the exercise's process ended."""

    returncode: int = None          # None when it was stopped at the time limit
    timed_out: bool = False
    stderr: str = ""                # the last 16 kB of what it wrote there


def run_contained(isolation, workdir, runner_args, limits, pass_fds, stdout_path, stderr_path):
    """Run the runner for the job in `workdir` under `isolation`, kill everything it started when it ends, and
    return its Outcome."""
    argv = isolation.command(workdir, runner_args)
    before = {pid for pid, (parent, _, _) in _processes().items() if parent == os.getpid()} if _linux() else set()
    _subreaper(True)
    try:
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            process = subprocess.Popen(argv, cwd=workdir / "cwd", env=ENVIRONMENT, stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=err, pass_fds=pass_fds, start_new_session=True)
        outcome = Outcome()
        try:
            outcome.returncode = process.wait(timeout=limits.timeout)
        except subprocess.TimeoutExpired:
            outcome.timed_out = True
        finally:                                       # also on Ctrl-C: nothing of the student's outlives it
            _kill_descendants(process, before)
    finally:
        _subreaper(False)
    with open(stderr_path, "rb") as handle:
        handle.seek(max(0, os.fstat(handle.fileno()).st_size - 16384))
        outcome.stderr = handle.read().decode("utf-8", "replace")
    return outcome


def scratch():
    """Where the grader writes its temporary packages: /dev/shm when it is there (a package is copied and
    deleted for every exercise; in memory that takes a tenth of the time a disk may), else the default."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def new_workdir(isolation, prefix):
    """A temporary job directory: pkg/, task/, harness/ (the student's process reads them), cwd/, private/
    (the output files, opened by the grader and handed over as descriptors: the grader's alone)."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch()))
    for part in ("pkg", "task", "harness", "cwd", "private"):
        (workdir / part).mkdir()
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
