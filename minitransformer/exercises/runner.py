"""The student's side of grading, started contained (`isolation.py`) once per submission: `python -I -S runner.py TASK
COMMANDS_FD STATUS_FD`. This trusted parent imports NumPy and the temporary package once, from code it compiles
before any student code runs (every region of the assignment blank there: no answer in its memory). For each
line "<exercise> <source fd> <result fd> <arrays fd> <output fd>" the grader writes, it forks a child that closes every other
descriptor, takes a /tmp and IPC of its own (bubblewrap as root), drops to `nobody` under root with the limits,
compiles the exercise's files (every assigned region the student's answer, no reference's: read from the source fd,
which the parent never reads) in place of the parent's, imports the package anew and runs the exercise's cases. The
parent waits (the time limit), kills every process the child left, and writes a status line. Nothing after the fork
is believed: the grader, which never imports student code, judges.
TASK: task.json {"package_root", "site", "user", "limits", "nproc", "preload", "fresh", "exercises": [{"cases":
[{"key", "index", "id", "inputs": n, "rng": the bit generator's state}], "regions": [[file, region, first line, last
line]]: the assigned regions' bodies in its files}]}; inputs.npz "<exercise>/<key>.input<i>", "<key>.param<j>",
"<key>.upstream". Source fd: JSON {file relative to the package: text}. Result fd: a JSON list of {"key",
"forward_error", "backward_error" (messages or null), "region": the assigned region it raised in, or null}. Arrays
fd: an .npz of "<key>.out", "<key>.dinput<i>" (float input i), "<key>.dparam<j>". Status line: JSON {"exercise",
"returncode": the child's, null when timed out}.
"""

import ctypes
import importlib.abc
import importlib.util
import json
import linecache
import os
import select
import signal
import sys
import traceback
import zipfile  # noqa: F401  (np.savez needs it: imported while the interpreter's files are readable)
from contextlib import suppress
from pathlib import Path

if __package__:                         # imported: minitransformer.exercises.runner
    from .located import located
else:                                   # the grader's script, harness/runner.py: located.py beside it (-I: not on sys.path)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from located import located

MIB = 2**20


def _confine(user, limits, nproc):
    """Become `user` (uid, gid; None: stay) for good, with no setuid gain, then limit address space, file size,
    core files and processes (soft = hard: they cannot be raised again)."""
    import resource  # here, not at the top: the command line imports this module (isolation.py) on any system

    if user:
        os.setgroups([])
        os.setgid(user[1])
        os.setuid(user[0])
    ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)                    # PR_SET_NO_NEW_PRIVS: setuid programs stay powerless
    _no_keyrings()
    settings = {resource.RLIMIT_AS: limits["memory_mb"] * MIB, resource.RLIMIT_FSIZE: limits["file_mb"] * MIB,
                resource.RLIMIT_CORE: 0, resource.RLIMIT_NPROC: nproc}
    for which, value in settings.items():
        if value is not None:                                  # nproc None: the limit would not hold (root)
            resource.setrlimit(which, (value, value))


# the kernel keyrings' system calls (add_key, request_key, keyctl) and the architecture they are numbered for
KEYRING_CALLS = {"x86_64": (0xC000003E, 248, 249, 250), "aarch64": (0xC00000B7, 217, 218, 219)}


def _no_keyrings():
    """A seccomp filter: the keyring calls fail (EPERM), as does every call of another architecture (x86-64's 32-bit
    ones) or of x32: a key outlives its process, in the user's keyring or the session's, for the next child to read."""
    if os.uname().machine not in KEYRING_CALLS:
        raise OSError(f"the child's seccomp filter knows {', '.join(KEYRING_CALLS)}, not {os.uname().machine}")
    arch, *calls = KEYRING_CALLS[os.uname().machine]
    deny, allow = (0x06, 0, 0, 0x00050001), (0x06, 0, 0, 0x7FFF0000)               # SECCOMP_RET_ERRNO | EPERM, ALLOW
    program = [(0x20, 0, 0, 4), (0x15, 0, 6, arch), (0x20, 0, 0, 0), (0x35, 4, 0, 0x40000000),  # arch; nr; x32 bit
               *((0x15, 3 - i, 0, call) for i, call in enumerate(calls)), allow, deny]
    filters = (ctypes.c_uint64 * len(program))(*(code | jt << 16 | jf << 24 | k << 32 for code, jt, jf, k in program))
    fprog = (ctypes.c_uint64 * 2)(len(program), ctypes.addressof(filters))   # struct sock_fprog: length, filter
    if ctypes.CDLL(None, use_errno=True).prctl(22, 2, ctypes.byref(fprog), 0, 0):    # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "the child's seccomp filter (no kernel keyrings)")


def _float_array(value, np, what):
    """`value` as a float64 array; TypeError when it does not hold real numbers (complex would lose a part)."""
    array = np.asarray(value)
    if array.dtype.kind not in "fiub":
        raise TypeError(f"{what} has dtype {array.dtype}, not a real number type")
    return array.astype(np.float64)


