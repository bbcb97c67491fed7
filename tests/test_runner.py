"""`nicksim run`: real processes on this host, joined by shared memory, reported as nccl-tests does."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nicksim.calls import Call, call_for_size
from nicksim.constants import DEFAULT_VERSION
from nicksim.errors import UsageError
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.plan.chunking import plan_call
from nicksim.plan.programs import rank_programs
from nicksim.realhw.cuda_kernels import gpu_unavailable
from nicksim.realhw.runner import (HOST_SYSTEM, count_wrong, expected_output, free_port, host_id, node_layout,
                                   rank_input)
from nicksim.realhw.verbs import verbs_unavailable
from nicksim.formats.report import read_results
from test_bootstrap import GUARD_S

REPO = Path(__file__).resolve().parent.parent


def nicksim(*args, env=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "nicksim", *args], cwd=REPO, env=env or dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def segments() -> set[str]:
    return {f for f in os.listdir("/dev/shm") if f.startswith("nicksim-")}


def leaked(before: set[str]) -> set[str]:
    """Segments of `nicksim run` jobs made since `before` whose job is over. A run's segment names
    start with its job's tag, rank 0's pid then the bootstrap port (runner.run_rank), so one whose
    rank 0 is gone was left behind; a job still running in another pytest worker is not counted,
    nor are the segments other tests name themselves (t<pid>..., g<pid>..., ib<pid>...)."""
    def over(name: str) -> bool:
        tag = re.match(r"nicksim-(\d+)-\d+-", name)
        return tag is not None and not Path(f"/proc/{tag[1]}").exists()
    return {name for name in segments() - before if over(name)}


@pytest.mark.parametrize("collective, nranks, extra", [
    ("all_reduce", 3, ["-d", "int32", "-o", "max"]), ("all_gather", 2, []), ("reduce_scatter", 4, ["-d", "half"]),
    ("broadcast", 3, ["-r", "2"]), ("reduce", 2, ["-d", "bfloat16", "-r", "1"]), ("all_reduce", 8, ["-o", "avg"]),
    ("alltoall", 3, ["-d", "int8"]), ("alltoall", 8, []), ("sendrecv", 4, ["-d", "double"]), ("sendrecv", 2, []),
])
def test_run_prints_nccl_tests_table_and_every_element_is_right(collective, nranks, extra, tmp_path):
    before = segments()
    proc = nicksim("run", collective, "-np", str(nranks), "-b", "1K", "-e", "1M", "-f", "32", "-n", "2", "-w", "1",
                   "-c", "1", "-J", str(tmp_path / "run.json"), *extra)
    out, err = proc.communicate(timeout=GUARD_S)
    assert proc.returncode == 0, err
    table = read_results(out, "run")[0]
    dtype = extra[extra.index("-d") + 1] if "-d" in extra else "float"
    # nccl-tests' size column: all_gather and reduce_scatter round each rank's piece to 16 bytes.
    sizes = [call_for_size(collective, s, dtype, "sum", 0, nranks).nbytes for s in (1024, 32768, 1 << 20)]
    assert [row.nbytes for row in table.rows] == sizes and len(sizes) == 3
    assert all(row.out_of_place.nwrong == 0 and row.in_place.nwrong == 0 for row in table.rows)
    assert "# Out of bounds values : 0 OK" in out
    assert out.splitlines()[1] == f"# nicksim: not used here: GPU kernels and CUDA IPC ({gpu_unavailable()}); " \
                                  f"IB verbs ({verbs_unavailable()})"
    assert (tmp_path / "run.json").exists()
    assert not leaked(before)


def test_without_a_launcher_it_needs_np():
    proc = nicksim("run", "all_reduce", env={k: v for k, v in os.environ.items()
                                             if k not in ("RANK", "WORLD_SIZE", "NICKSIM_COMM_ID")})
    _, err = proc.communicate(timeout=GUARD_S)
    assert proc.returncode == 2
    assert err.strip() == ("nicksim: error: nicksim run: no launcher started this process and -np is not given "
                           "(valid: -np N, or run under torchrun, mpirun or srun)")


@pytest.mark.parametrize("device", ["gpu", "tpu"])
def test_a_device_that_cannot_be_used_is_said_once_before_any_rank_starts(device):
    proc = nicksim("run", "all_reduce", "-np", "2", "-b", "1K", "-e", "1K", "-c", "1",
                   env=dict(os.environ, NICKSIM_DEVICE=device))
    out, err = proc.communicate(timeout=GUARD_S)
    if device == "gpu" and gpu_unavailable().startswith("CuPy sees"):  # a host with a GPU: it runs there
        assert proc.returncode == 0, err
        assert "GPUs (CUDA IPC, CuPy kernels)" in out.splitlines()[0]
        return
    assert proc.returncode == 2
    want = (f"nicksim: error: cuda: NICKSIM_DEVICE=gpu, but {gpu_unavailable()} (valid: a host with an NVIDIA GPU "
            "and pip install 'nicksim[gpu]', or NICKSIM_DEVICE=cpu)") if device == "gpu" else \
        "nicksim: error: NICKSIM_DEVICE: NICKSIM_DEVICE=tpu (valid: cpu or gpu)"
    assert err.strip() == want


def launched(rank: int, size: int, port: int, *args, **env):
    """A rank as torchrun would start it."""
    environ = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank),
                   NICKSIM_COMM_ID=f"127.0.0.1:{port}", **env)
    return nicksim("run", "all_reduce", "-b", "1M", "-e", "1M", *args, env=environ)


def test_ranks_with_different_nccl_proto_stop_with_the_same_line():
    port = free_port()
    procs = [launched(0, 2, port, NCCL_PROTO="Simple"), launched(1, 2, port, NCCL_PROTO="LL")]
    errs = [p.communicate(timeout=GUARD_S)[1].strip().splitlines()[-1] for p in procs]
    assert [p.returncode for p in procs] == [2, 2]
    assert errs[0] == errs[1]
    assert errs[0].startswith("nicksim: error: plan: rank 1 built another plan than rank 0:")
    assert "protocol LL on rank 1, Simple on rank 0" in errs[0]


def test_a_killed_rank_stops_the_others_within_the_timeout_and_leaves_no_segment():
    before = segments()
    port = free_port()
    procs = [launched(r, 3, port, "-n", "100000", NICKSIM_TIMEOUT="3") for r in range(3)]
    # Rank 0 prints its header once every rank has joined; then rank 2 dies, connecting or mid-collective.
    assert procs[0].stdout.readline().startswith("# nicksim run all_reduce: 3 ranks")
    procs[2].send_signal(signal.SIGKILL)
    errs = []
    for p in procs[:2]:
        _, err = p.communicate(timeout=GUARD_S)
        assert p.returncode == 2, err
        errs.append(err.strip())
    dead = "rank 2 closed its connection (the process ended or was killed)"
    assert errs == [f"nicksim: error: bootstrap: {dead}", f"nicksim: error: bootstrap: rank 1 stopped: {dead}"]
    procs[2].wait(timeout=GUARD_S)
    assert not leaked(before)


def test_the_check_counts_wrong_elements():
    call = Call("all_reduce", 1000, "int32", "sum", -1, 3)
    sends = [rank_input(call, r) for r in range(3)]
    want = expected_output(call, 0, sends)
    got = want.copy()
    assert count_wrong(call, got, want) == 0
    got[[3, 500]] += 1
    assert count_wrong(call, got, want) == 2
    # A floating average may differ by its order of additions, not by more.
    call = Call("all_reduce", 4, "half", "avg", -1, 3)
    want = np.array([1.0, 2.0, -1.0, 0.5], np.float16)
    assert count_wrong(call, want + np.float16(2 ** -10), want) == 0
    assert count_wrong(call, want + np.float16(0.25), want) == 4


def test_ctrl_c_stops_every_rank_and_leaves_nothing():
    before = segments()
    # a foreground job's SIGINT, whatever the test run inherited (a suite started in a script's
    # background comes with SIGINT ignored)
    proc = nicksim("run", "all_reduce", "-np", "3", "-b", "1M", "-e", "1M", "-n", "100000",
                   start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().startswith("# nicksim run all_reduce: 3 ranks")
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    _, err = proc.communicate(timeout=GUARD_S)
    assert proc.returncode == 130 and "nicksim: interrupted" in err
    leftover = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert leftover == []
    assert not leaked(before)


def test_more_ranks_than_the_host_plan_holds_is_refused_before_any_starts():
    proc = nicksim("run", "all_reduce", "-np", "9")
    out, err = proc.communicate(timeout=GUARD_S)
    assert proc.returncode == 2 and out == ""
    assert err.strip() == ("nicksim: error: -np: -np 9 ranks on this host (valid: at most 8: a host is planned "
                           "as pcie-8x-rtx4090, whose GPUs join by shared memory)")


def test_ranks_are_grouped_into_nodes_by_host():
    assert node_layout(["a", "a", "b", "b"]) == (0, 0, 1, 1)
    assert node_layout(["x"] * 3) == (0, 0, 0)
    with pytest.raises(UsageError, match=r"unevenly or out of order \(2 on host 0, 1 on host 1\)"):
        node_layout(["a", "b", "a"])
    with pytest.raises(UsageError, match="out of order"):
        node_layout(["a", "b", "a", "b"])


def test_nccl_hostid_names_the_host():
    assert host_id(read_params({"NCCL_HOSTID": "rack3-node7"})) == "rack3-node7"
    assert host_id(read_params({})) == host_id(read_params({})) != ""




def test_trace_records_every_step_of_every_rank(tmp_path):
    """--trace: one Chrome trace of the largest size, each pass over slots an event; per rank and
    channel the events cover exactly the steps its programs take."""
    trace = tmp_path / "trace.json"
    proc = nicksim("run", "all_reduce", "-np", "3", "-b", "48K", "-e", "3M", "-f", "64", "-n", "1", "-w", "0",
                   "--trace", str(trace))
    _, err = proc.communicate(timeout=GUARD_S)
    assert proc.returncode == 0, err
    doc = json.loads(trace.read_text())
    other = doc["otherData"]
    assert other["engine"] == "real" and other["nranks"] == 3 and other["bytes"] == 3 << 20
    job = load_job(JobSpec(system=HOST_SYSTEM, gpus_per_node=3, nccl_version=str(DEFAULT_VERSION.line)),
                   read_params({}))
    call = call_for_size("all_reduce", 3 << 20, "float", "sum", 0, 3)
    plan = plan_call(job.comm, call)
    assert (other["algorithm"], other["nchannels"]) == (plan.algorithm, plan.n_channels)
    step_elems = plan.step_nbytes // 4
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in spans)
    for rank in range(3):
        for prog in rank_programs(plan, job.channels.rings, {}, rank):
            want = sum(max(1, -(-p.nelem // step_elems)) for s in prog.streams for p in s.prims)
            got = [e["args"]["steps"] for e in spans if e["pid"] == rank and e["args"]["channel"] == prog.channel]
            assert sum(b - a for a, b in got) == want, (rank, prog.channel)


def test_perf_engine_real_runs_another_systems_plans_and_checks_them():
    """perf --engine real: the job's own plans (here dgx-h100's rings, 4 GPUs), a process per rank."""
    proc = nicksim("perf", "all_reduce", "--engine", "real", "--system", "dgx-h100", "--gpus-per-node", "4",
                   "-b", "100K", "-e", "1M", "-f", "10", "-n", "1", "-w", "0", "-c", "1",
                   env=dict(os.environ, NCCL_ALGO="Ring"))
    out, err = proc.communicate(timeout=GUARD_S)
    assert proc.returncode == 0, err
    assert out.startswith("# nicksim perf all_reduce: the plans of dgx-h100 (4 ranks, 1 node(s)) run by 4 ranks on "
                          "this host (shared memory), NCCL 2.30 plans")
    rows = read_results(out, "perf")[0].rows
    assert len(rows) == 2 and all(r.out_of_place.nwrong == 0 and r.in_place.nwrong == 0 for r in rows)


def test_perf_engine_real_refuses_what_it_cannot_run():
    proc = nicksim("perf", "all_reduce", "--engine", "real", "--system", "dgx-h100", "--gpus-per-node", "2",
                   "-b", "64M", "-e", "64M", env=dict(os.environ, NCCL_ALGO="NVLS"))
    _, err = proc.communicate(timeout=GUARD_S)
    assert proc.returncode == 2  # said once, before any rank starts
    assert err.strip() == (
        "nicksim: error: plan: the real backend cannot run NVLS's nvlsScatter on channel 0: it reaches a switch "
        "(NVLink SHARP or CollNet), not a rank (valid: ring, tree and point-to-point plans (NCCL_ALGO=Ring or Tree))")
    proc = nicksim("perf", "all_reduce", "--engine", "real", "--plan")
    _, err = proc.communicate(timeout=GUARD_S)
    assert proc.returncode == 2 and err.strip() == ("nicksim: error: --plan: --plan is for the model and DES engines "
                                                    "(valid: --engine model or des)")


def test_perf_engine_real_refuses_nvlstree_before_any_rank_starts():
    """Two DGX H100 nodes plan NVLSTree (the programs every engine takes from plan.build); its
    reduction happens in the NVSwitch, which no process stands in for: one line, nothing run."""
    proc = nicksim("perf", "all_reduce", "--engine", "real", "--nodes", "2", "-b", "64M", "-e", "64M",
                   env=dict(os.environ, NCCL_ALGO="NVLSTree"))
    out, err = proc.communicate(timeout=GUARD_S)
    assert proc.returncode == 2 and out == ""
    assert err.strip() == (
        "nicksim: error: plan: the real backend cannot run NVLSTree's nvlsScatter on channel 0: it reaches a switch "
        "(NVLink SHARP or CollNet), not a rank (valid: ring, tree and point-to-point plans (NCCL_ALGO=Ring or Tree))")
