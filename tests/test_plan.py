"""Plans: enqueue.cc's channel partition and chunk sizes (2.18.5, 2.19.4, 2.20.5, 2.21.5, 2.22.3,
2.30.7), the device primitive programs (src/device/*.h, 2.30.7; the striped loops of 2.18.5 and
2.19.4), and the symbolic check that every output byte is produced exactly once."""
from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from nicksim.calls import Call, call_for_size
from nicksim.tuning.choose import Choice, forced_choice
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.plan.programs import ChannelProgram, Stream, _nvls_tree_allreduce, rank_programs
from nicksim.plan.check import PlanCheckError, check_programs
from nicksim.plan.chunking import _chunk_nbytes, plan_call, proto_grain_nbytes

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
CHUNK_INFO = Path(__file__).parent / "golden" / "nccl-chunk"


def job_of(system="dgx-h100", nodes=1, version="2.30", env=None, **spec):
    return load_job(JobSpec(system=system, nodes=nodes, nccl_version=version, **spec), read_params(env or {}))


def forced(job, call, algorithm, protocol):
    """The plan NCCL would make had it picked `algorithm`/`protocol` (as NCCL_ALGO/NCCL_PROTO force)."""
    return plan_call(job.comm, call, forced_choice(job.comm, call, algorithm, protocol))


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
            "h100x3gpu": job_of(gpus_per_node=3), "a100x2-2.22": job_of("dgx-a100", nodes=2, version="2.22"),
            "h100x8x1gpu": job_of(nodes=8, gpus_per_node=1)}


def check_ring_plans(job):
    """Every collective's ring plan in every protocol, at sizes that divide by nothing in particular."""
    for coll in COLLECTIVES:
        for size in SIZES:
            for proto in ("LL", "LL128", "Simple"):
                call = call_for_size(coll, size, "float", "sum", job.nranks - 1, job.nranks)
                plan = forced(job, call, "Ring", proto)
                # A striped plan (2.18-2.19) gives every channel the whole count.
                assert sum(p.count for p in plan.parts) == call.count * (plan.n_channels if plan.striped else 1)
                check_programs(call, all_programs(job, plan))


@pytest.mark.parametrize("name", ["h100", "h100x2", "rtx4090", "h100x3gpu", "a100x2-2.22"])
def test_ring_plans_conserve_bytes_for_every_collective(jobs, name):
    check_ring_plans(jobs[name])


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


def test_nvls_all_reduce_on_an_nvl72_rack_conserves_bytes():
    # One NVLS domain of 72 GPUs with 32 heads (NCCL_MAX_NVLS_ARITY): the other 40 ranks scatter
    # and gather only; every element is still reduced once and delivered to every rank.
    job = job_of("gb200-nvl72")
    assert job.nranks == 72 and len(job.nvls_layout()[1]) == 32
    for size in (1000, 1 << 20, 1 << 28):
        call = call_for_size("all_reduce", size, "float", "sum", 0, job.nranks)
        plan = forced(job, call, "NVLS", "Simple")
        programs = all_programs(job, plan)
        assert sum(1 for progs in programs.values() if any(s.name == "reduce" for p in progs for s in p.streams)) == 32
        check_programs(call, programs)


def test_nccls_own_choice_plans_check(jobs):
    for name in ("h100", "h100x2", "rtx4090", "h100x8x1gpu"):
        job = jobs[name]
        for coll in COLLECTIVES:
            for k in range(3, 27, 3):
                call = call_for_size(coll, 1 << k, "float", "sum", 0, job.nranks)
                check(job, call, all_programs(job, plan_call(job.comm, call)))


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
    # 1 MiB float all_reduce, Ring LL on 24 channels (enqueue.cc, 2.30.7): LL's task traffic counts
    # four-fold (ncclPrepareTasks), 2 MiB x 4 = 8 MiB -> 349536 B per channel (rounded to 16); LL
    # cells are 32 KiB / 8 = 4096 B (1024 floats) of 32 KiB traffic: 11 cells per channel, so 23
    # channels of 11 cells and a last one with the remaining 3.
    job = jobs["h100"]
    call = call_for_size("all_reduce", 1 << 20, "float", "sum", 0, job.nranks)
    plan = plan_call(job.comm, call)
    assert (plan.algorithm, plan.protocol, plan.max_channels) == ("Ring", "LL", 24)
    assert [p.count for p in plan.parts] == [11264] * 23 + [3072]
    assert [p.channel for p in plan.parts] == list(range(24))
    assert [p.offset for p in plan.parts][:3] == [0, 11264, 2 * 11264]