def region_of(error, package, regions):
    """The region holding the innermost line of `error`'s traceback that lies in one of `regions` ([file relative to
    the directory `package`, name, first line, last line]), or None: which answer a case failed in."""
    places = [(frame.filename, frame.lineno) for frame in traceback.extract_tb(error.__traceback__)]
    if isinstance(error, SyntaxError):
        places.append((error.filename, error.lineno))
    found = None
    for filename, line in places:
        path = Path(filename or "").resolve()
        found = next((name for relative, name, first, last in regions
                      if first <= (line or 0) <= last and path == package / relative), found)
    return found


def run_cases(cases, inputs, package, regions=()):
    """Import the package in the directory `package` (the student's code runs from here on), run every case (task.json's
    specs) with the given parameter values and inputs; return (records, arrays). `regions`: see `region_of`."""
    import numpy as np

    records = [{"key": spec["key"], "forward_error": None, "backward_error": None, "region": None} for spec in cases]
    try:
        import minitransformer
        from minitransformer.gradcheck.cases import all_cases
        from minitransformer.gradcheck.checker import backward_gradients
    except BaseException as error:                         # e.g. a SyntaxError in the answer: every forward fails
        for record in records:
            record["forward_error"], record["region"] = located(error, package), region_of(error, package, regions)
        return records, {}
    if not Path(minitransformer.__file__).resolve().is_relative_to(package):
        raise RuntimeError(f"the runner imported minitransformer from {minitransformer.__file__}, not {package}")
    catalogue, arrays = all_cases(), {}
    for spec, record in zip(cases, records):
        key, stage = spec["key"], "forward_error"
        try:                                               # the student's code raised: report it, go on
            case = catalogue[spec["index"]]
            rng = np.random.default_rng()
            rng.bit_generator.state = spec["rng"]          # the grader's: what is no input nor parameter built alike
            module, _, forward = case.build(rng)
            for j, (_, param) in enumerate(module.named_parameters()):
                param.data[...] = inputs[f"{key}.param{j}"]
            given = [inputs[f"{key}.input{i}"].copy() for i in range(spec["inputs"])]
            arrays[f"{key}.out"] = _float_array((forward or module.forward)(*given), np, "the forward output")
            stage, upstream = "backward_error", inputs[f"{key}.upstream"]
            grads, param_grads = backward_gradients(module, given, float(upstream) if upstream.ndim == 0 else upstream)
            found = {f"{key}.dinput{i}": _float_array(grad, np, f"the gradient of input {i}")
                     for i, grad in grads.items() if grad is not None}
            found.update({f"{key}.dparam{j}": _float_array(grad, np, f"the gradient of parameter {j}")
                          for j, grad in enumerate(param_grads)})
            arrays.update(found)
        except Exception as error:
            record[stage], record["region"] = located(error, package), region_of(error, package, regions)
    return records, arrays


# ---------------------------------------------------------------- processes (the grader's side uses these too)

def _processes():
    """dict pid -> (parent pid, real uid, threads) of every process (Linux /proc)."""
    table = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with suppress(OSError, ValueError, KeyError):
            lines = Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines()
            fields = dict(line.split(":", 1) for line in lines if ":" in line)
            table[int(pid)] = (int(fields["PPid"]), int(fields["Uid"].split()[0]), int(fields["Threads"]))
    return table


def count_processes(uid):
    """How many processes and threads the user `uid` has (what RLIMIT_NPROC counts)."""
    return sum(threads for _, owner, threads in _processes().values() if owner == uid)


def kill_descendants(before=()):
    """SIGKILL every descendant of this process but the children it had `before` (pids), until none is left (this
    process is their child subreaper: one that detached by a double fork or setsid came back to it), and reap them."""
    me = os.getpid()
    for _ in range(1000):
        parents = {pid: parent for pid, (parent, _, _) in _processes().items()}
        victims, frontier = set(), {pid for pid, parent in parents.items() if parent == me} - set(before)
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


# ---------------------------------------------------------------- the parent: the package compiled once, a child per exercise

class CompiledPackage(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The package's modules, imported from code compiled once, in the parent, for each module it imports: a child
    compiles only the files its exercise changes (and a module the parent never imported)."""

    def __init__(self, package):
        self.package, self.modules = Path(package), {}
        for path in sorted(self.package.rglob("*.py")):
            parts = path.relative_to(self.package.parent).with_suffix("").parts
            self.modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = (path, parts[-1] == "__init__", None)

    def replace(self, sources):
        """In a child: the files {relative path: text} in place of the parent's (compiled when imported: a syntax error
        is the import's), and every module imported anew."""
        for name in [name for name in sys.modules if name.split(".")[0] == self.package.name]:
            del sys.modules[name]
        for relative, text in sources.items():
            path = self.package / relative
            name = ".".join((self.package.name, *Path(relative).with_suffix("").parts)).removesuffix(".__init__")
            linecache.cache[str(path)] = (len(text), None, text.splitlines(keepends=True), str(path))
            self.modules[name] = (path, path.name == "__init__.py", text)

    def find_spec(self, name, path=None, target=None):
        if name in self.modules:
            where, package, _ = self.modules[name]
            return importlib.util.spec_from_file_location(name, where, loader=self,
                                                          submodule_search_locations=[str(where.parent)] if package else None)

    def exec_module(self, module):
        path, package, code = self.modules[module.__name__]             # code: None, or a text not yet compiled
        if not hasattr(code, "co_code"):
            code = compile(path.read_bytes() if code is None else code, str(path), "exec", dont_inherit=True)
            self.modules[module.__name__] = (path, package, code)
        exec(code, module.__dict__)


def _fresh_namespaces():
    """A mount and IPC namespace of the child's own, an empty /tmp in it (bubblewrap, as root): nothing one exercise
    leaves there (files, shared memory, message queues) is seen by the next."""
    libc = ctypes.CDLL(None, use_errno=True)
    if (libc.unshare(0x00020000 | 0x08000000) or libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None)
            or libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0x2 | 0x4, f"mode=1777,size={64 * MIB}".encode())):
        raise OSError(ctypes.get_errno(), "the child's own /tmp and IPC namespace")    # CLONE_NEWNS | NEWIPC; MS_REC |
    os.chdir("/tmp")                                                                   # MS_PRIVATE; MS_NOSUID | NODEV


