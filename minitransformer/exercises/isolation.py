"""Run a student's code contained: out of reach of the grader, the reference and the machine.

Two levels, chosen by `choose_isolation` (`exercises grade --isolation auto|bubblewrap|process`):

* `bubblewrap` (Linux, the `bwrap` program: `apt-get install bubblewrap`). Each exercise runs in
  new PID, network, IPC, UTS and mount namespaces. Its file system holds only what it needs,
  read-only: the Python interpreter's own directory, NumPy, the temporary package with the
  student's answer put in, the inputs, and an empty /tmp of 64 MB. The reference, the grader's
  directories, the assignment, other submissions and the network are not there. Under root (as in
  CI and on Gradescope) the student's code runs as `nobody`, so the process limit below holds (it
  does not for root) and it cannot take capabilities back. Killing the sandbox's first process
  ends every process of the namespace, `setsid` and double forks included.
* `process`, the fallback where bubblewrap is missing or refused (macOS, a container without
  namespaces). Each exercise runs in a new session and process group, from a temporary directory,
  with an empty environment. The grader becomes the "child subreaper" of what it starts, so a
  process that detaches (double fork, `setsid`) stays its descendant, and at the end of the
  exercise every descendant is killed. Under root the student's code runs as `nobody`, which cannot
  read the grader's /proc entries (its working directory, environment, memory) nor write the
  reference; as another user it runs as that user, and can read and write what that user can.
  Either way it can read world-readable files, the installed reference among them: use bubblewrap
  for submissions you do not trust.

Both levels: limits set before the student's code is imported (`runner.py`): address space
(RLIMIT_AS), largest file written (RLIMIT_FSIZE), processes (RLIMIT_NPROC: the student's user may
start `processes` more than it has; it never holds for root, hence `nobody`), no core files, and a
wall-clock timeout after which everything is killed. `describe` prints which guarantees are in force.

Left out: cgroups (an exact memory and CPU budget), seccomp system-call filters, and limits on the
number of files written in /tmp (the process fallback shares the machine's /tmp).
"""

import ctypes
import math
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

MIB = 2**20
NOBODY = "nobody"
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Limits:
    """What one exercise's process may use.

    Attributes:
        timeout: seconds of wall-clock time for the whole exercise (> 0, finite).
        memory_mb: address space of the student's process, MB (NumPy and the package take ~200).
        processes: how many processes (threads count) the student's code may start.
        file_mb: largest file it may write, MB.
    """

    timeout: float = 60.0
    memory_mb: int = 2048
    processes: int = 32
    file_mb: int = 64

    def __post_init__(self):
        checks = (("--timeout", self.timeout, "a number of seconds > 0"), ("--memory", self.memory_mb, "MB >= 256"),
                  ("processes", self.processes, "a whole number >= 1"), ("file size", self.file_mb, "MB >= 1"))
        floors = {"--timeout": 0, "--memory": 256, "processes": 1, "file size": 1}
        for option, value, expected in checks:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not math.isfinite(value) or value < floors[option] or (value == 0 and option == "--timeout"):
                raise ValueError(f"{option} expected {expected}, got {value!r}")

    def describe(self):
        return (f"{self.timeout:g} s, {self.memory_mb} MB of memory, {self.processes} processes, "
                f"files up to {self.file_mb} MB")


def _linux():
    return sys.platform.startswith("linux") and Path("/proc/self/stat").exists()


def _nobody():
    """(uid, gid) of the unprivileged user the student's code runs as under root, or None."""
    import pwd

    try:
        entry = pwd.getpwnam(NOBODY)
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return None


def _others_can_read(path):
    """True when a user without any of the owner's rights can reach and read `path`."""
    path = Path(path).resolve()
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & 0o001:
            return False
    mode = os.stat(path).st_mode
    return bool(mode & 0o004) and (not path.is_dir() or bool(mode & 0o001))


def _numpy_dirs():
    """The NumPy package directory and its bundled libraries (numpy.libs), as the grader imports them."""
    import numpy

    package = Path(numpy.__file__).resolve().parent
    libs = package.parent / "numpy.libs"
    return package, (libs if libs.is_dir() else None)


def _interpreter():
    """(real path of the Python executable, real base prefix): the student's code runs on the grader's Python."""
    return Path(sys.executable).resolve(), Path(sys.base_prefix).resolve()