def test_partition_matches_a_hand_computed_2_22_split():
    # The same call on 2.22.3: traffic 2 MiB / 24 = 87381 B per channel, 16-byte cells of 32 B
    # traffic: the first channel takes floor(87381/32) = 2730 cells, 22 more take ceil = 2731, the
    # last the remaining 2724 (x 4 floats each).
    job = job_of(version="2.22")
    call = call_for_size("all_reduce", 1 << 20, "float", "sum", 0, job.nranks)
    plan = forced(job, call, "Ring", "LL")
    assert plan.max_channels == 24
    assert [p.count for p in plan.parts] == [10920] + [10924] * 22 + [10896]


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


def _nelems(programs, rank, channel, stream=0):
    return [p.nelem for p in programs[rank][channel].streams[stream].prims]


def test_2_18_ring_chunks_by_hand():
    # all_reduce.h runRing (v2.18.5), 8 ranks, 2 channels, each channel given the whole count.
    job = job_of(version="2.18")
    # Simple, 544 threads: 1000 floats share 2 x 8 ways as 63, rounded up to (544 - 32) x 8 B = 1024
    # floats, so channel 0's chunk 0 carries everything and every other step moves nothing.
    call = Call("all_reduce", 1000, "float", "sum", -1, 8)
    plan = plan_call(job.comm, call, Choice("Ring", "Simple", 2, 544, 0.0))
    assert plan.striped and [p.count for p in plan.parts] == [1000, 1000]
    programs = all_programs(job, plan)
    # Rank 0 owns chunk 0: its eighth step (recvReduceCopySend) finishes all 1000 floats.
    assert _nelems(programs, 0, 0) == [0] * 7 + [1000] + [0] * 7
    assert _nelems(programs, 0, 1) == [0] * 15
    # LL, 512 threads: 100,000 floats in whole minimum chunks of 512 x 2 floats: ceil(100,000 / (2 x 8
    # x 1024)) x 1024 = 7,168; chunk c of channel b starts at (2c + b) x 7,168 (calcOffset). On
    # channel 1 rank 0 finishes chunk 0 at 7,168; its first send, chunk 7 at 15 x 7,168, lies past
    # the end and moves nothing.
    call = Call("all_reduce", 100000, "float", "sum", -1, 8)
    plan = plan_call(job.comm, call, Choice("Ring", "LL", 2, 512, 0.0))
    prims = all_programs(job, plan)[0][1].streams[0].prims
    assert [(p.op, p.offset, p.nelem) for p in (prims[0], prims[7])] == [("send", 15 * 7168, 0),
                                                                       ("recvReduceCopySend", 7168, 7168)]
    check_programs(call, all_programs(job, plan))


def _striped_text(minor, row):
    """Our plan for one row of VERSION.striped.txt.gz, in the form the harness hashed: per channel
    of rank 1, each thread group's (offset, nelem) calls; all_gather and broadcast in bytes (the
    kernels run them on int8); the reduce and broadcast groups' offsets as -1 (2.18's recvSend
    takes a count only)."""
    algo, proto, coll, elem, per_node, nodes, nch, nt, count, bw = row[:10]
    elem, per_node, nodes, nch, nt, count = int(elem), int(per_node), int(nodes), int(nch), int(nt), int(count)
    nranks = per_node * nodes
    # NVLSTree starts from a Simple step; 2.19 caps it at 64 KiB from 4 nodes (enqueue.cc computeColl).
    tree_max = 65536 if nodes >= 4 and minor >= 19 else (4 << 20) // 8
    table = SimpleNamespace(bw=lambda *_: float(bw), version=SimpleNamespace(minor=minor))
    comm = SimpleNamespace(buff_nbytes=(512 * 1024, 4915200, 4 << 20), nvls_chunk_nbytes=131072, n_nodes=nodes,
                           table=table, nvls_heads=per_node, nranks=nranks, nvls_tree_max_chunk_nbytes=tree_max,
                           nvls_channels=nch, n_channels=nch, collnet_direct_heads=0, local_ranks=per_node)
    dtype = {2: "half", 4: "float", 8: "double"}[elem]
    call = Call(coll, count, dtype, "none" if coll in ("all_gather", "broadcast") else "sum",
                0 if coll in ("broadcast", "reduce") else -1, nranks)
    plan = plan_call(comm, call, Choice(algo, proto, nch, nt, 0.0))
    if algo == "NVLSTree":  # the harness's rank 1 has a parent node, and a child from 3 nodes
        children = (2 * per_node + 1,) if nodes > 2 else ()
        streams = [_nvls_tree_allreduce(plan, part, 1, per_node, 0, children) for part in plan.parts]
    else:
        trees = {c: {1: (0, (2, -1, -1))} for c in range(nch)}
        streams = [prog.streams for prog in rank_programs(plan, (tuple(range(nranks)),), trees, 1,
                                                          (per_node, tuple(range(per_node))))]
    scale = elem if coll in ("all_gather", "broadcast") else 1
    text = []
    for channel in streams:
        text.append("b")
        for stream in channel:
            blind = stream.name in ("reduce", "bcast", "broadcast")
            text.append("|" + "".join(f"{-1 if blind else p.offset * scale},{p.nelem * scale};" for p in stream.prims))
    return "".join(text)