def _own_pid_namespace():
    """As root: go on as pid 1 of a pid namespace of its own (an answer's kill(-1) or kill(pid) reaches no process
    outside it: not another student's, graded at the same time as the same user); this process ends as it does."""
    if os.geteuid() != 0 or ctypes.CDLL(None).unshare(0x20000000):                    # CLONE_NEWPID
        return
    pid = os.fork()
    if pid:
        status = os.waitpid(pid, 0)[1]
        if os.WIFSIGNALED(status):                                                    # not dumpable: no core file
            ctypes.CDLL(None).prctl(4, 0, 0, 0, 0), os.kill(os.getpid(), os.WTERMSIG(status))
        os._exit(os.waitstatus_to_exitcode(status))


def _child(task, exercise, fds, inputs, package):
    """In the forked child: run one exercise (`fds`: its source, result, arrays and output descriptors); never returns."""
    status = 1
    try:
        os.setpgid(0, 0)
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)                 # PR_SET_DUMPABLE: its own /proc entries, as before
        with os.fdopen(fds[0], "rb") as handle:
            sources = json.loads(handle.read())
        for fd in (1, 2):                                      # a file of its own: no offset or size shared
            os.dup2(fds[3], fd)                                # with the next exercise's child (a number handed on)
        for low, high in zip((2, *sorted(fds[1:3])), (*sorted(fds[1:3]), 2**16)):
            os.closerange(low + 1, high)                       # the parent's, the grader's, the other exercises'
        if task["fresh"]:
            _fresh_namespaces()
        _own_pid_namespace()
        _confine(task["user"], task["limits"], task["nproc"])
        package.replace(sources)
        mine = task["exercises"][exercise]
        records, arrays = run_cases(mine["cases"], inputs, package.package.resolve(), mine["regions"])
        with os.fdopen(fds[2], "wb") as handle:
            sys.modules["numpy"].savez(handle, **arrays)
        with os.fdopen(fds[1], "w", encoding="utf-8") as handle:
            json.dump(records, handle)
        status = 0
    except BaseException:
        traceback.print_exc()
    finally:
        with suppress(BaseException):
            sys.stdout.flush(), sys.stderr.flush()
        os._exit(status)


def _run_child(task, line, inputs, package):
    """Fork the child for one command line; its status: the exercise and its exit code (None: killed at the time limit)."""
    exercise, *fds = map(int, line.split())
    mine = {name.split("/", 1)[1]: value for name, value in inputs.items() if name.startswith(f"{exercise}/")}
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(task, exercise, fds, mine, package)
    for fd in fds:
        os.close(fd)
    waiting = os.pidfd_open(pid)
    try:
        ended = select.select([waiting], [], [], task["limits"]["timeout"])[0]
    finally:
        os.close(waiting)
    returncode = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) if ended else None
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    kill_descendants()
    return {"exercise": exercise, "returncode": returncode}


def main(argv):
    task_dir, commands_fd, status_fd = Path(argv[0]), int(argv[1]), int(argv[2])
    task = json.loads((task_dir / "task.json").read_text(encoding="utf-8"))
    sys.path[:0] = [task["package_root"], *task["site"]]
    import numpy as np

    for name in task["preload"]:                           # what the unprivileged user could not read
        with suppress(Exception):
            importlib.import_module(name)
    with np.load(task_dir / "inputs.npz", allow_pickle=False) as data:
        inputs = {key: data[key] for key in data.files}
    package = CompiledPackage(Path(task["package_root"], "minitransformer"))
    sys.meta_path.insert(0, package)
    import minitransformer.gradcheck.cases  # noqa: F401  (the package, every assigned region blank: once, here)

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)                     # PR_SET_DUMPABLE 0: no child reads or traces this one
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)                    # PR_SET_CHILD_SUBREAPER: what a child leaves comes here
    with os.fdopen(commands_fd, encoding="utf-8") as commands:
        for line in commands:
            os.write(status_fd, json.dumps(_run_child(task, line, inputs, package)).encode() + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