class Isolation:
    """How an exercise's process is started; `bubblewrap` or `process`."""

    name = None

    def __init__(self, reason=""):
        self.reason = reason                  # why this level was chosen (e.g. why bubblewrap is not used)
        self.user = _nobody() if os.geteuid() == 0 else None

    # -- what the student's process sees
    def paths(self, workdir):
        """dict of the paths the runner is given, as its process sees them."""
        raise NotImplementedError

    def command(self, workdir, runner_args):
        """(argv, cwd) starting the runner with `runner_args` for the job in `workdir`."""
        raise NotImplementedError

    def preload(self):
        """Modules the runner imports before it drops to `nobody` (those `nobody` could not read)."""
        return []

    def describe(self, limits):
        raise NotImplementedError

    def _who(self):
        if self.user:
            return f"runs as {NOBODY} (uid {self.user[0]})"
        import pwd

        return f"runs as {pwd.getpwuid(os.geteuid()).pw_name}, like the grader"


class ProcessIsolation(Isolation):
    """The fallback: a new session and process group, an empty environment, limits, and a sweep at the end."""

    name = "process"

    def __init__(self, reason="", reference=None):
        super().__init__(reason)
        reference = Path(reference or Path(__file__).resolve().parent.parent)
        self._reference_readable = _others_can_read(reference / "__init__.py")
        executable, prefix = _interpreter()
        numpy_dir, _ = _numpy_dirs()
        self._stdlib_readable = _others_can_read(Path(os.__file__).parent) and _others_can_read(executable)
        self._numpy_readable = _others_can_read(numpy_dir)

    def paths(self, workdir):
        numpy_dir, _ = _numpy_dirs()
        return {"package_root": str(workdir / "pkg"), "task": str(workdir / "task"),
                "runner": str(workdir / "harness" / "runner.py"), "site": [str(numpy_dir.parent)]}

    def command(self, workdir, runner_args):
        executable, _ = _interpreter()
        paths = self.paths(workdir)
        return [str(executable), "-I", "-S", paths["runner"], *runner_args], workdir / "cwd"

    def preload(self):
        """Under root the runner starts as root and drops to nobody; what nobody could not read is imported first."""
        if not self.user:
            return []
        wanted = set() if self._stdlib_readable else set(sys.stdlib_module_names) - {"antigravity", "this", "idlelib",
                                                                                      "turtle", "tkinter", "__main__"}
        if not self._numpy_readable:
            wanted.add("numpy")
        return sorted(name for name in list(sys.modules) if name.split(".")[0] in wanted)

    def describe(self, limits):
        why = (f" fallback, bubblewrap unavailable ({self.reason})" if self.reason
               else " (as --isolation process asked; bubblewrap not used)")
        if not self.user:
            reach = ("can read and write what that user can (the reference is checked against the assignment's hash "
                     "before each exercise)")
        elif self._reference_readable:
            reach = ("cannot read the grader's /proc entries nor write the reference, but can read world-readable "
                     "files, the installed reference among them")
        else:
            reach = ("cannot read the grader's /proc entries, nor read or write the reference (only its owner may), "
                     "but can read world-readable files")
        sweep = ("every process it starts killed at the end of the exercise, double forks and setsid included"
                 if _linux() else "its process group killed at the end of the exercise (a process that calls "
                                  "setsid escapes)")
        nproc = "" if (self.user or os.geteuid() != 0) else "; the process limit does not hold for root"
        return (f"isolation: process{why}: process group + rlimits only: a new session, an empty environment, "
                f"{sweep}; the student's code {self._who()}: it {reach}{nproc}; limits: {limits.describe()}. "
                f"Grade untrusted submissions where bubblewrap works")