def _fnv1a64(text: str) -> str:
    h = 1469598103934665603
    for byte in text.encode():
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


@pytest.mark.parametrize("name", ["2.18.5.striped.txt.gz", "2.19.4.striped.txt.gz"])
def test_2_18_and_2_19_plans_match_nccls_own_kernel_loops(name):
    """Every channel's primitive calls as NCCL's own computeColl and kernel loops make them, run
    on the host (tests/golden/nccl-chunk/README.md): ring all_reduce, all_gather, reduce_scatter,
    broadcast and reduce in LL, LL128 and Simple, tree all_reduce split up and down, NVLS within
    and across nodes, NVLSTree."""
    minor = int(name.split(".")[1])
    rows = [row.split() for row in gzip.decompress((CHUNK_INFO / name).read_bytes()).decode().split("\n") if row]
    assert len(rows) == 7830
    wrong = [" ".join(row[:10]) for row in rows if _fnv1a64(_striped_text(minor, row)) != row[-1]]
    assert not wrong, f"{len(wrong)} cases differ, first: {wrong[0]}"


def test_2_21_splits_the_bytes_evenly_in_whole_alignment_units():
    # addCBDCollToPlan (enqueue.cc v2.21.5): 1 MiB of floats over 24 channels is 43,691 B a
    # channel, 43,696 at 16 B; LL with 512 threads aligns to 8 B x 512 = 1024 floats
    # (computeCollAlignCount), so each channel takes ceil(10,924 / 1024) x 1024 = 11,264 floats:
    # 23 channels, the last 262,144 - 23 x 11,264 = 3,072.
    job = job_of(version="2.21")
    call = call_for_size("all_reduce", 1 << 20, "float", "sum", 0, job.nranks)
    plan = forced(job, call, "Ring", "LL")
    assert (plan.max_channels, plan.n_threads) == (24, 512)
    assert [p.count for p in plan.parts] == [11264] * 23 + [3072]
    assert [p.offset for p in plan.parts[:3]] == [0, 11264, 22528]
    # computeCollChunkInfo: the LL chunk is half a step whatever the size.
    assert {p.chunk_nbytes for p in plan.parts} == {(512 << 10) // 8 // 2}


def test_2_21_last_ring_chunk_is_a_whole_simple_alignment_unit():
    # computeCollLastChunkInfo: what is left after whole loops of nRanks x chunkCount, divided
    # by the ranks and rounded up to NCCL_SIMPLE_ALIGNMENT (4096 B = 1024 floats); 2.22 rounds to 16 B.
    sizes = {}
    for version in ("2.21", "2.22"):
        job = job_of(version=version)
        call = call_for_size("all_reduce", 100 << 20, "float", "sum", 0, job.nranks)
        plan = forced(job, call, "Ring", "Simple")
        programs = all_programs(job, plan)
        sends = [p.nelem for p in programs[0][0].streams[0].prims if p.op == "send"]
        sizes[version] = sends[-1]
        check_programs(call, programs)
    assert sizes["2.21"] % 1024 == 0 and sizes["2.22"] % 1024 != 0


@pytest.mark.parametrize("version", ["2.18", "2.19", "2.20", "2.21"])
def test_2_18_to_2_21_plans_conserve_bytes(version):
    jobs = {"h100": job_of(version=version), "h100x2": job_of(nodes=2, version=version),
            "a100": job_of("dgx-a100", version=version), "h100x3gpu": job_of(gpus_per_node=3, version=version)}
    for job in jobs.values():
        check_ring_plans(job)
        for k in range(3, 27, 4):
            for coll in COLLECTIVES:
                call = call_for_size(coll, 1 << k, "float", "sum", 0, job.nranks)
                check(job, call, all_programs(job, plan_call(job.comm, call)))
    for size in SIZES + (1 << 26,):
        call = call_for_size("all_reduce", size, "half", "sum", 0, 8)
        for proto in ("LL", "LL128", "Simple"):
            check_programs(call, all_programs(jobs["h100"], forced(jobs["h100"], call, "Tree", proto)))
        check_programs(call, all_programs(jobs["h100"], forced(jobs["h100"], call, "NVLS", "Simple")))
        call = call_for_size("all_reduce", size, "float", "sum", 0, 16)
        check(jobs["h100x2"], call, all_programs(jobs["h100x2"], forced(jobs["h100x2"], call, "NVLSTree", "Simple")))


@pytest.mark.parametrize("name", ["2.20.5.chunkinfo.txt.gz", "2.21.5.chunkinfo.txt.gz"])
def test_2_20_and_2_21_chunks_match_nccls_compute_coll_chunk_info(name):
    """Ring, Tree, NVLS and NVLSTree chunks as 2.20.5's and 2.21.5's own enqueue.cc computes them
    for a whole call over its channels (tests/golden/nccl-chunk/README.md)."""
    minor = int(name.split(".")[1])
    rows = gzip.decompress((CHUNK_INFO / name).read_bytes()).decode().split("\n")
    rows = [row.split() for row in rows if row]
    assert len(rows) == 72900
    for algorithm, protocol, nch, nbytes, nodes, buff, nvls_bw, chunk in rows:
        nodes, buff = int(nodes), int(buff)
        # NCCL_NVLSTREE_MAX_CHUNKSIZE's default: 64 KiB from 4 nodes, else where NVLSTree starts.
        tree_max = 65536 if nodes >= 4 else (buff // 8 if minor == 20 else 131072)
        table = SimpleNamespace(bw=lambda *_, b=float(nvls_bw): b, version=SimpleNamespace(minor=minor))
        comm = SimpleNamespace(buff_nbytes=(512 * 1024, 4915200, buff), nvls_chunk_nbytes=131072, n_nodes=nodes,
                               table=table, nvls_heads=8, nranks=nodes * 8, nvls_tree_max_chunk_nbytes=tree_max)
        call = call_for_size("all_reduce", 8, "float", "sum", 0, comm.nranks)
        ours = _chunk_nbytes(comm, call, Choice(algorithm, protocol, int(nch), 640, 0.0), int(nbytes), int(nch))
        assert ours == int(chunk), (algorithm, protocol, nch, nbytes, nodes, buff, nvls_bw)


def test_2_20_nvls_tree_chunks_start_from_a_whole_step():
    # computeCollChunkInfo NVLS_TREE: 2.20 starts from the Simple step (4 MiB / 8) and keeps it below
    # 4 nodes; 2.21 starts from the NVLS chunk (128 KiB). Both count 16 channels x 8 heads = 128
    # concurrent ops: 1 GiB < 32 x 128 x 512 KiB halves 2.20's chunk to 256 KiB, and 1 GiB >= 16 x
    # 128 x 256 KiB keeps it there; 2.21's 128 KiB is under every rule's floor.
    chunks = {}
    for version in ("2.20", "2.21"):
        job = job_of(nodes=2, version=version)
        call = call_for_size("all_reduce", 1 << 30, "float", "sum", 0, job.nranks)
        chunks[version] = forced(job, call, "NVLSTree", "Simple").parts[0].chunk_nbytes
    assert chunks == {"2.20": 256 << 10, "2.21": 128 << 10}


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
        prims[0] = prims[0]._replace(send_to=((prims[0].send_to[0] + 1) % 8,))
        return prims
    with pytest.raises(PlanCheckError):
        check_programs(call, _edit(programs, 2, wrong))


def test_check_catches_a_double_reduction(ring_case):
    call, programs = ring_case
    def twice(prims):
        i = next(i for i, p in enumerate(prims) if p.op == "recvCopySend")
        prims[i] = prims[i]._replace(op="recvReduceCopySend")
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


# --- point-to-point (plan_p2p.py; enqueue.cc addP2pToPlan and init.cc p2pSchedule, 2.22.3-2.27.7) ---

from nicksim.graph.connect import p2p_channels, p2p_chunk_nbytes  # noqa: E402
from nicksim.plan.p2p import p2p_programs, p2p_schedule, p2p_setup, p2p_transfers, u32fp8_round  # noqa: E402


def test_p2p_schedule_enumerates_every_peer_once_in_nccls_order():
    # init.cc's comment: deltas for 16 ranks run 0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8.
    rounds = p2p_schedule(0, 1, 16, 27)
    assert [send for send, _ in rounds] == [0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8]
    assert [recv for _, recv in rounds] == [(16 - d) % 16 for d in [0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8]]
    for nodes, per_node in ((3, 8), (2, 5), (5, 3)):
        for rank in range(nodes * per_node):
            for minor in (22, 28, 30):
                rounds = p2p_schedule(rank, nodes, per_node, minor)
                assert sorted(s for s, _ in rounds) == list(range(nodes * per_node))
                assert sorted(r for _, r in rounds) == list(range(nodes * per_node))


def test_p2p_schedule_2_28_walks_groups_then_linear_local_deltas():
    # init.cc 2.28.9 ncclP2pSchedule: one node is one group, local deltas 0, 1, 2, ...
    assert [s for s, _ in p2p_schedule(0, 1, 16, 28)] == list(range(16))
    # Two nodes of 8: groups of NCCL_P2P_SCHEDULE_GROUP_SIZE 8 = the nodes. Rank 3 first meets its own
    # group (send 3+d, receive 3-d), then the other node's group at the same local offsets.
    rounds = p2p_schedule(3, 2, 8, 28)
    assert rounds[:8] == [(3, 3), (4, 2), (5, 1), (6, 0), (7, 7), (0, 6), (1, 5), (2, 4)]
    assert rounds[8:10] == [(11, 11), (12, 10)]
    # Groups of 4 split each node in two: rank 0's second group is ranks 4-7 of its own node.
    assert [s for s, _ in p2p_schedule(0, 2, 8, 28, group_size=4)][4:8] == [4, 5, 6, 7]
    # Three GPUs per node do not divide 8: gcd(8, 3) = 1, every rank is its own group, and the group
    # deltas are the quadratic sequence over 8 below 6: 0, 1, 3, (6), 2, (7), 5, 4.
    assert [s for s, _ in p2p_schedule(0, 2, 3, 28)] == [0, 1, 3, 2, 5, 4]


def test_u32fp8_keeps_four_significant_bits():
    assert u32fp8_round(131072) == 131072 and u32fp8_round(32768) == 32768
    assert u32fp8_round(100000) == 98304  # 0b11000 << 12: the top four bits of 100000
    assert u32fp8_round(5) == 5


@pytest.mark.parametrize("minor", [22, 28, 30])
@pytest.mark.parametrize("system, nodes", [("dgx-h100", 1), ("dgx-h100", 2), ("pcie-8x-rtx4090", 1), ("dgx-h100", 3)])
def test_p2p_plans_conserve_bytes(system, nodes, minor):
    params = read_params({})
    job = load_job(JobSpec(system=system, nodes=nodes, nccl_version=f"2.{minor}"), params)
    per_node = len(job.paths.node_system.gpus())
    p2p = p2p_channels(job.paths, job.channels.n_channels, nodes, params)
    chunk = p2p_chunk_nbytes(job.paths, nodes, params)
    for coll in ("alltoall", "sendrecv"):
        for size in (0, 8, 1000, 65536 * 8 + 24, 1 << 22):
            call = call_for_size(coll, size, "float", "sum", 0, job.nranks)
            programs = {r: p2p_programs(call, r, nodes, per_node, p2p.n_channels, p2p.per_peer, chunk, minor)
                        for r in range(job.nranks)}
            check_programs(call, programs, per_node)


@pytest.mark.parametrize("minor", [22, 28, 30])
@pytest.mark.parametrize("system, nodes, group", [("dgx-h100", 1, "8"), ("dgx-h100", 3, "8"), ("dgx-h100", 4, "4"),
                                                  ("pcie-8x-rtx4090", 2, "8")])
def test_ranks_of_one_peer_pattern_make_the_same_transfers_shifted(system, nodes, group, minor):
    # P2pSetup.peer_pattern stands for a rank's transfers in the DES's plan pass: two ranks with equal
    # patterns must make the same transfers, each peer as far on from its own rank.
    job = load_job(JobSpec(system=system, nodes=nodes, nccl_version=f"2.{minor}"),
                   read_params({"NCCL_P2P_SCHEDULE_GROUP_SIZE": group}))
    setup, n = p2p_setup(job), job.nranks
    for coll in ("alltoall", "sendrecv"):
        for size in (8, 65536 * 8 + 24, 1 << 22):
            call = call_for_size(coll, size, "float", "sum", 0, n)
            first: dict[tuple, int] = {}
            for rank in range(n):
                a = first.setdefault(setup.peer_pattern(call, rank), rank)
                shifted = [t._replace(peer=(t.peer + rank - a) % n) for t in setup.transfers(call, a)]
                assert setup.transfers(call, rank) == shifted, (coll, size, a, rank)
            if nodes > 1:  # ranks on other nodes do not all share one pattern: the test has pairs to compare
                assert 1 < len(first) < n


def test_an_alltoalls_own_piece_is_one_local_copy_per_part_and_no_connection_to_itself():
    # sendrecv.h runSend (2.19-2.30): peer == rank copies the send buffer into the receive buffer
    # (ReduceOrCopyMulti / reduceCopy of the whole count); the matching receive does nothing.
    call = call_for_size("alltoall", 8 * (4 << 20), "float", "sum", 0, 8)
    for rank in (0, 5):
        streams = [s for prog in p2p_programs(call, rank, 1, 8, 16, 2, 524288, 30) for s in prog.streams]
        prims = [p for s in streams for p in s.prims]
        assert not [p for p in prims if rank in p.send_to or rank in p.recv_from]
        own = [s for s in streams if "self" in s.name]
        assert own and all(len(s.prims) == 1 and s.prims[0].op == "copy" for s in own)
        piece = call.count * call.elem_nbytes
        assert sum(s.prims[0].nelem for s in own) == piece
        assert min(s.prims[0].offset for s in own) == (rank * 8 + rank) * piece


def test_p2p_protocol_chunks_and_parts_two_h100_nodes():
    params = read_params({})
    job = load_job(JobSpec(system="dgx-h100", nodes=2, nccl_version="2.22"), params)
    p2p = p2p_channels(job.paths, job.channels.n_channels, 2, params)
    assert (p2p.n_channels, p2p.per_peer) == (16, 2)

    def transfers(size):
        call = call_for_size("sendrecv", size, "float", "sum", 0, job.nranks)
        return p2p_transfers(call, 0, 2, 8, p2p.n_channels, p2p.per_peer, p2p_chunk_nbytes(job.paths, 2, params), 22)

    to_1, from_15 = transfers(16384)  # rank 0 sends to 1 (same node), receives from 15 (other node)
    assert (to_1.send, to_1.peer, from_15.send, from_15.peer) == (True, 1, False, 15)
    # LL up to nChannelsMax x 16 KiB; LL step = 512 KiB / 8, half of it data; halved over the network.
    assert (to_1.protocol, to_1.chunk_nbytes) == ("LL", 65536 // 2)
    assert (from_15.protocol, from_15.chunk_nbytes) == ("LL", 65536 // 2 // 2)
    big = transfers(1 << 26)[1]
    # Simple: the 128 KiB NET chunk; two parts (16 channels / 16 ranks -> 1 minimum, doubled while a
    # part exceeds one step, up to 2 per peer), on the round's base channel and base + 8.
    assert (big.protocol, big.chunk_nbytes, len(big.channels)) == ("Simple", 131072, 2)
    assert big.channels[1] == (big.channels[0] + 8) % 16


def test_p2p_2_28_bit_reverses_the_base_and_packs_the_parts():
    # channel.h 2.28.9: base = reverseBits(round, log2(p2pnChannels)); device.h: part p on base + p.
    # One node, 16 p2p channels, 4 MiB per peer over NVLink (512 KiB steps, up to 32 per part): rank 0's
    # round 1 (to rank 1) has base 0b1000 = 8, round 2 base 4, round 3 base 12.
    call = call_for_size("alltoall", 8 * (4 << 20), "float", "sum", 0, 8)
    transfers = [t for t in p2p_transfers(call, 0, 1, 8, 16, 2, 524288, 28) if t.send]
    assert [t.channels[0] for t in transfers[1:4]] == [8, 4, 12]
    big = p2p_transfers(call_for_size("sendrecv", 1 << 28, "float", "sum", 0, 8), 0, 1, 8, 16, 2, 524288, 28)
    assert [t.channels for t in big if t.send] == [(8, 9)]
    old = p2p_transfers(call_for_size("sendrecv", 1 << 28, "float", "sum", 0, 8), 0, 1, 8, 16, 2, 524288, 27)
    assert [t.channels for t in old if t.send] == [(1, 9)]  # 2.27: base 1, part 1 at reversed offset 8


def test_p2p_2_29_picks_ll_by_the_parts_it_uses():
    # enqueue.cc 2.29.7 addP2pToPlan sizes parts by the Simple step first: 20000 B to the other node is
    # one part (at least 64 KiB each), over the 16 KiB LL threshold; 2.22-2.28 compared against
    # nChannelsMax (2) x 16 KiB and took LL.
    call = call_for_size("sendrecv", 20000, "int8", "sum", 0, 16)

    def recv_protocol(minor):
        return [t.protocol for t in p2p_transfers(call, 0, 2, 8, 16, 2, 131072, minor) if not t.send][0]
    assert (recv_protocol(28), recv_protocol(29), recv_protocol(30)) == ("LL", "Simple", "Simple")


def test_p2p_plans_are_refused_where_not_modelled():
    call = call_for_size("alltoall", 1024, "float", "sum", 0, 16)
    with pytest.raises(Exception, match="2.22 to 2.30"):
        p2p_programs(call, 0, 2, 8, 16, 2, 131072, 21)


def test_the_efa_plugin_sets_nvls_chunks_unless_the_user_did():
    # aws-ofi-nccl 1.9.2 (platform-aws.c): setenv NCCL_NVLS_CHUNKSIZE / NCCL_NVLSTREE_MAX_CHUNKSIZE = 512 KiB
    # without overwriting; NCCL then reads them like any setting.
    def comm(env=None, fabric="efa"):
        return load_job(JobSpec(system="dgx-h100", nodes=2, fabric=fabric), read_params(env or {})).comm
    assert (comm().nvls_chunk_nbytes, comm().nvls_tree_max_chunk_nbytes) == (524288, 524288)
    assert comm({"NCCL_NVLS_CHUNKSIZE": "65536"}).nvls_chunk_nbytes == 65536
    assert (comm(fabric="ib").nvls_chunk_nbytes, comm(fabric="ib").nvls_tree_max_chunk_nbytes) == (131072, 131072)


def test_the_efa_plugin_keeps_a100_nodes_to_simple():
    # aws-ofi-nccl v1.7.3-v1.9.x platform-aws.c: where the EFA endpoint cannot deliver each aligned 128 B in
    # order, configure_nccl_proto sets NCCL_PROTO=simple without overwriting; P5 (H100) is exempt (v1.7.3-aws
    # release notes). So LL and LL128 leave the choice on A100 (p4d/p4de), stay on H100, and a user's setting wins.
    from nicksim.tuning.choose import choose
    call = call_for_size("all_reduce", 65536, "float", "sum", 0, 16)

    def protocol(system, env=None, fabric="efa"):
        job = load_job(JobSpec(system=system, nodes=2, fabric=fabric), read_params(env or {}))
        return choose(job.comm, call).protocol
    assert protocol("dgx-a100") == "Simple"
    assert protocol("dgx-a100", fabric="ib") != "Simple" and protocol("dgx-h100") != "Simple"
    assert protocol("dgx-a100", {"NCCL_PROTO": "LL"}) == "LL"
    # NCCL reads what the plugin put in the environment, and says so as for any setting.
    from nicksim.formats.joblog import setting_lines
    job = load_job(JobSpec(system="dgx-a100", nodes=2, fabric="efa"), read_params({}))
    assert ("INFO", "ENV", "NCCL_PROTO set by environment to simple") in setting_lines(job.params)


# --- PAT (plan_pat.py; collectives.h PatRSAlgorithm/PatAGAlgorithm, prims_simple.h, 2.26-2.30) ----

from nicksim.plan.chunking import ChannelPart, Plan  # noqa: E402
from nicksim.plan.pat import pat_ops, pat_shape  # noqa: E402


def test_nccl_chooses_pat_for_one_gpu_per_node_and_its_plans_check(jobs):
    # 8 nodes of one H100: NCCL 2.30 picks PAT for mid-size all_gather / reduce_scatter (ncclPatEnable:
    # one GPU per node), and the programs it would run check.
    job = jobs["h100x8x1gpu"]
    seen = set()
    for coll in ("all_gather", "reduce_scatter"):
        for size in (1 << 16, 1 << 18, 1 << 20, 3 * (1 << 19) + 96):
            call = call_for_size(coll, size, "float", "sum", 0, job.nranks)
            plan = plan_call(job.comm, call)
            seen.add(plan.algorithm)
            check(job, call, all_programs(job, plan))
    assert "PAT" in seen


@pytest.mark.parametrize("version", ["2.26", "2.28", "2.30"])
@pytest.mark.parametrize("nodes", [2, 3, 6, 8])
def test_pat_plans_conserve_bytes(version, nodes):
    job = job_of(nodes=nodes, gpus_per_node=1, version=version)
    for coll in ("all_gather", "reduce_scatter"):
        for size in SIZES + (1 << 26,):
            call = call_for_size(coll, size, "bfloat16", "sum", 0, job.nranks)
            plan = forced(job, call, "PAT", "Simple")
            assert sum(p.count for p in plan.parts) == call.count
            check(job, call, all_programs(job, plan))


def _pat_plan(coll, nranks, count, chunk_nbytes=1 << 19, elem=4):
    call = call_for_size(coll, count * elem * nranks, "float", "sum", 0, nranks)
    part = ChannelPart(0, 0, call.count, chunk_nbytes, chunk_nbytes // elem)
    return Plan(call, "PAT", "Simple", 640, 1, 0.0, (4 << 20) // 8, 1, 1, (part,), 0, 30)


@pytest.mark.parametrize("nranks", [2, 3, 5, 7, 8, 12, 17, 31, 32])
def test_pat_schedules_check_at_every_aggregation(nranks):
    # Small parts aggregate up to nranks/2 peers per buffer step and run up to 16 worker groups in
    # lockstep rounds; large ones run one piece per step.
    for coll in ("all_gather", "reduce_scatter"):
        for count in (4, 100, 4096, 70000, 300000):
            plan = _pat_plan(coll, nranks, count)
            check_programs(plan.call, {r: rank_programs(plan, (), {}, r) for r in range(nranks)})


def test_pat_aggregation_follows_the_part_size():
    # PatRSAlgorithm's constructor: double the aggregation while twice the aggregated bytes still fit
    # a step (chunk 512 KiB), up to nranks/2; then deepen by the 8 buffer steps. 64 KiB parts: 1, 2,
    # 4 -> 8 (8 x 64 KiB fills the step), then one more doubling to 16 = nranks/2.
    small = pat_shape(131072, 4, 100, 32)
    assert (small.post_freq, small.agg_factor, small.parallel_factor) == (16, 16, 16)
    big = pat_shape(131072, 4, 300000, 32)
    assert (big.post_freq, big.parallel_factor) == (1, 1)
    assert big.agg_factor == 8  # NCCL_STEPS 8 = 2^3 more doublings
    mid = pat_shape(131072, 4, 16384, 32)
    assert (mid.post_freq, mid.agg_factor, mid.parallel_factor) == (8, 16, 8)


@pytest.mark.parametrize("coll", ["all_gather", "reduce_scatter"])
def test_pat_moves_the_bandwidth_optimal_volume(coll):
    # Like a ring, PAT puts (n-1)/n of the data on each rank's wire once: a posted step carries
    # sendOffset + nelem elements (the connFifo size the proxy sends), n-1 pieces per rank in all.
    # One exception: reduce_scatter aggregating over a rank count that is not a power of two lays
    # a step out by virtual peer (sendOffset = (a % postFreq) * nelem over nrPow2 peers), so its
    # steps keep the holes of the missing peers: nrPow2 - 1 pieces.
    for nranks in (4, 6, 8, 13):
        for count in (100, 4096, 300000):
            plan = _pat_plan(coll, nranks, count)
            shape = pat_shape(plan.parts[0].chunk_count, 4, count, nranks)
            pieces = nranks - 1
            if coll == "reduce_scatter" and shape.post_freq > 1:
                pieces = shape.nranks_pow2 - 1
            for rank in range(nranks):
                sent = sum(op.slots.send_offset + op.nelem
                           for op in pat_ops(plan.call, plan.parts[0], plan.step_nbytes, rank, 30) if op.slots.post_send)
                assert sent == pieces * count


def _edit_pat(programs, rank, index, **changes):
    prog = programs[rank][0]
    prims = list(prog.streams[0].prims)
    prims[index] = prims[index]._replace(pat=replace(prims[index].pat, **changes))
    out = dict(programs)
    out[rank] = (ChannelProgram(prog.channel, (Stream("pat", tuple(prims)),)),) + programs[rank][1:]
    return out


@pytest.mark.parametrize("coll", ["all_gather", "reduce_scatter"])
def test_pat_check_catches_a_wrong_offset_or_a_missing_post(coll):
    plan = _pat_plan(coll, 8, 100)
    programs = {r: rank_programs(plan, (), {}, r) for r in range(8)}
    check_programs(plan.call, programs)
    first_send = next(i for i, p in enumerate(programs[2][0].streams[0].prims) if p.send_to)
    prim = programs[2][0].streams[0].prims[first_send]
    with pytest.raises(PlanCheckError):
        check_programs(plan.call, _edit_pat(programs, 2, first_send, send_offset=prim.pat.send_offset + prim.nelem))
    posting = next(i for i, p in enumerate(programs[5][0].streams[0].prims) if p.pat.post_send)
    with pytest.raises(PlanCheckError):
        check_programs(plan.call, _edit_pat(programs, 5, posting, post_send=False))


def test_pat_programs_are_refused_before_2_26():
    job = job_of(nodes=4, gpus_per_node=1, version="2.25")
    call = call_for_size("all_gather", 1 << 20, "float", "sum", 0, job.nranks)
    with pytest.raises(Exception, match="2.26"):
        all_programs(job, forced(job, call, "PAT", "Simple"))
