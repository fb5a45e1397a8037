"""Data parallelism on MPI (training/distributed.py): the same training on 1, 2 or 3 ranks.

The runs go through `mpiexec -n N` in a subprocess (tests/_distributed_run.py trains the compatibility
record's small run and prints rank 0's numbers); they skip, naming what to install, without mpi4py or an
`mpiexec`. What they prove:
* replicated (DDP) and sharded (ZeRO-1), on 2 ranks and on 3 (shares 3 3 2 of a batch of 8: uneven), train to
  the losses of one process to float rounding (float64: 1e-12 relative), and every rank ends with the very
  same weights, bit for bit;
* the same seed and number of ranks give the same numbers bit for bit, also across a checkpoint and resume
  (which, sharded, gathers the moments of every shard to rank 0 first);
* sharded, each rank holds the moments of its shard alone (1/N of their bytes), and the checkpoint holds
  them all, as a replicated run's;
* 2 ranks reproduce the compatibility record of 0.3's `--workers 2` (float32, with and without dropout);
* each rank limits its BLAS threads to its share of the host's cores, or to --threads-per-rank, as the run's
  first line says (threadpoolctl's threadpool_info in every rank).
In one process, with a stand-in of MPI_COMM_WORLD (`OneRankOf`: no mpi4py, no mpiexec), a rank's step against the
plain AdamW of one process on the summed gradient (uneven shards: 5 weights on 2 ranks, 8 on 3), its dropout seeds,
its rows and share of a batch, and the launchers' variables that make a process ask MPI for its rank.
"""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path

import numpy as np
import pytest

from minitransformer.commands.threads import cores_available
from minitransformer.core.parameter import Parameter
from minitransformer.objectives.language_model import evaluation_batches
from minitransformer.tokenizers import CharTokenizer
from minitransformer.training.checkpoint import read_checkpoint
from minitransformer.training.distributed import DataParallel, mpi_world, shares
from minitransformer.training.optim import AdamW
from minitransformer.training.optim.fast import FastAdamW

HERE = Path(__file__).parent
SCRIPT = HERE / "_distributed_run.py"
INSTALL = 'pip install "minitransformer[mpi]" (mpi4py and an MPI: pip install mpi4py mpich)'
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def mpiexec():
    """The mpiexec beside this Python (a venv with the mpich wheel) or on PATH; skip the test if there is none."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip(f"mpi4py is not installed: {INSTALL}")
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.skip(f"no mpiexec found: {INSTALL}")
    return found


def this_tree(environment):
    """`environment` with this tree first on PYTHONPATH: a script run by its path (tests/_distributed_run.py) then
    imports the package beside these tests, not an installed one (another checkout, or the tree a copy was made from)."""
    return {**environment, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), environment.get("PYTHONPATH")]))}


def mpi_command(ranks, *args):
    """`mpiexec -n ranks python args...`, allowed to oversubscribe the cores (3 ranks on 2 cores)."""
    return [mpiexec(), "-n", str(ranks), sys.executable, *args]


def run_ranks(ranks, request, timeout=600):
    """Rank 0's JSON line of tests/_distributed_run.py on `ranks` ranks (1: in a plain subprocess)."""
    command = mpi_command(ranks, str(SCRIPT), json.dumps(request)) if ranks > 1 else \
        [sys.executable, str(SCRIPT), json.dumps(request)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=HERE.parent,
                            env=this_tree({**os.environ, "OPENBLAS_NUM_THREADS": "1"}), encoding="utf-8")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, f"expected one JSON line from rank 0 alone, got {result.stdout!r}"
    return json.loads(lines[0])


def test_the_shares_split_a_batch_as_array_split_with_rank_0_last():
    assert [(s.start, s.stop) for s in shares(8, 3)] == [(6, 8), (0, 3), (3, 6)]      # 3 3 2: rank 0 the 2
    assert [(s.start, s.stop) for s in shares(12, 1)] == [(0, 12)]
    for batch in range(1, 13):
        for size in range(1, batch + 1):
            rows = sorted(i for part in shares(batch, size) for i in range(batch)[part])
            assert rows == list(range(batch)), (batch, size)


