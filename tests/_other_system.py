"""Run Python as it is on macOS or Windows, as far as this Linux can: `python _other_system.py SYSTEM ARGS...`.

SYSTEM is darwin or win32. Before anything of minitransformer is imported, this takes out of `os` and `signal` what
Linux has and that system's Python lacks (sched_getaffinity, pidfd_open; on Windows also fork, register_at_fork,
geteuid, setuid, killpg, getloadavg, SIGKILL ...), makes `import pwd`, `resource`, `fcntl` ... fail as they fail
there, and sets `sys.platform` to SYSTEM, so that the package's `sys.platform` checks take that system's side. Then
ARGS run as `python ARGS` would: `-m minitransformer ...` (the current directory first on sys.path), or `-c CODE`.

A Python module that chooses its implementation by `sys.platform` when it is imported (subprocess, multiprocessing,
NumPy) would break on a system it is not built for: those are imported first, as this Linux has them. What this
cannot show: a call that exists everywhere but behaves otherwise (Windows refusing to rename onto an open file or a
directory), and the other systems' file paths; the CI workflow's macOS and Windows runs do.
"""

import os
import runpy
import signal
import sys

# Present on Linux, absent from that system's Python (the Python documentation's "Availability", typeshed's stubs).
# Left in place: what the standard library's modules chose when imported here (shutil's sendfile and xattr copies, subprocess's
# posix_spawn), which they call behind checks of their own.
NOT_ON_MACOS = {
    os: ["sched_getaffinity", "sched_setaffinity", "sched_getscheduler", "sched_setscheduler", "sched_getparam",
         "sched_setparam", "sched_rr_get_interval", "pidfd_open", "memfd_create", "eventfd", "eventfd_read",
         "eventfd_write", "splice", "copy_file_range",
         "posix_fadvise", "posix_fallocate", "pipe2", "getrandom", "unshare", "setns", "getresuid", "getresgid",
         "setresuid", "setresgid", "timerfd_create"],
    signal: ["SIGRTMIN", "SIGRTMAX", "SIGPOLL", "SIGPWR", "SIGSTKFLT", "pidfd_send_signal"],
}
NOT_ON_WINDOWS = {
    os: NOT_ON_MACOS[os] + [
        "fork", "forkpty", "register_at_fork", "geteuid", "getuid", "getegid", "getgid", "getgroups", "setgroups",
        "initgroups", "setuid", "setgid", "seteuid", "setegid", "setreuid", "setregid", "setsid", "getsid", "setpgid",
        "getpgid", "getpgrp", "setpgrp", "killpg", "getloadavg", "uname", "nice", "getpriority", "setpriority",
        "mkfifo", "mknod", "major", "minor", "makedev", "WIFSIGNALED", "WTERMSIG", "WIFEXITED", "WEXITSTATUS",
        "WIFSTOPPED", "WSTOPSIG", "WIFCONTINUED", "WCOREDUMP", "WNOHANG", "wait", "wait3", "wait4", "waitid", "sync",
        "chown", "lchown", "fchown", "chroot", "fchdir", "ttyname", "openpty", "sysconf", "pathconf", "fpathconf",
        "confstr", "statvfs", "fstatvfs", "sched_yield", "sched_get_priority_min", "sched_get_priority_max",
        "pread", "pwrite", "preadv", "pwritev", "readv", "writev", "lockf", "fdatasync", "tcgetpgrp", "tcsetpgrp", "ctermid", "login_tty"],
    signal: NOT_ON_MACOS[signal] + [
        "SIGKILL", "SIGSTOP", "SIGCHLD", "SIGALRM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGPIPE", "SIGCONT",
        "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGBUS", "SIGTRAP", "SIGXCPU", "SIGXFSZ", "SIGVTALRM", "SIGPROF",
        "SIGWINCH", "SIGIO", "SIGURG", "SIGSYS", "alarm", "pause", "setitimer", "getitimer", "pthread_kill",
        "pthread_sigmask", "sigwait", "sigpending", "siginterrupt", "sigtimedwait", "sigwaitinfo", "ITIMER_REAL",
        "ITIMER_VIRTUAL", "ITIMER_PROF", "SIG_BLOCK", "SIG_UNBLOCK", "SIG_SETMASK"],
}
MISSING = {"darwin": NOT_ON_MACOS, "win32": NOT_ON_WINDOWS}
# modules that system's Python does not have at all
MISSING_MODULES = {"darwin": [], "win32": ["pwd", "grp", "resource", "fcntl", "termios", "tty", "pty", "syslog",
                                           "posix"]}
# imported first, as this Linux has them: they choose their implementation by sys.platform when imported
CHOOSE_WHEN_IMPORTED = ["subprocess", "multiprocessing", "multiprocessing.connection", "multiprocessing.context",
                        "concurrent.futures.process", "asyncio", "ctypes", "ctypes.util", "numpy", "threadpoolctl",
                        "tqdm", "regex", "matplotlib.pyplot", "platform", "mimetypes", "sysconfig", "uuid", "socket", "selectors"]


def pretend(system):
    """Make this Python look like `system`'s (darwin or win32) to the code imported from here on."""
    for name in CHOOSE_WHEN_IMPORTED:
        __import__(name)
    sys.modules["sysconfig"].get_config_vars()  # read once, here, from this Linux's build (zoneinfo asks it later)
    for module, names in MISSING[system].items():
        for name in names:
            if hasattr(module, name):
                delattr(module, name)
    for name in MISSING_MODULES[system]:
        sys.modules[name] = None                # `import name` now raises ModuleNotFoundError
    sys.platform = system


def main(argv):
    system, mode, *rest = argv
    pretend(system)
    if mode == "-m":                            # as `python -m`: the current directory first on sys.path
        sys.path[0] = os.getcwd()
        sys.argv = [rest[0], *rest[1:]]
        runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
    elif mode == "-c":
        sys.path[0] = ""
        sys.argv = ["-c", *rest[1:]]
        exec(compile(rest[0], "<string>", "exec"), {"__name__": "__main__"})
    else:
        raise SystemExit(f"usage: python {sys.argv[0]} darwin|win32 -m MODULE ARGS... | -c CODE ARGS...")


if __name__ == "__main__":
    main(sys.argv[1:])
