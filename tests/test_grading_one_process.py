"""One contained process per submission: it imports NumPy and the package once (every assigned region blank), then
forks a child per exercise. What that must not open: an exercise's child finding an answer in what the parent
holds; one exercise's child handing the next one anything (a channel between them would carry whatever one day is
in one and not the other: the reference's layernorm.backward was in relu's child, since relu's cases may call it,
until every assigned region became the student's answer there); a child that kills its parent costing more than
its exercise.
"""

import copy
import os
import platform
import sys

import pytest
import test_grading_attacks as attacks
from _grading_answers import indented, put_bodies, reference_body

from minitransformer.exercises.assignment import new_assignment
from minitransformer.exercises.grade import grade_copy
from minitransformer.exercises.isolation import LINUX_ONLY, choose_isolation
from minitransformer.exercises.make import reference_package

if sys.platform != "linux":
    pytest.skip(LINUX_ONLY, allow_module_level=True)

pytestmark = pytest.mark.sandbox

# the attack tests' copy (relu and layernorm.backward assigned: graded in the catalogue's order, relu first), levels
made, student, level, ASSIGNED = attacks.made, attacks.student, attacks.level, attacks.ASSIGNED


def points(submission, isolation):
    grades = grade_copy(submission, new_assignment(ASSIGNED, reference_package(), seed=23), isolation=isolation)
    return {g.exercise: (g.status, g.points) for g in grades}


# the end of a layernorm.backward that runs the source it was handed (`text`, or None) as the backward when it is
# another's than its own
RUN_STOLEN = indented("layernorm.backward", "if text and 'def backward' in text and 'STASH' not in text:",
                      "    import textwrap", "    scope = {'np': np}", "    exec(textwrap.dedent(text), scope)",
                      "    return scope['backward'](self, dout)", "return np.zeros_like(dout)")
# relu's process hands on what it holds of LayerNorm.backward: the student's own answer since every assigned region is
# the student's there (the reference's before); and a token, for layernorm's answer to be right only when it arrives
HAND_ON = {"the source of LayerNorm.backward": ["import inspect, minitransformer.layers.layernorm as m",
                                                 "source = inspect.getsource(m.LayerNorm.backward)"],
           "a token": ["source = TOKEN"]}
RIGHT_ONLY_WITH_THE_TOKEN = (indented("layernorm.backward", "if text != TOKEN:", "    return np.zeros_like(dout)")
                             + reference_body("layernorm.backward"))


def test_no_child_finds_an_answer_in_what_the_parent_imported(student, level):
    """Every function the child's memory holds (the parent's modules linger after the child imports anew) is tried:
    had the parent imported the reference, its LayerNorm.backward would be among them."""
    put_bodies(student, {"relu.backward": reference_body("relu.backward"), "layernorm.backward": indented(
        "layernorm.backward", "import gc, sys",
        "mine = (type(self).backward, sys._getframe().f_code)           # the method's wrapper (core/contract.py), this",
        "for found in gc.get_objects():",
        "    if getattr(found, '__qualname__', '') == 'LayerNorm.backward' and found not in mine[:1] \\",
        "            and found.__code__ is not mine[1]:",
        "        try:",
        "            return found(self, dout)",
        "        except NotImplementedError:",
        "            pass",
        "return np.zeros_like(dout)")})
    assert points(student, level) == {"relu": ("ok", 1), "layernorm": ("wrong", 0)}


# Where relu's child leaves the reference's layernorm.backward (its source, as its own module has it), and where
# layernorm's child looks for it: (relu's lines, layernorm's lines setting `text`)
CHANNELS = {
    "a file in /tmp": (["open(STASH, 'w').write(source)"],
                       ["text = open(STASH).read() if os.path.exists(STASH) else None"]),
    "System V shared memory": (
        ["libc = ctypes.CDLL(None)", "libc.shmat.restype = ctypes.c_void_p",
         "address = libc.shmat(libc.shmget(KEY, 1 << 16, 0o1666), None, 0)",
         "ctypes.memmove(address, source.encode() + b'\\0', len(source) + 1)"],
        ["libc = ctypes.CDLL(None)", "libc.shmat.restype = ctypes.c_void_p", "found = libc.shmget(KEY, 0, 0o666)",
         "text = ctypes.string_at(libc.shmat(found, None, 0)).decode() if found >= 0 else None"]),
    "a daemon": (
        ["if os.fork() == 0:", "    try:", "        os.setsid()", "        if os.fork() == 0:",
         "            server = socket.socket(socket.AF_UNIX)", "            server.bind('\\0' + STASH)",
         "            server.listen(1)", "            while True:",
         "                server.accept()[0].sendall(source.encode())", "    finally:", "        os._exit(0)",
         "time.sleep(0.5)"],
        ["try:", "    client = socket.socket(socket.AF_UNIX)", "    client.connect('\\0' + STASH)",
         "    text = client.makefile().read()", "except OSError:", "    text = None"]),
    # a module global of NumPy's: the next child is forked from the parent, which never saw it
    "a module global of NumPy's": (["np.stash = source"], ["text = getattr(np, 'stash', None)"]),
    # the grader's stderr file, which every child writes as its fd 2: reopened for reading through /proc
    "the shared stderr file": (
        ["os.write(2, f'{STASH}{source}{STASH}'.encode())"],
        ["try:", "    seen = open('/proc/self/fd/2').read().split(STASH)", "    text = seen[1] if len(seen) > 2 else None",
         "except OSError:", "    text = None"]),
    # a key in the user's (or the session's) kernel keyring outlives every process (x86-64 system call numbers)
    **{f"the {ring} keyring": (
        [f"added = ctypes.CDLL(None).syscall(248, b'user', STASH.encode(), source.encode(), len(source), {spec})",
         "ctypes.CDLL(None).syscall(250, 15, ctypes.c_long(added), 60)"],          # KEYCTL_SET_TIMEOUT: gone in 60 s
        ["libc, buffer = ctypes.CDLL(None), ctypes.create_string_buffer(1 << 16)",
         f"found = libc.syscall(250, 10, ctypes.c_long({spec}), b'user', STASH.encode(), 0)",
         "size = libc.syscall(250, 11, ctypes.c_long(found), buffer, 1 << 16) if found > 0 else -1",
         "text = buffer.raw[:size].decode() if size > 0 else None"]) for ring, spec in (("user", -4), ("session", -3))},
}