def test_without_mpiexec_a_process_is_rank_0_of_1_and_workers_2_is_refused(monkeypatch):
    from test_checkpoint import tiny_trainer

    for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert mpi_world() == (0, 1)
    with pytest.raises(ValueError, match=r"TrainConfig.workers is 2, but this process is one of 1 MPI rank\(s\); "
                                         r"launch it as `mpiexec -n 2"):
        tiny_trainer(workers=2)
    with pytest.raises(ValueError, match="TrainConfig.parallel must be one of"):
        tiny_trainer(parallel="zero3")


@pytest.mark.parametrize("variable", ["PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK"])
def test_a_process_that_mpich_or_open_mpi_started_asks_mpi_for_its_rank(monkeypatch, variable):
    """MPICH's launcher sets PMI_RANK and PMI_SIZE, Open MPI's OMPI_COMM_WORLD_RANK: any one of them means mpiexec
    started this process, which then asks MPI_COMM_WORLD (here a stand-in: rank 1 of 2)."""
    import minitransformer.training.distributed as distributed

    for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, "1")
    monkeypatch.setattr(distributed, "world", lambda: OneRankOf(1, 2, []))
    assert mpi_world() == (1, 2)


# ---------------------------------------------------------------- one rank's step, in one process
class OneRankOf:
    """MPI_COMM_WORLD as rank `rank` of `size` sees it, in one process (no mpi4py, no mpiexec): each collective adds
    the other ranks' part, or gathers their blocks, handed over in the order of the calls (`theirs`), as MPI defines
    it (a reduce-scatter hands rank k block k of the sum, the blocks laid end to end in rank order; an all-gather
    puts every other rank's block where its displacement says); `sent` keeps what this rank sent."""

    class Done:
        @staticmethod
        def Test():
            return True

    TYPES = {"float": np.float32, "double": np.float64}

    def __init__(self, rank, size, theirs):
        self.rank, self.size, self.theirs, self.sent = rank, size, list(theirs), []

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size

    def allgather(self, item):
        return [item] * self.size

    def Dup(self):
        return self

    def Iallreduce(self, _, buffer, op):
        self.sent.append(buffer.copy())
        buffer += self.theirs.pop(0)
        return self.Done

    def Ireduce_scatter(self, send, receive, counts, op):
        self.sent.append(send.copy())
        start = sum(counts[:self.rank])
        receive[...] = (send + self.theirs.pop(0))[start:start + counts[self.rank]]
        return self.Done

    def Iallgatherv(self, _, spec):
        data, counts, displacements, datatype = spec
        assert self.TYPES[datatype] == data.dtype, f"an all-gather of {data.dtype} sent as MPI's {datatype}"
        gathered = self.theirs.pop(0)                   # the whole array, each rank's block as it computed it
        for k in set(range(self.size)) - {self.rank}:
            block = slice(displacements[k], displacements[k] + counts[k])
            data[block] = gathered[block]
        return self.Done