class BubblewrapIsolation(Isolation):
    """Linux namespaces through bubblewrap: the student's process sees only what it needs, read-only."""

    name = "bubblewrap"
    SANDBOX = Path("/sandbox")

    def __init__(self, bwrap, reference, reason=""):
        super().__init__(reason)
        self.bwrap = bwrap
        self.reference = Path(reference).resolve()

    def _python_mounts(self):
        """(bind arguments, the interpreter's path inside) for the Python installation."""
        executable, prefix = _interpreter()
        if prefix == Path("/usr") or Path("/usr") in prefix.parents:
            return [], executable                           # visible through /usr
        if prefix not in executable.parents:
            raise RuntimeError(f"the Python executable {executable} is not inside its prefix {prefix}")
        inside = self.SANDBOX / "python"
        return ["--ro-bind", str(prefix), str(inside)], inside / executable.relative_to(prefix)

    def _hidden(self, roots):
        """Directories inside the bound `roots` to cover with an empty tmpfs: other packages, and the reference."""
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        candidates = {Path(sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})[key])
                      for key in ("purelib", "platlib")}
        candidates |= {Path("/usr/lib/python3/dist-packages"), Path(f"/usr/local/lib/{version}/dist-packages"),
                       Path(f"/usr/local/lib/{version}/site-packages"), Path(f"/usr/lib/{version}/site-packages"),
                       self.reference}
        hidden = []
        for path in sorted(p.resolve() for p in candidates if p.exists()):
            for source, target in roots:
                if path == source or source in path.parents:
                    hidden.append(str(target / path.relative_to(source)))
        return hidden

    def _arguments(self, workdir):
        numpy_dir, numpy_libs = _numpy_dirs()
        python_binds, executable = self._python_mounts()
        args = [self.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
        if os.geteuid() != 0:
            args.append("--unshare-user")
        args += ["--ro-bind", "/usr", "/usr"]
        for name in ("bin", "lib", "lib64", "lib32", "sbin"):
            top = Path("/") / name
            if top.is_symlink():
                args += ["--symlink", os.readlink(top), str(top)]
            elif top.is_dir():
                args += ["--ro-bind", str(top), str(top)]
        site = self.SANDBOX / "site"
        args += ["--perms", "0755", "--dir", str(self.SANDBOX), "--perms", "0755", "--dir", str(site)]
        args += python_binds
        args += ["--ro-bind", str(numpy_dir), str(site / "numpy")]
        if numpy_libs:
            args += ["--ro-bind", str(numpy_libs), str(site / "numpy.libs")]
        roots = [(Path("/usr"), Path("/usr"))]
        if python_binds:
            roots.append((Path(python_binds[1]), Path(python_binds[2])))
        for hidden in self._hidden(roots):
            args += ["--tmpfs", hidden]
        if workdir is not None:
            for part in ("pkg", "task", "harness"):
                args += ["--ro-bind", str(workdir / part), str(self.SANDBOX / part)]
        args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(64 * MIB), "--tmpfs", "/tmp",
                 "--clearenv", "--chdir", "/tmp"]
        for key, value in student_environment().items():
            args += ["--setenv", key, value]
        return args, executable

    def paths(self, workdir):
        return {"package_root": str(self.SANDBOX / "pkg"), "task": str(self.SANDBOX / "task"),
                "runner": str(self.SANDBOX / "harness" / "runner.py"), "site": [str(self.SANDBOX / "site")]}

    def command(self, workdir, runner_args):
        args, executable = self._arguments(workdir)
        return args + [str(executable), "-I", "-S", self.paths(workdir)["runner"], *runner_args], workdir / "cwd"

    def probe(self):
        """Raise RuntimeError (saying why) unless a sandbox starts here and imports NumPy."""
        args, executable = self._arguments(None)
        try:
            done = subprocess.run(args + [str(executable), "-I", "-S", "-c",
                                          "import sys; sys.path.insert(0, '/sandbox/site'); import numpy; print('ok')"],
                                  capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise RuntimeError(f"bwrap did not start: {error}") from None
        if done.returncode != 0 or done.stdout.strip() != "ok":
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"bwrap did not run Python with NumPy here: {last}")

    def describe(self, limits):
        return (f"isolation: bubblewrap (pid/net/mount namespaces, read-only reference hidden): each exercise in "
                f"its own PID, network, IPC and mount namespaces; the student's code sees only Python, NumPy, "
                f"its temporary package and inputs, read-only, and an empty /tmp; the reference, your files and "
                f"the network are out of reach; it {self._who()}; every process it starts dies with the "
                f"exercise; limits: {limits.describe()}")