def handing_on(student, stash, channel, what, then):
    """relu.backward hands `what` (HAND_ON) on through `channel` (CHANNELS) and is right; layernorm.backward takes
    `text` from there and does `then`."""
    head = ["import ctypes, os, socket, time", f"STASH, KEY, TOKEN = {stash!r}, {0x5EED0000 + os.getpid() % 0xFFFF}, "
            f"'token {os.getpid()}'"]
    leave, find = CHANNELS[channel]
    put_bodies(student, {"relu.backward": indented("relu.backward", *head, *HAND_ON[what], *leave)
                         + reference_body("relu.backward"),
                         "layernorm.backward": indented("layernorm.backward", *head, *find) + then})


@pytest.mark.parametrize("channel", sorted(CHANNELS))
def test_one_exercise_cannot_hand_the_next_anything(student, level, channel):
    if "keyring" in channel and platform.machine() != "x86_64":
        pytest.skip("the attack's system call numbers are x86-64's")
    if level == "process" and channel in ("a file in /tmp", "System V shared memory"):
        pytest.skip("the fallback shares /tmp and System V IPC between processes, as its guarantee line says "
                    "(the control below shows the answer works there)")
    if level == "process" and channel == "the shared stderr file" and os.geteuid() != 0:
        pytest.skip("the fallback run by the grader's own user: its files are the student's to read")
    handing_on(student, f"/tmp/minitransformer-stash-{os.getpid()}", channel, "a token", RIGHT_ONLY_WITH_THE_TOKEN)
    assert points(student, level) == {"relu": ("ok", 1), "layernorm": ("wrong", 0)}


@pytest.mark.parametrize(("what", "then", "layernorm"), [
    ("a token", RIGHT_ONLY_WITH_THE_TOKEN, ("ok", 1)),                # the channel is real there
    ("the source of LayerNorm.backward", RUN_STOLEN, ("wrong", 0))],  # yet carries no reference: it is not in relu's
    ids=["a token", "the source of LayerNorm.backward"])
def test_the_control_where_tmp_is_shared(student, what, then, layernorm):
    """Under the fallback, which shares /tmp, a token relu's process leaves there reaches layernorm's; what relu's
    process holds of LayerNorm.backward is the student's own answer (the reference's before: it took the point)."""
    stash = f"/tmp/minitransformer-stash-control-{os.getpid()}"
    handing_on(student, stash, "a file in /tmp", what, then)
    try:
        assert points(student, "process") == {"relu": ("ok", 1), "layernorm": layernorm}
    finally:
        if os.path.exists(stash):
            os.remove(stash)


def test_a_child_that_kills_its_parent_costs_only_its_exercise(student, level):
    """Run as the grader's own user, the rest of the submission is graded in a new contained process. (Under root the
    child is pid 1 of a pid namespace of its own: its parent pid reads 0, and the runner is out of its reach.)"""
    isolation = copy.copy(choose_isolation(level, reference_package()))     # bubblewrap's is shared: a copy
    isolation.user = None
    put_bodies(student, {"relu.backward": indented("relu.backward", "import os, signal",
                                                   "os.kill(os.getppid(), signal.SIGKILL)"),
                         "layernorm.backward": reference_body("layernorm.backward")})
    grades = points(student, isolation)
    assert grades["relu"][0] == "crashed" and grades["relu"][1] == 0
    assert grades["layernorm"] == ("ok", 1)


def test_no_number_reaches_the_next_exercise_through_a_descriptor_they_share(student, level):
    """A descriptor the children shared would share its offset and size: a number for relu's child, which holds the
    reference's layernorm.backward, to hand on (which of a student's candidate answers is the right one). Here
    layernorm's answer is the reference's only when relu's number arrives."""
    put_bodies(student, {
        "relu.backward": indented("relu.backward", "import inspect, os, minitransformer.layers.layernorm as m",
                                  "right = 'def backward' in inspect.getsource(m.LayerNorm.backward)",
                                  "os.lseek(2, 987654320 + right, 0), os.ftruncate(1, 4240 + right)")
        + reference_body("relu.backward"),
        "layernorm.backward": indented("layernorm.backward", "import os",
                                       "if os.lseek(2, 0, 1) != 987654321 and os.fstat(1).st_size != 4241:",
                                       "    return np.zeros_like(dout)") + reference_body("layernorm.backward")})
    assert points(student, level) == {"relu": ("ok", 1), "layernorm": ("wrong", 0)}


def test_a_child_that_segfaults_costs_its_exercise_and_says_the_signal(student, level):
    """The child's end is told as it was (under root, by the pid namespace's parent that waits for it)."""
    put_bodies(student, {"relu.backward": indented("relu.backward", "import ctypes", "ctypes.string_at(0)"),
                         "layernorm.backward": reference_body("layernorm.backward")})
    (relu, layernorm) = grade_copy(student, new_assignment(ASSIGNED, reference_package(), seed=23), isolation=level)
    assert (relu.status, relu.points, layernorm.status, layernorm.points) == ("crashed", 0, "ok", 1)
    assert relu.problems[0].startswith("the grading process ended with exit code -11")