def rank_of(monkeypatch, rank, size, theirs, mode="replicated", seed=0):
    """A DataParallel on rank `rank` of `size` whose collectives are OneRankOf's; (it, the stand-in)."""
    comm = OneRankOf(rank, size, theirs)
    mpi = types.SimpleNamespace(COMM_WORLD=comm, IN_PLACE="in place", SUM="sum", FLOAT="float", DOUBLE="double")
    monkeypatch.setitem(sys.modules, "mpi4py", types.SimpleNamespace(MPI=mpi))
    return DataParallel(mode, seed, 60.0, None), comm


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("grad_clip", [1.0, 0.0])
@pytest.mark.parametrize("mode", ["replicated", "sharded"])
@pytest.mark.parametrize("rank, size, weights, shard", [(1, 2, 5, (2, 5)), (2, 3, 8, (5, 8))])
@pytest.mark.parametrize("interrupted, others_interrupted", [(True, 0.0), (False, 1.0)], ids=["this-ctrl-c", "another-ctrl-c"])
def test_a_rank_adds_up_the_gradient_clips_with_the_whole_norm_and_updates_as_one_process(monkeypatch, interrupted,
                                                                                         others_interrupted, rank, size,
                                                                                         weights, shard, mode,
                                                                                         grad_clip, dtype):
    """Rank 1 of 2 with 5 weights, rank 2 of 3 with 8 (shards from k P / N rounded down: 0 2 5 and 0 2 5 8; sharded,
    the rank updates the last): the loss and gradient added up, the clipping norm that of the whole summed gradient
    (0: no clipping), the weights those of the plain AdamW on the summed gradient clipped by hand in one process;
    a rank k > 0 sends no evaluation pause of its own; a Ctrl-C on this rank or another stops every rank."""
    rng = np.random.default_rng(0)
    start, mine, theirs = (rng.standard_normal(weights).astype(dtype) for _ in range(3))
    whole = mine + theirs
    norm = math.sqrt(sum(float(g) ** 2 for g in whole))
    assert norm > 1.0                                          # so clipping at 1 changes the step
    scale = grad_clip / (norm + 1e-6) if grad_clip else 1.0
    alone = [Parameter(start[:2].copy()), Parameter(start[2:].copy())]
    alone[0].grad[...], alone[1].grad[...] = whole[:2] * scale, whole[2:] * scale
    AdamW(alone, lr=0.1).step()
    expected = np.concatenate([param.data for param in alone])
    control = [np.array([0.75, others_interrupted, 2.5])]      # the others' shares of the loss and Ctrl-Cs, rank 0's pause
    if mode == "replicated":
        collectives = [theirs]
    else:
        others = np.delete(whole, np.arange(*shard))
        collectives = [theirs, np.array([sum(float(g) ** 2 for g in others)]), expected]
    parallel, comm = rank_of(monkeypatch, rank, size, control + collectives, mode)
    optimizer = FastAdamW([Parameter(start[:2].copy()), Parameter(start[2:].copy())], lr=0.1)
    parallel.attach(optimizer)
    assert optimizer.moment_span == (shard if mode == "sharded" else (0, weights))   # ZeRO-1: its shard's moments alone
    parallel.root_pause = 2.5                                  # as the last step left it
    parallel.prepare(types.SimpleNamespace(), 0)
    parallel.interrupted = interrupted
    optimizer.grad[...] = mine
    assert parallel.reduce_clip_update(0.25, grad_clip) == 1.0
    np.testing.assert_array_equal(comm.sent[0], [0.25, float(interrupted), 0.0])
    assert parallel.root_pause == 2.5 and parallel.stop_requested
    tolerance = 1e-12 if dtype == np.float64 else 1e-6          # float32: weights of about 1 to a few ulp
    assert parallel.norm == pytest.approx(norm, rel=tolerance)
    np.testing.assert_array_equal(comm.sent[1], mine)
    if mode == "sharded":
        np.testing.assert_allclose(comm.sent[2], [sum(float(g) ** 2 for g in whole[slice(*shard)])], rtol=tolerance)
    np.testing.assert_allclose(optimizer.data, expected, rtol=tolerance, atol=tolerance)
    assert not comm.theirs, "a collective was not joined"


def test_rank_k_draws_its_dropout_masks_from_seed_3_step_k_and_rank_0_from_the_models_generator(monkeypatch):
    """The module docstring's rule: rank k > 0 at step s draws from default_rng([seed, 3, s, k]); rank 0 keeps the
    model's generator (a checkpoint saves it)."""
    for rank in (0, 1):
        model = types.SimpleNamespace(dropout_rng=np.random.default_rng(7))
        parallel, _ = rank_of(monkeypatch, rank, 2, [], seed=11)
        parallel.prepare(model, 5)
        drawn = model.dropout_rng.random(3)
        expected = np.random.default_rng(7 if rank == 0 else [11, 3, 5, 1]).random(3)
        np.testing.assert_array_equal(drawn, expected, err_msg=f"rank {rank}")