def student_environment():
    """The whole environment of the student's process: nothing of the grader's (no paths, no PYTHONPATH)."""
    return {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


_CHOSEN = {}


def choose_isolation(level="auto", reference=None):
    """The isolation to grade with.

    Args:
        level: "auto" (bubblewrap when it works here, else the process fallback), "bubblewrap" (an
            error when it does not work), or "process".
        reference: the reference package directory (hidden from the sandbox).
    Returns:
        an Isolation; RuntimeError when "bubblewrap" was asked for and does not work.
    """
    if level not in ("auto", "bubblewrap", "process"):
        raise ValueError(f"--isolation expected auto, bubblewrap or process, got {level!r}")
    if os.name != "posix":
        raise RuntimeError("grading needs Linux or macOS: the student's code runs in a POSIX process group with "
                           "resource limits (grade on a Linux machine, or with the Gradescope bundle)")
    if level == "process":
        return ProcessIsolation(reference=reference)
    key = (level, str(reference))
    if key in _CHOSEN:
        return _CHOSEN[key]
    bwrap = shutil.which("bwrap")
    reason = None
    if bwrap is None:
        reason = "bwrap not found (apt-get install bubblewrap)"
    elif not _linux():
        reason = "not Linux"
    else:
        sandbox = BubblewrapIsolation(bwrap, reference or Path(__file__).resolve().parent.parent)
        try:
            sandbox.probe()
        except RuntimeError as error:
            reason = str(error)
        else:
            _CHOSEN[key] = sandbox
            return sandbox
    if level == "bubblewrap":
        raise RuntimeError(f"--isolation bubblewrap: not available here: {reason}")
    _CHOSEN[key] = ProcessIsolation(reason, reference)
    return _CHOSEN[key]


# ---------------------------------------------------------------- running and killing

def _process_table():
    """dict pid -> parent pid of every process (Linux /proc)."""
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as handle:
                    data = handle.read()
                table[int(entry.name)] = int(data[data.rindex(b")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return table


def count_processes(uid):
    """How many processes and threads the user `uid` has (what RLIMIT_NPROC counts); None without /proc."""
    if not _linux():
        return None
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                status = Path(f"/proc/{entry.name}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            if int(fields.get("Uid", "-1").split()[0]) == uid:
                count += int(fields.get("Threads", "1").strip())
    return count


def _subreaper(on):
    """Make this process the child subreaper of its descendants (Linux), so that orphans come back to it."""
    if not _linux():
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _kill_descendants(process, before):
    """SIGKILL the exercise's process, its group and every process descended from it, until none is left.

    Args:
        process: the Popen of the process started for the exercise.
        before: pids of this process's children that existed before it (not the exercise's).
    A process that detached (double fork, setsid) has been handed to this one, the subreaper, when its
    parent died: it is one of this process's children that were not there before.
    """
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.kill()
    process.wait()
    if not _linux():
        return
    me = os.getpid()
    for _ in range(1000):
        table = _process_table()
        children = {}
        for pid, parent in table.items():
            children.setdefault(parent, []).append(pid)
        stack = [pid for pid in children.get(me, []) if pid not in before]
        victims = set()
        while stack:
            pid = stack.pop()
            if pid not in victims:
                victims.add(pid)
                stack += children.get(pid, [])
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in victims:
            if table.get(pid) == me:                       # handed to us: wait for it, so it leaves the table
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
    raise RuntimeError("the student's processes could not all be killed (they fork faster than they die)")


@dataclass
class Outcome:
    """How the exercise's process ended."""

    returncode: int = None          # None when it was stopped at the time limit
    timed_out: bool = False
    stderr: str = ""                # the last 16 kB of what it wrote there


def run_contained(isolation, workdir, runner_args, limits, pass_fds, stdout_path, stderr_path):
    """Run the runner for the job in `workdir` under `isolation`; kill everything it started when it ends.

    Returns:
        Outcome.
    """
    argv, cwd = isolation.command(workdir, runner_args)
    cwd.mkdir(exist_ok=True)
    before = {pid for pid, parent in _process_table().items() if parent == os.getpid()} if _linux() else set()
    reaping = _subreaper(True)
    try:
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            process = subprocess.Popen(argv, cwd=cwd, env=student_environment(), stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=err, pass_fds=pass_fds, start_new_session=True)
        outcome = Outcome()
        try:
            outcome.returncode = process.wait(timeout=limits.timeout)
        except subprocess.TimeoutExpired:
            outcome.timed_out = True
        finally:                                       # also on Ctrl-C: nothing of the student's outlives it
            _kill_descendants(process, before)
    finally:
        if reaping:
            _subreaper(False)
    outcome.stderr = _tail(stderr_path)
    return outcome


def _tail(path, size=16384):
    with open(path, "rb") as handle:
        handle.seek(max(0, os.fstat(handle.fileno()).st_size - size))
        return handle.read().decode("utf-8", "replace")


def scratch():
    """Where the grader writes its temporary packages: /dev/shm when it is there (a package is copied and
    deleted for every exercise; in memory that takes a tenth of the time a disk may), else the default."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def new_workdir(isolation, prefix):
    """A temporary job directory: pkg/, task/, harness/ (the student's process reads them), cwd/, private/.

    When the student's code runs as `nobody` the parts it reads are made readable by others; private/
    (the output files, opened by the grader and handed over as descriptors) stays the grader's.
    """
    workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch()))
    for part in ("pkg", "task", "harness", "cwd", "private"):
        (workdir / part).mkdir()
    if isolation.user:
        workdir.chmod(0o755)
        for part in ("pkg", "task", "harness", "cwd"):
            (workdir / part).chmod(0o755)
        if isolation.name == "process" and not _others_can_read(workdir):
            shutil.rmtree(workdir)
            raise RuntimeError(f"the grader's temporary directory {workdir.parent} cannot be reached by {NOBODY}, "
                               f"who runs the student's code: set TMPDIR to a directory others may enter (e.g. /tmp)")
    return workdir


def open_for_student(workdir):
    """Make everything under pkg/, task/ and harness/ readable (not writable) by the student's user."""
    for part in ("pkg", "task", "harness"):
        for path in (workdir / part).rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
