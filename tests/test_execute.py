"""Plans run for real: every rank a thread, every connection shared memory, every byte checked."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from nicksim.calls import Call
from nicksim.tuning.choose import forced_choice
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.plan.chunking import plan_call
from nicksim.plan.programs import rank_programs
from nicksim.plan.p2p import p2p_setup
from nicksim.realhw.execute import HOST_OPS, ExecuteError, links_of, open_links, run_programs
from nicksim.realhw.kernels import storage_dtype
from nicksim.realhw.shm import ShmRing, segment_name
from nicksim.realhw.runner import count_wrong, expected_output, rank_input, slot_nbytes

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")


def host_job(nranks: int):
    """A PCIe host whose GPUs cannot reach each other (SHM between every pair): a CPU-only box."""
    return load_job(JobSpec(system="pcie-8x-rtx4090", gpus_per_node=nranks, nccl_version="2.30"), read_params({}))


def run_all(job, plan, tag: str, timeout_s: float = 20, idle_rank: int | None = None, programs=None, gpu=None):
    """Every rank in its own thread; `idle_rank` sets up its connections and then runs nothing;
    with `gpu` (a cuda_ipc.GpuRuntime), its rings and kernels."""
    call = plan.call
    programs, sends, recvs = rank_setup(job, plan, programs)
    barrier = threading.Barrier(call.nranks)
    errors = {}

    def rank_main(r):
        try:
            links = open_links(programs[r], r, tag, plan.protocol, slot_nbytes(job, plan), timeout_s, barrier.wait,
                               gpu=gpu)
            try:
                if r != idle_rank:
                    run_programs(call, programs[r], r, links, sends[r], recvs[r], timeout_s,
                                 ops=gpu.ops if gpu is not None else HOST_OPS)
            finally:
                for ring in links.values():
                    ring.close()
        except Exception as err:  # reported by the test, per rank
            errors[r] = err
            barrier.abort()

    in_threads(rank_main, call.nranks)
    return sends, recvs, errors


def rank_setup(job, plan, programs=None):
    """Every rank's programs (the plan's, unless given), send buffer and zeroed receive buffer."""
    call = plan.call
    trees = job.tree_links() if plan.algorithm == "Tree" else {}
    programs = programs or {r: rank_programs(plan, job.channels.rings, trees, r) for r in range(call.nranks)}
    sends = [rank_input(call, r) for r in range(call.nranks)]
    out_n = call.count * (call.nranks if call.collective in ("all_gather", "alltoall") else 1)
    return programs, sends, [np.zeros(out_n, storage_dtype(call.dtype)) for _ in range(call.nranks)]


def in_threads(rank_main, nranks: int, timeout_s: float = 120) -> None:
    """rank_main(r) for every rank, each in its own thread, all joined."""
    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(nranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout_s)


def check(job, plan, tag, programs=None):
    sends, recvs, errors = run_all(job, plan, tag, programs=programs)
    assert not errors, errors
    call = plan.call
    for r in range(call.nranks):
        assert count_wrong(call, recvs[r], expected_output(call, r, sends)) == 0, f"rank {r}"
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"nicksim-{tag}")]


@pytest.mark.parametrize("nranks", [2, 3, 4])
@pytest.mark.parametrize("protocol", ["LL", "LL128", "Simple"])
def test_every_collective_on_the_ring_delivers_every_element(nranks, protocol):
    job = host_job(nranks)
    for collective in COLLECTIVES:
        for count in (1, 1000, 65539, (1 << 20) + 3):
            call = Call(collective, count, "int32", "sum" if collective in ("all_reduce", "reduce_scatter", "reduce")
                        else "none", 1 if collective in ("broadcast", "reduce") else -1, nranks)
            plan = plan_call(job.comm, call, forced_choice(job.comm, call, "Ring", protocol))
            check(job, plan, f"t{os.getpid()}{nranks}{protocol}{collective}{count}")


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double",
                                   "bfloat16"])
def test_every_type_and_operator_through_all_reduce_and_reduce_scatter(dtype):
    job = host_job(3)
    for op in ("sum", "prod", "max", "min", "avg"):
        for collective, count in (("all_reduce", 12345), ("reduce_scatter", 4099)):
            call = Call(collective, count, dtype, op, -1, 3)
            check(job, plan_call(job.comm, call), f"t{os.getpid()}{dtype}{op}{collective}")


def test_every_collective_on_eight_ranks_at_an_odd_size():
    job = host_job(8)
    for collective in COLLECTIVES:
        call = Call(collective, 100003, "float", "sum" if collective in ("all_reduce", "reduce_scatter", "reduce")
                    else "none", 5 if collective in ("broadcast", "reduce") else -1, 8)
        check(job, plan_call(job.comm, call), f"t{os.getpid()}eight{collective}")


def test_tree_all_reduce_runs_too():
    job = host_job(4)
    call = Call("all_reduce", 70001, "int64", "sum", -1, 4)
    for protocol in ("LL", "Simple"):
        check(job, plan_call(job.comm, call, forced_choice(job.comm, call, "Tree", protocol)),
              f"t{os.getpid()}tree{protocol}")


def test_a_rank_that_never_runs_is_named_by_the_others():
    job = host_job(3)
    call = Call("all_reduce", 1000, "int32", "sum", -1, 3)
    _, _, errors = run_all(job, plan_call(job.comm, call), f"t{os.getpid()}idle", timeout_s=1, idle_rank=2)
    assert set(errors) == {0, 1} and all(isinstance(e, ExecuteError) for e in errors.values())
    # Rank 0 receives from rank 2 on the ring (its predecessor), so it waits for rank 2 by name.
    assert "waiting for rank 2 to send" in errors[0].line()
    assert errors[0].line().startswith("run: rank 0 moved nothing for 1 s: channel ")


def test_a_rank_dying_while_connections_are_made_leaves_no_segment():
    """Rank 2 makes its receiving segments and dies before the first barrier completes, as a
    SIGKILL would leave it: the others stop and remove every segment of the job, its too."""
    job = host_job(3)
    call = Call("all_reduce", 1000, "int32", "sum", -1, 3)
    plan = plan_call(job.comm, call)
    tag = f"t{os.getpid()}dying"
    programs = {r: rank_programs(plan, job.channels.rings, {}, r) for r in range(3)}
    barrier = threading.Barrier(3)
    recv_keys, _ = links_of(programs[2], 2)
    for key in recv_keys:
        ShmRing.create(segment_name(tag, *key), plan.step_nbytes, "dead rank")  # never unlinked by rank 2
    errors = {}

    def survivor(r):
        try:
            open_links(programs[r], r, tag, plan.protocol, slot_nbytes(job, plan), 5, barrier.wait)
        except threading.BrokenBarrierError as err:
            errors[r] = err

    threads = [threading.Thread(target=survivor, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    barrier.abort()  # the dead rank's bootstrap connection closes
    for t in threads:
        t.join(timeout=30)
    assert set(errors) == {0, 1}
    assert [n for n in os.listdir("/dev/shm") if n.startswith(f"nicksim-{tag}-")] == []


@pytest.mark.parametrize("nranks", [2, 3, 4, 8])
def test_alltoall_and_sendrecv_deliver_every_piece(nranks):
    """Point-to-point plans (plan_p2p.py): alltoall sends each rank a piece to itself too, so a
    rank holds both ends of that connection."""
    job = host_job(nranks)
    setup = p2p_setup(job)
    for collective in ("alltoall", "sendrecv"):
        for count in (1, 4099, (1 << 18) + 5):
            call = Call(collective, count, "half", "none", -1, nranks)
            programs = {r: setup.programs(call, r) for r in range(nranks)}
            check(job, setup.plan_record(call, programs[0]), f"t{os.getpid()}p2p{nranks}{collective}{count}", programs)
