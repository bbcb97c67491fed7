"""Plans: enqueue.cc's channel partition and chunk sizes (2.22.3, 2.30.7), the device primitive
programs (src/device/*.h, 2.30.7), and the symbolic check that every output byte is produced
exactly once."""
from __future__ import annotations

from dataclasses import replace

import pytest

from nicksim.calls import call_for_size
from nicksim.choose import _size, choose
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.plan import (ChannelProgram, PlanCheckError, Stream, check_programs, plan_call, proto_grain_nbytes,
                          rank_programs)

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")


def job_of(system="dgx-h100", nodes=1, version="2.30", env=None, **spec):
    return load_job(JobSpec(system=system, nodes=nodes, nccl_version=version, **spec), read_params(env or {}))


def forced(job, call, algorithm, protocol):
    """The plan NCCL would make had it picked `algorithm`/`protocol` (as NCCL_ALGO/NCCL_PROTO force)."""
    return plan_call(job.comm, call, _size(job.comm, call, algorithm, protocol, call.nbytes, 0.0, False))


def all_programs(job, plan, trees=None):
    trees = trees if trees is not None else (job.tree_links() if plan.algorithm == "Tree" else {})
    return {r: rank_programs(plan, job.channels.rings, trees, r, job.nvls_layout()) for r in range(job.nranks)}


def check(job, call, programs):
    check_programs(call, programs, len(job.paths.node_system.gpus()))


# Sizes that divide by nothing in particular, plus the edges.
SIZES = (0, 4, 8, 100, 1000, 12292, 65540, 1 << 20, 3 * (1 << 20) + 20)


@pytest.fixture(scope="module")
def jobs():
    return {"h100": job_of(), "h100x2": job_of(nodes=2), "rtx4090": job_of("pcie-8x-rtx4090"),
            "h100x3gpu": job_of(gpus_per_node=3), "a100x2-2.22": job_of("dgx-a100", nodes=2, version="2.22")}


@pytest.mark.parametrize("name", ["h100", "h100x2", "rtx4090", "h100x3gpu", "a100x2-2.22"])
def test_ring_plans_conserve_bytes_for_every_collective(jobs, name):
    job = jobs[name]
    for coll in COLLECTIVES:
        for size in SIZES:
            for proto in ("LL", "LL128", "Simple"):
                call = call_for_size(coll, size, "float", "sum", job.nranks - 1, job.nranks)
                plan = forced(job, call, "Ring", proto)
                assert sum(p.count for p in plan.parts) == call.count
                check_programs(call, all_programs(job, plan))


@pytest.mark.parametrize("name", ["h100", "h100x2", "h100x3gpu"])
def test_tree_all_reduce_conserves_bytes(jobs, name):
    job = jobs[name]
    trees = job.tree_links()
    for size in SIZES:
        for proto in ("LL", "LL128", "Simple"):
            call = call_for_size("all_reduce", size, "half", "sum", 0, job.nranks)
            check_programs(call, all_programs(job, forced(job, call, "Tree", proto), trees))


def test_nvls_all_reduce_conserves_bytes(jobs):
    job = jobs["h100"]
    for size in SIZES + (1 << 26,):
        call = call_for_size("all_reduce", size, "bfloat16", "sum", 0, job.nranks)
        plan = forced(job, call, "NVLS", "Simple")
        check_programs(call, all_programs(job, plan))


def test_nccls_own_choice_plans_check(jobs):
    for name in ("h100", "h100x2", "rtx4090"):
        job = jobs[name]
        for coll in COLLECTIVES:
            for k in range(3, 27, 3):
                call = call_for_size(coll, 1 << k, "float", "sum", 0, job.nranks)
                plan = plan_call(job.comm, call)
                if plan.algorithm == "PAT":
                    continue  # PAT programs are not modelled yet
                check(job, call, all_programs(job, plan))


@pytest.mark.parametrize("nodes", [2, 3, 5])
def test_nvls_tree_all_reduce_conserves_bytes(nodes):
    job = job_of(nodes=nodes)
    for size in SIZES + (1 << 26,):
        call = call_for_size("all_reduce", size, "float", "sum", 0, job.nranks)
        check(job, call, all_programs(job, forced(job, call, "NVLSTree", "Simple")))


def test_nvls_tree_without_the_broadcast_never_finishes(jobs):
    job = jobs["h100x2"]
    call = call_for_size("all_reduce", 1 << 20, "float", "sum", 0, job.nranks)
    programs = all_programs(job, forced(job, call, "NVLSTree", "Simple"))
    # rank 8 heads chunk 0 on node 1; drop its broadcast stream on its first channel
    first = programs[8][0]
    programs[8] = (ChannelProgram(first.channel, tuple(s for s in first.streams if s.name != "broadcast")),) \
        + programs[8][1:]
    with pytest.raises(PlanCheckError):
        check(job, call, programs)