def test_each_rank_takes_its_rows_and_their_share_of_the_counted_targets(monkeypatch):
    """Rank 1 of 2 takes the first part of np.array_split's (rank 0 the last): of 5 rows, 3, a share 3/5; with the
    objective's targets per row (1 and 3 of 2 rows) its share is 1/4; an array that is not one row per window goes
    whole to every rank; one row each is allowed, fewer refused."""
    parallel, _ = rank_of(monkeypatch, 1, 2, [])
    rows = np.arange(10).reshape(5, 2)
    (mine, positions, extra), share = parallel.rows_and_share(object(), (rows, np.arange(4), "kept"))
    np.testing.assert_array_equal(mine, rows[:3])
    np.testing.assert_array_equal(positions, np.arange(4))          # not one per row: every rank's whole
    assert extra == "kept" and share == 3 / 5
    weighted = types.SimpleNamespace(row_weights=lambda batch: np.array([1.0, 3.0]))
    (mine,), share = parallel.rows_and_share(weighted, (rows[:2],))
    np.testing.assert_array_equal(mine, rows[:1])
    assert share == 1 / 4
    with pytest.raises(ValueError, match=r"DataParallel: 2 ranks for a batch of 1 rows; each rank needs at least one"):
        parallel.rows_and_share(object(), (rows[:1],))


@pytest.fixture(scope="module")
def one_process():
    return run_ranks(1, {"settings": {"dtype": "float64"}})


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("mode", ["replicated", "sharded"])
def test_ranks_train_to_the_losses_of_one_process(one_process, mode, ranks):
    got = run_ranks(ranks, {"settings": {"dtype": "float64", "parallel": mode}})
    assert got["ranks"] == ranks and got["same_weights"], "the ranks' weights differ"
    np.testing.assert_allclose(got["loss"], one_process["loss"], rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.array(got["eval"]), np.array(one_process["eval"]), rtol=1e-12, atol=0)


@pytest.mark.mpi
@pytest.mark.parametrize("mode, last", [("replicated", []), ("sharded", ["all-gather"])])
def test_each_ranks_phases_hold_the_collectives_and_add_up_to_its_steps(mode, last):
    got = run_ranks(2, {"settings": {"parallel": mode, "max_steps": 4, "eval_interval": 2}, "phases": True})
    expected = ["batch", "forward", "backward", "control", "gradient", "clip", "optimizer", *last,
                "finite check", "progress", "evaluation"]
    assert got["phases"] == [[expected, 4, True], [expected, 4, True]]


@pytest.mark.mpi
@pytest.mark.parametrize("ranks, evaluated", [(2, [4, 4]), (3, [0, 4, 4])])
def test_the_ranks_share_each_evaluation_and_find_one_process_losses(one_process, ranks, evaluated):
    """2 evaluations (steps 3 and 6) of 2 batches of each split: 8 windows batches in all, split as
    np.array_split splits each split's 2 (rank 0 the last, smallest share: none of 2 on 3 ranks), with the
    losses of one process."""
    got = run_ranks(ranks, {"settings": {"dtype": "float64", "eval_interval": 3, "max_steps": 6}})
    alone = run_ranks(1, {"settings": {"dtype": "float64", "eval_interval": 3, "max_steps": 6}})
    assert alone["evaluated"] == [8] and got["evaluated"] == evaluated
    np.testing.assert_allclose(np.array(got["eval"]), np.array(alone["eval"]), rtol=1e-12, atol=0)


class RankOfTwo:
    """Stands in for DataParallel on rank `rank` of 2, in one process: add_up hands back this rank's losses as the
    all-reduce would if the other rank's places held `others`, and keeps what it was given."""

    size = 2

    def __init__(self, rank, others):
        self.rank, self.others, self.given = rank, others, []

    def add_up(self, losses, what="the evaluation's losses"):
        self.given.append(losses.copy())
        return losses + self.others[len(self.given) - 1]