def test_partition_matches_a_hand_computed_2_30_split(jobs):
    # 1 MiB float all_reduce, Ring LL on 24 channels (enqueue.cc scheduleCollTasksToPlan, 2.30.7):
    # traffic 2 MiB -> 87392 B/channel; LL cell = 32 KiB/8 = 4096 B (1024 floats), 256 cells of 32 KiB
    # traffic; 3 cells per channel would need 86 channels -> overflow: lo 3 cells, 22 mid and a hi
    # of 253 // 23 = 11 cells each.
    job = jobs["h100"]
    call = call_for_size("all_reduce", 1 << 20, "float", "sum", 0, job.nranks)
    plan = plan_call(job.comm, call)
    assert (plan.algorithm, plan.protocol, plan.max_channels) == ("Ring", "LL", 24)
    assert [p.count for p in plan.parts] == [3072] + [11264] * 23
    assert [p.channel for p in plan.parts] == list(range(24))
    assert [p.offset for p in plan.parts][:3] == [0, 3072, 3072 + 11264]


def test_chunk_sizes_per_protocol(jobs):
    job = jobs["h100"]
    call = call_for_size("all_reduce", 1 << 30, "float", "sum", 0, job.nranks)
    # calcCollChunking: stepSize = buffSize / 8; ring Simple x chunkSteps 4; LL half; LL128 15/16.
    assert forced(job, call, "Ring", "Simple").parts[0].chunk_nbytes == (4 << 20) // 8 * 4
    assert forced(job, call, "Ring", "LL").parts[0].chunk_nbytes == (512 << 10) // 8 // 2
    assert forced(job, call, "Ring", "LL128").parts[0].chunk_nbytes == 4_915_200 // 8 // 16 * 15
    assert forced(job, call, "NVLS", "Simple").parts[0].chunk_nbytes == 128 << 10
    for proto in ("LL", "LL128", "Simple"):
        part = forced(job, call, "Ring", proto).parts[0]
        assert part.chunk_count * 4 == part.chunk_nbytes // proto_grain_nbytes(proto) * proto_grain_nbytes(proto)
    bigger = job_of(env={"NCCL_BUFFSIZE": str(8 << 20)})
    assert forced(bigger, call, "Ring", "Simple").parts[0].chunk_nbytes == (8 << 20) // 8 * 4
    bcast = call_for_size("broadcast", 1 << 30, "float", "sum", 0, job.nranks)
    assert forced(job, bcast, "Ring", "Simple").parts[0].chunk_nbytes == (4 << 20) // 8  # chunkSteps 1


def test_nvls_chunks_shrink_for_small_messages(jobs):
    # calcCollChunking NVLS: per channel nBytes vs 8 heads x chunk: < 64x -> 64 KiB, < 8x -> 32 KiB,
    # < 2x -> 16 KiB. 8 MiB over 16 channels is 512 KiB per channel: < 8 x 8 x 64 KiB, not < 2 x 8 x 32 KiB.
    job = jobs["h100"]
    sizes = {}
    for size in (1 << 16, 1 << 20, 1 << 23, 1 << 30):
        call = call_for_size("all_reduce", size, "float", "sum", 0, job.nranks)
        sizes[size] = forced(job, call, "NVLS", "Simple").parts[0].chunk_nbytes
    assert sizes == {1 << 16: 16384, 1 << 20: 16384, 1 << 23: 32768, 1 << 30: 131072}


def test_plans_are_refused_before_2_22():
    job = job_of(version="2.21")
    call = call_for_size("all_reduce", 1024, "float", "sum", 0, job.nranks)
    with pytest.raises(Exception, match="2.22"):
        plan_call(job.comm, call)


# --- the check itself must be able to fail ---------------------------------------------------

@pytest.fixture(scope="module")
def ring_case(jobs):
    job = jobs["h100"]
    call = call_for_size("all_reduce", 100000, "float", "sum", 0, job.nranks)
    plan = forced(job, call, "Ring", "Simple")
    return call, all_programs(job, plan)


def _edit(programs, rank, edit):
    prog = programs[rank][0]
    prims = list(prog.streams[0].prims)
    prims = edit(prims)
    changed = ChannelProgram(prog.channel, (Stream(prog.streams[0].name, tuple(prims)),) + prog.streams[1:])
    out = dict(programs)
    out[rank] = (changed,) + programs[rank][1:]
    return out


def test_check_accepts_the_real_programs(ring_case):
    call, programs = ring_case
    check_programs(call, programs)


def test_check_catches_a_missing_primitive(ring_case):
    call, programs = ring_case
    with pytest.raises(PlanCheckError):
        check_programs(call, _edit(programs, 3, lambda p: p[:-1]))


def test_check_catches_a_wrong_peer(ring_case):
    call, programs = ring_case
    def wrong(prims):
        prims[0] = replace(prims[0], send_to=((prims[0].send_to[0] + 1) % 8,))
        return prims
    with pytest.raises(PlanCheckError):
        check_programs(call, _edit(programs, 2, wrong))


def test_check_catches_a_double_reduction(ring_case):
    call, programs = ring_case
    def twice(prims):
        i = next(i for i, p in enumerate(prims) if p.op == "recvCopySend")
        prims[i] = replace(prims[i], op="recvReduceCopySend")
        return prims
    with pytest.raises(PlanCheckError, match="twice"):
        check_programs(call, _edit(programs, 5, twice))


def test_check_catches_a_deadlock(ring_case):
    call, programs = ring_case
    def swap(prims):
        prims[0], prims[1] = prims[1], prims[0]
        return prims
    out = _edit(_edit(programs, 0, swap), 1, swap)
    with pytest.raises(PlanCheckError):
        check_programs(call, out)