@pytest.mark.parametrize("rank", [0, 1])
def test_every_rank_takes_its_share_of_the_untrained_evaluation_and_rank_0_alone_prints_it(rank, capsys):
    """`train`'s introduction under mpiexec: each rank computes the losses of its share of the untrained model's
    windows (rank 1 the first of each split's 2 batches, rank 0 the last) and adds them up with the others'; rank 0
    alone records and prints the evaluation, which equals one process's."""
    import types

    from test_checkpoint import TEXT, tiny_trainer

    from minitransformer.commands.train import _introduce

    reference = tiny_trainer(eval_batches=2)                               # one process: every window
    alone = reference.evaluate_together()
    with reference.model.evaluating():
        lists = [reference._batch_losses(evaluation_batches(data, reference.config))
                 for data in (reference.train_data, reference.val_data)]
    mine = np.arange(2)[shares(2, 2)[rank]]                                # this rank's windows batches
    others = [np.where(np.isin(np.arange(2), mine), 0.0, losses) for losses in lists]   # the other rank's part
    trainer = tiny_trainer(eval_batches=2)
    trainer.parallel = ranks = RankOfTwo(rank, others)
    plan = types.SimpleNamespace(notes=[], config=trainer.config, tokenizer=CharTokenizer.train(TEXT),
                                 source="a test", text=TEXT, ids=[], train_data=trainer.train_data,
                                 val_data=trainer.val_data, out=None)
    _introduce(types.SimpleNamespace(sample_tokens=0), plan, trainer, types.SimpleNamespace(rank=rank, size=2))
    assert len(ranks.given) == 2, "the untrained evaluation's two collectives (train, val) were not joined"
    for given, losses in zip(ranks.given, lists):
        np.testing.assert_array_equal(given[mine], losses[mine])                  # its share, computed here
        assert not np.delete(given, mine).any(), given                            # the other rank's: left at 0
    printed = capsys.readouterr().out
    if rank == 0:
        assert trainer.history["eval"] == [[0, alone["train"], alone["val"]]], trainer.history["eval"]
        assert f"untrained: val loss {alone['val']:.4f}" in printed
    else:
        assert trainer.history["eval"] == [] and printed == ""


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["replicated", "sharded"])
def test_the_same_ranks_give_the_same_numbers_bit_for_bit_also_after_resume(tmp_path, mode):
    settings = {"parallel": mode, "dropout": 0.1, "eval_interval": 3, "max_steps": 6}
    whole = run_ranks(2, {"settings": settings})
    again = run_ranks(2, {"settings": settings})
    assert whole["loss"] == again["loss"] and whole["eval"] == again["eval"]
    run_ranks(2, {"settings": settings, "out": str(tmp_path), "steps": 3})
    resumed = run_ranks(2, {"settings": settings, "out": str(tmp_path), "resume": True})
    assert resumed["loss"] == whole["loss"] and resumed["eval"] == whole["eval"]
    assert resumed["same_weights"]


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_a_sharded_rank_keeps_its_shards_moments_and_the_checkpoint_holds_them_all(tmp_path, ranks):
    """ZeRO-1's memory: each rank holds Adam's m and v for its shard only (2 * 4P / N bytes, not 2 * 4P), while
    the checkpoint, gathered to rank 0, holds the whole moments: those of a replicated run of the same steps."""
    settings = {"dtype": "float64", "eval_interval": 5, "max_steps": 10}
    sharded = run_ranks(ranks, {"settings": {**settings, "parallel": "sharded"}, "out": str(tmp_path / "s")})
    replicated = run_ranks(ranks, {"settings": {**settings, "parallel": "replicated"}, "out": str(tmp_path / "r")})
    whole = 2 * replicated["weight_bytes"]                                  # m and v, float64, all of W
    assert replicated["state_bytes"] == [whole] * ranks
    weights = replicated["weight_bytes"] // 8
    shard = [weights * (k + 1) // ranks - weights * k // ranks for k in range(ranks)]
    assert sharded["state_bytes"] == [2 * 8 * count for count in shard], (sharded["state_bytes"], whole)
    assert sum(sharded["state_bytes"]) == whole and max(sharded["state_bytes"]) <= whole / ranks + 16
    saved = {name: read_checkpoint(tmp_path / name)[1] for name in ("s", "r")}
    moments = sorted(key for key in saved["r"] if key.startswith("optim."))
    assert moments and moments == sorted(key for key in saved["s"] if key.startswith("optim."))
    # to float rounding (the clipping norm is summed in another order), relative to the largest moment of its
    # kind: a key bias's gradient is zero up to rounding (softmax ignores a shift), so its moments are noise
    scale = {kind: max(np.abs(saved["r"][key]).max() for key in moments if key.endswith(kind)) for kind in (".m", ".v")}
    assert all(scale.values()), f"the replicated run's moments are zero: {scale}"
    for key in moments:
        np.testing.assert_allclose(saved["s"][key], saved["r"][key], rtol=1e-9, atol=1e-12 * scale[key[-2:]],
                                   err_msg=key)


@pytest.mark.mpi
@pytest.mark.parametrize("setting", ["workers2", "workers2_dropout"])
def test_two_ranks_give_the_recorded_numbers_of_0_3s_two_workers(setting):
    """tests/fixtures/compat_train_losses.json (test_compatibility.py, part c), float32, rtol 1e-6 as there."""
    recorded = json.loads((HERE / "fixtures" / "compat_train_losses.json").read_text(encoding="utf-8"))[setting]
    got = run_ranks(2, {"settings": {"dropout": 0.1 if "dropout" in setting else 0.0, "max_steps": 20,
                                     "warmup_steps": 2, "lr_decay_steps": 20}})
    np.testing.assert_allclose(got["loss"], recorded["loss"], rtol=1e-6, atol=0)
    np.testing.assert_allclose(np.array(got["eval"])[-1], np.array(recorded["eval"])[-1], rtol=1e-6, atol=0)


# ---------------------------------------------------------------- faults: a rank that stops answering or fails
def job_processes(marker):
    """{rank: pid} of the processes whose environment holds MINITRANSFORMER_TEST_JOB=marker and a PMI_RANK."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            environment = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if f"MINITRANSFORMER_TEST_JOB={marker}".encode() in environment:
            ranks = [item[len(b"PMI_RANK="):] for item in environment if item.startswith(b"PMI_RANK=")]
            if ranks and entry.name.isdigit():
                found[int(ranks[0])] = int(entry.name)
    return found


# a job's ranks are found in /proc and stopped or killed by signals that Windows lacks
FINDS_RANKS_IN_PROC = "finds a job's ranks in /proc (Linux only) to stop or kill them"


@pytest.fixture()
def jobs():
    """The jobs a test starts ((process, marker) pairs): whatever the test's outcome, ended afterwards."""
    if sys.platform != "linux":
        pytest.skip(FINDS_RANKS_IN_PROC)
    started = []
    yield started
    for process, marker in started:
        if process.poll() is None:
            process.terminate()                     # mpiexec passes SIGTERM on to the ranks
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        for pid in job_processes(marker).values():  # a stopped rank ignores SIGTERM until continued
            os.kill(pid, signal.SIGKILL)


def start_job(ranks, request, jobs):
    """Start `mpiexec -n ranks` on tests/_distributed_run.py; return (process, marker), after rank 0's first
    announced evaluation (so that every rank is past its start-up)."""
    marker = uuid.uuid4().hex
    process = subprocess.Popen(mpi_command(ranks, str(SCRIPT), json.dumps({**request, "announce": True})),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE.parent,
                               env=this_tree({**os.environ, "OPENBLAS_NUM_THREADS": "1",
                                                 "MINITRANSFORMER_TEST_JOB": marker}), encoding="utf-8")
    jobs.append((process, marker))
    for line in process.stdout:
        if line.startswith("evaluated at step"):
            return process, marker
    process.wait()
    pytest.fail(f"the job ended before its first evaluation: {process.stderr.read()}")


def assert_job_ended(process, marker, error_phrases, timeout):
    """The job ends within `timeout` s, non-zero, with our one `error:` line (naming `error_phrases`) before any
    of MPI's lines, and no process of it is left."""
    started = time.monotonic()
    _, err = process.communicate(timeout=timeout)
    assert process.returncode != 0
    lines = [line for line in err.splitlines() if line.strip()]
    ours = [index for index, line in enumerate(lines) if line.startswith("error: ")]
    assert len(ours) == 1 and ours[0] == 0, err
    for phrase in error_phrases:
        assert phrase in lines[0], (phrase, lines[0])
    deadline = time.monotonic() + 10
    while job_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not job_processes(marker), f"left behind: {job_processes(marker)}"
    return time.monotonic() - started


FAULT_RUN = {"settings": {"max_steps": 100000, "lr_decay_steps": 100000, "eval_interval": 4, "worker_timeout": 5,
                          "parallel": "sharded"}}


@pytest.mark.mpi
@pytest.mark.parametrize("silent", [1, 0], ids=["rank-1-stopped", "rank-0-stopped"])
def test_a_rank_that_stops_answering_ends_the_job_with_one_line_naming_it(tmp_path, jobs, silent):
    """3 ranks on 2 cores (oversubscribed), under this machine's load: the healthy steps never trip the
    deadline; SIGSTOP on one rank ends the job within the deadline, naming it, the checkpoint intact."""
    if sys.platform != "linux":                         # (`jobs` skips first; this says so to type checkers)
        pytest.skip(FINDS_RANKS_IN_PROC)
    out = tmp_path / "run"
    process, marker = start_job(3, {**FAULT_RUN, "out": str(out)}, jobs)
    for line in process.stdout:                           # a few evaluations and saves of healthy steps first
        if line.startswith("evaluated at step 12"):
            break
    pids = job_processes(marker)
    assert sorted(pids) == [0, 1, 2]
    os.kill(pids[silent], signal.SIGSTOP)
    assert_job_ended(process, marker, [f"rank {silent} (pid {pids[silent]}", "did not answer", "at step",
                                       "--resume"], timeout=300)
    meta = read_checkpoint(out)[0]
    assert meta["step"] >= 12 and meta["step"] % 4 == 0 and meta["train_config"]["workers"] == 3


@pytest.mark.mpi
def test_a_rank_that_fails_ends_the_job_with_one_line_naming_it(tmp_path, jobs):
    out = tmp_path / "run"
    process, marker = start_job(3, {**FAULT_RUN, "out": str(out), "fail": [2, 10]}, jobs)
    assert_job_ended(process, marker, ["rank 2 failed at step 10: RuntimeError: an injected failure"], timeout=300)
    assert read_checkpoint(out)[0]["step"] == 8


# ---------------------------------------------------------------- the train command under mpiexec
CORPUS = HERE / "fixtures" / "compat_corpus.txt"
TRAIN = ["train", "--text", str(CORPUS), "--block-size", "16", "--batch-size", "8", "--n-layers", "2", "--n-heads", "2",
         "--d-model", "32", "--d-ff", "64", "--eval-batches", "2", "--sample-tokens", "0", "--no-progress"]


def history(directory):
    return read_checkpoint(directory)[0]["history"]


@pytest.mark.mpi
def test_workers_n_runs_the_command_under_mpiexec_and_trains_as_one_process(tmp_path):
    from minitransformer.__main__ import main

    argv = TRAIN + ["--dtype", "float64", "--max-steps", "12", "--eval-interval", "6"]
    assert main(argv + ["--out", str(tmp_path / "one")]) == 0
    mpiexec()
    result = subprocess.run([sys.executable, "-m", "minitransformer", *argv, "--workers", "2", "--out",
                             str(tmp_path / "two")], capture_output=True, text=True, timeout=600, cwd=HERE.parent, encoding="utf-8")
    assert result.returncode == 0, result.stderr
    running = result.stderr.splitlines()[0]
    threads = max(1, cores_available() // 2)
    assert running.startswith(f"running: OPENBLAS_NUM_THREADS={threads} OMP_NUM_THREADS={threads} ") \
        and " -n 2 " in running, running
    assert result.stdout.startswith(f"one job of 2 MPI ranks, replicated, {threads} BLAS thread"), result.stdout
    assert result.stdout.count("corpus: ") == 1                          # rank 0 alone prints
    one, two = history(tmp_path / "one"), history(tmp_path / "two")
    np.testing.assert_allclose(two["loss"], one["loss"], rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.array(two["eval"]), np.array(one["eval"]), rtol=1e-12, atol=0)
    assert read_checkpoint(tmp_path / "two")[0]["train_config"]["workers"] == 2


@pytest.mark.mpi
@pytest.mark.parametrize("options, threads, why", [
    ([], max(1, cores_available() // 2), f"({cores_available()} cores on this host / 2 ranks on it;"),
    (["--threads-per-rank", "1", "--parallel", "sharded"], 1, "(--threads-per-rank)")], ids=["by-default", "as-chosen"])
def test_each_rank_limits_its_blas_threads_to_its_share_of_the_cores(tmp_path, options, threads, why):
    """Started by mpiexec itself, with no thread variable set: OpenBLAS starts one thread per core in every
    rank (4 threads on 2 cores for 2 ranks) until the rank limits them. The first line reports the pools as
    threadpoolctl's threadpool_info() finds them in every rank."""
    environment = {name: value for name, value in os.environ.items() if name not in THREAD_VARIABLES}
    result = subprocess.run(mpi_command(2, "-m", "minitransformer", *TRAIN, "--max-steps", "1", *options,
                                        "--out", str(tmp_path / "run")),
                            capture_output=True, text=True, timeout=600, cwd=HERE.parent, env=environment, encoding="utf-8")
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    mode = "sharded" if "sharded" in options else "replicated"
    assert first.startswith(f"one job of 2 MPI ranks, {mode}, {threads} BLAS thread{'s' if threads > 1 else ''} "
                            f"per rank {why}"), first


def test_workers_n_without_mpi_is_one_error_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    from minitransformer.__main__ import main
    from minitransformer.commands import ranks

    monkeypatch.setattr(ranks, "find_mpiexec", lambda: None)
    assert main(TRAIN + ["--workers", "2", "--out", str(tmp_path / "run")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --workers 2 runs the command under mpiexec")
    assert 'pip install "minitransformer[mpi]"' in lines[0] and not (tmp_path / "run").exists()


@pytest.mark.mpi
def test_ctrl_c_under_mpiexec_stops_every_rank_at_one_step_and_saves_there(tmp_path, jobs):
    """Sharded, so that a rank stopping at another step would leave the moments' gather waiting (and fail)."""
    constant = ["--schedule", "constant", "--eval-interval", "100000", "--parallel", "sharded"]
    marker = uuid.uuid4().hex
    process = subprocess.Popen(mpi_command(2, "-m", "minitransformer", *TRAIN, *constant, "--max-steps", "100000",
                                           "--out", str(tmp_path / "run")),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE.parent,
                               env={**os.environ, "MINITRANSFORMER_TEST_JOB": marker}, encoding="utf-8")
    jobs.append((process, marker))
    for line in process.stdout:
        if line.startswith("untrained:"):                  # rank 0 is about to train
            break
    time.sleep(3)
    process.send_signal(signal.SIGINT)                     # as the terminal's Ctrl-C reaches mpiexec
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    first = err.strip().splitlines()[0]
    assert first.startswith("interrupted at step ") and "checkpoint saved in" in first, err
    step = int(first.split("interrupted at step ")[1].split(":")[0])
    assert read_checkpoint(tmp_path / "run")[0]["step"] == step > 0
    more = ["--max-steps", str(step + 3)]
    resumed = subprocess.run(mpi_command(2, "-m", "minitransformer", *TRAIN, *more, "--resume", "--out",
                                         str(tmp_path / "run")), capture_output=True, text=True, timeout=600, encoding="utf-8")
    straight = subprocess.run(mpi_command(2, "-m", "minitransformer", *TRAIN, *constant, *more, "--out",
                                          str(tmp_path / "straight")), capture_output=True, text=True, timeout=600, encoding="utf-8")
    assert resumed.returncode == straight.returncode == 0, resumed.stderr + straight.stderr
    assert history(tmp_path / "run")["loss"] == history(tmp_path / "straight")["loss"]      # bit for bit
    other = subprocess.run(mpi_command(3, "-m", "minitransformer", *TRAIN, "--max-steps", str(step + 4), "--resume",
                                       "--out", str(tmp_path / "run")), capture_output=True, text=True, timeout=600, encoding="utf-8")
    assert other.returncode == 0, other.stderr
    assert "note: the checkpoint was trained on 2 rank(s) and continues on 3: its numbers will no longer match" \
        in other.stderr
    meta = read_checkpoint(tmp_path / "run")[0]
    assert meta["train_config"]["workers"] == meta["run"]["options"]["workers"] == 3
