"""CollNet (SHARP) set-up and choice: init.cc / coll_net.cc / enqueue.cc of 2.18.6-2.30.7.

The time model itself is checked against NCCL's own TUNING tables and ncclTopoGetAlgoTime with an
emulated SHARP plugin (tests/test_tuning.py, goldens `*.collnet*`)."""
from __future__ import annotations

import gzip
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import run_cli
from nicksim.calls import call_for_size
from nicksim.tuning.choose import Choice, _candidates, _collnet_direct_channels, choose, forced_choice
from nicksim.graph.collnet import collnet_supported
from nicksim.errors import UsageError
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.plan.programs import ChannelProgram, Stream, rank_programs
from nicksim.plan.check import PlanCheckError, check_programs
from nicksim.plan.chunking import _chunk_nbytes, plan_call
from nicksim.plan.collnet import collnet_chunk_nbytes
from nicksim.tuning.cost import algo_time

COLLNET = {"NCCL_COLLNET_ENABLE": "1"}


def job_of(nodes=2, version="2.30", env=None, sharp=True, **spec):
    return load_job(JobSpec(system="dgx-h100", nodes=nodes, nccl_version=version, sharp=sharp, **spec),
                    read_params(COLLNET if env is None else env))


def call(job, collective, nbytes, op="sum", dtype="float"):
    return call_for_size(collective, nbytes, dtype, op, 0, job.nranks)


@pytest.fixture(scope="module")
def sharp2():
    return job_of()


def test_collnet_needs_the_plugin_the_variable_and_two_nodes():
    assert job_of().collnet.enabled
    assert not job_of(sharp=False).collnet.enabled  # no CollNet plugin behind the NICs
    assert not job_of(env={}).collnet.enabled  # NCCL_COLLNET_ENABLE defaults to 0
    assert not job_of(nodes=1).collnet.enabled  # NCCL_COLLNET_NODE_THRESHOLD 2
    assert not job_of(env={**COLLNET, "NCCL_COLLNET_NODE_THRESHOLD": "3"}).collnet.enabled
    assert job_of(nodes=4, env={**COLLNET, "NCCL_COLLNET_NODE_THRESHOLD": "3"}).collnet.enabled


def test_heads_are_the_gpus_next_to_a_nic():
    # One head per NIC rail: the first GPU of each CollNet Direct channel, duplicates dropped.
    assert job_of().collnet.heads == tuple(range(8))
    assert job_of(nics_per_node=4).collnet.n_heads == 4
    assert job_of(nics_per_node=2).collnet.n_heads == 2
    # 2.18-2.19 keep one head per channel of the single CollNet graph.
    old = job_of(version="2.19")
    assert old.collnet.n_heads == old.graphs["collnet_chain"].n_channels


def test_sharp_reduces_sum_min_max_but_not_prod():
    sharp = job_of().collnet
    for op in ("sum", "min", "max", "avg"):
        assert collnet_supported(sharp, "AllReduce", op, "bfloat16")
    assert not collnet_supported(sharp, "AllReduce", "prod", "float")
    assert not collnet_supported(sharp, "AllReduce", "sum", "f8e4m3")
    assert collnet_supported(sharp, "AllGather", "prod", "f8e4m3")  # no reduction: any type


def test_without_collnet_support_for_the_op_neither_collnet_nor_nvls_crosses_nodes(sharp2):
    priced = {a for a, _ in _candidates(sharp2.comm, call(sharp2, "all_reduce", 1 << 26))}
    assert {"CollNetDirect", "CollNetChain", "NVLS"} <= priced
    priced = {a for a, _ in _candidates(sharp2.comm, call(sharp2, "all_reduce", 1 << 26, op="prod"))}
    assert not priced & {"CollNetDirect", "CollNetChain", "NVLS"}


def test_multi_node_nvls_all_gather_is_priced_from_2_27():
    # enqueue.cc 2.19-2.26: "we only support single-node NVLS allgather and reducescatter".
    for version, expected in (("2.26", False), ("2.27", True), ("2.30", True)):
        job = job_of(version=version)
        priced = {a for a, _ in _candidates(job.comm, call(job, "all_gather", 1 << 26))}
        assert ("NVLS" in priced) == expected, version


def test_the_choice_is_the_cheapest_pair_with_collnet(sharp2):
    table = sharp2.comm.table
    for size in (1 << 10, 1 << 20, 1 << 24, 1 << 30):
        for collective, func in (("all_reduce", "AllReduce"), ("all_gather", "AllGather")):
            got = choose(sharp2.comm, call(sharp2, collective, size))
            times = [algo_time(table, sharp2.comm.inputs, func, a, p, size, sharp2.comm.n_channels).time_us
                     for a, p in _candidates(sharp2.comm, call(sharp2, collective, size))]
            assert got.time_us == min(t for t in times if t >= 0)
    # SHARP takes a 16 MiB AllGather across two DGX H100 (CollNet Direct, one NIC per GPU).
    assert choose(sharp2.comm, call(sharp2, "all_gather", 1 << 24)).algorithm == "CollNetDirect"


def test_collnet_direct_channel_tuning_by_hand():
    # enqueue.cc: nc drops while nbytes < nc x 640 threads x 8 heads x threshold, pausing at 16, 8, 4, 2, 1;
    # the threshold (512) halves on the way through 12, 6 and 3 channels.
    assert _collnet_direct_channels(1 << 30, 16, 640, 8, 512) == (16, 512)
    # 16 MiB: the threshold halves to 256 at 12 channels; 11 x 640 x 8 x 256 = 14.4 MB is below 16.8 MB: stop.
    assert _collnet_direct_channels(1 << 24, 16, 640, 8, 512) == (11, 256)
    # 1 MiB: the threshold is 64 from 3 channels on, and 2 x 640 x 8 x 64 = 655,360 is the first product below.
    assert _collnet_direct_channels(1 << 20, 16, 640, 8, 512) == (2, 64)
    assert _collnet_direct_channels(8, 16, 640, 8, 512)[0] == 1


def test_forced_collnet_direct_uses_the_direct_heads(sharp2):
    got = forced_choice(sharp2.comm, call(sharp2, "all_reduce", 1 << 24), "CollNetDirect", "Simple")
    assert sharp2.comm.collnet_direct_heads == 8
    assert (got.max_channels, got.n_threads) == (11, 640)


def test_collnet_raises_the_channel_count_when_its_chain_is_faster_inside_the_node():
    # connect.cc: nChannels + nChannels/2 when the chain's bwIntra > bwInter and ppn > 1 (4 NICs for 8 GPUs).
    plain = job_of(nics_per_node=4, env={})
    sharp = job_of(nics_per_node=4)
    chain = sharp.graphs["collnet_chain"]
    assert chain.bw_intra > chain.bw_inter
    assert sharp.channels.n_channels == plain.channels.n_channels * 3 // 2


SIZES = (0, 4, 100, 12292, 1 << 20, 3 * (1 << 20) + 20)


def all_programs(job, plan):
    return {r: rank_programs(plan, job.channels.rings, {}, r, None, job.collnet_layout()) for r in range(job.nranks)}


@pytest.mark.parametrize("shape", [{}, {"nics_per_node": 4}, {"nics_per_node": 3}, {"gpus_per_node": 1},
                                   {"gpus_per_node": 6}])
def test_collnet_all_reduce_plans_produce_every_byte_once(shape):
    # 8, 4, 3 heads for 8 GPUs; one GPU per node (no scatter, the head talks to the switch alone); 6 GPUs.
    for nodes in (2, 3):
        job = job_of(nodes=nodes, **shape)
        for algorithm in ("CollNetDirect", "CollNetChain"):
            for size in SIZES:
                c = call(job, "all_reduce", size)
                plan = plan_call(job.comm, c, forced_choice(job.comm, c, algorithm, "Simple"))
                assert all((p.offset, p.count) == (0, c.count) for p in plan.parts)  # the kernel strides by channel
                check_programs(c, all_programs(job, plan), len(job.paths.node_system.gpus()))


def test_collnet_chunk_sizes_by_hand():
    # calcCollChunking, Direct: one Simple step (512 KiB) halved while nbytes / (channels x heads x chunk) is below
    # depth (2) x 64 down to 128 KiB, then x 8 down to 64 KiB and 32 KiB.
    direct = lambda nbytes, nc: collnet_chunk_nbytes("CollNetDirect", nbytes, nc, 8, 8, 524288, 524288)  # noqa: E731
    assert direct(1 << 30, 16) == 131072  # 1 GiB / (16 x 8 x 128 KiB) = 64 >= 16
    assert direct(1 << 26, 16) == 32768  # 64 MiB: 4 chunks per head and channel at 128 KiB, 8 at 64 KiB: < 16
    # Chain: min(256 KiB, one Simple step), halved below depth (8 GPUs) x 64, x 8, x 1 chunks per channel.
    chain = lambda nbytes, nc: collnet_chunk_nbytes("CollNetChain", nbytes, nc, 8, 8, 524288, 524288)  # noqa: E731
    assert chain(1 << 26, 16) == 65536  # 64 MiB: 32 chunks of 128 KiB per channel < 8 x 8; 64 of 64 KiB are not
    assert chain(1 << 34, 16) == 262144


CHUNKS = Path(__file__).parent / "golden" / "nccl-chunk"


class _NvlsBandwidth:
    def __init__(self, bw_gbps, minor):
        self.bw_gbps = bw_gbps
        self.version = SimpleNamespace(minor=minor)

    def bw(self, func, algorithm, protocol):
        return self.bw_gbps


@pytest.mark.parametrize("name", sorted(p.name for p in CHUNKS.glob("*.collnet-nvls.txt.gz")))
def test_chunk_sizes_match_nccls_calc_coll_chunking(name):
    """CollNet Direct, CollNet Chain and NVLS chunks as NCCL's own enqueue.cc computes them
    (tests/golden/nccl-chunk/README.md), for a communicator with just the fields it reads."""
    lines = gzip.decompress((CHUNKS / name).read_bytes()).decode().split()
    rows = [lines[i:i + 9] for i in range(0, len(lines), 9)]
    assert len(rows) > 2000
    for algorithm, nch, nbytes, heads, per_node, buff, nvls_bw, nodes, chunk in rows:
        comm = SimpleNamespace(buff_nbytes=(512 * 1024, 4915200, int(buff)), nvls_chunk_nbytes=131072,
                               n_nodes=int(nodes), table=_NvlsBandwidth(float(nvls_bw), int(name.split('.')[1])), nvls_heads=int(heads),
                               collnet_direct_heads=int(heads), local_ranks=int(per_node),
                               nranks=int(nodes) * int(per_node), nvls_tree_max_chunk_nbytes=131072)
        c = call_for_size("all_reduce", 8, "float", "sum", 0, comm.nranks)
        choice = Choice(algorithm, "Simple", int(nch), 640, 0.0)
        ours = _chunk_nbytes(comm, c, choice, int(nbytes), int(nch)) // 512 * 512  # whole Simple grains
        assert ours == int(chunk), (algorithm, nch, nbytes, heads, per_node, buff, nvls_bw)


def test_the_checker_catches_a_broken_collnet_plan(sharp2):
    c = call(sharp2, "all_reduce", 1 << 20)
    plan = plan_call(sharp2.comm, c, forced_choice(sharp2.comm, c, "CollNetDirect", "Simple"))
    programs = all_programs(sharp2, plan)
    # Node 1's head 0 never hands its partial sums to the switch: node 0's head waits forever.
    progs = list(programs[8])
    first = progs[0]
    streams = tuple(Stream(s.name, ()) if s.name == "reduce" else s for s in first.streams)
    programs[8] = (ChannelProgram(first.channel, streams),) + tuple(progs[1:])
    with pytest.raises(PlanCheckError):
        check_programs(c, programs, 8)


def test_nvls_across_nodes_is_planned_like_collnet(sharp2):
    c = call(sharp2, "all_reduce", 1 << 24)
    choice = choose(sharp2.comm, c)
    assert choice.algorithm == "NVLS"
    plan = plan_call(sharp2.comm, c)
    assert len(plan.parts) == choice.max_channels
    assert all((p.offset, p.count) == (0, c.count) for p in plan.parts)


@pytest.mark.parametrize("version", ["2.22", "2.30"])
@pytest.mark.parametrize("shape", [{}, {"nics_per_node": 4}, {"gpus_per_node": 6}])
def test_nvls_across_nodes_programs_produce_every_byte_once(version, shape):
    # Heads reduce their node's chunk through the NVLink switch, add the other nodes' through the CollNet
    # switch and multicast the sum back: 8 heads, 4 heads for 8 GPUs (4 NICs), 6 GPUs.
    for nodes in (2, 3):
        job = job_of(nodes=nodes, version=version, **shape)
        for size in SIZES:
            c = call(job, "all_reduce", size)
            plan = plan_call(job.comm, c, forced_choice(job.comm, c, "NVLS", "Simple"))
            programs = {r: rank_programs(plan, job.channels.rings, {}, r, job.nvls_layout()) for r in range(job.nranks)}
            check_programs(c, programs, len(job.paths.node_system.gpus()))


def test_cli_search_and_perf_with_sharp():
    result = run_cli("search", "dgx-h100", "--sharp", "--nodes", "2", "--env", "NCCL_COLLNET_ENABLE=1")
    assert result.returncode == 0, result.stderr
    assert "16 coll channels, 16 collnet channels" in result.stdout
    assert result.stderr == ""
    one = run_cli("search", "dgx-h100", "--sharp", "--env", "NCCL_COLLNET_ENABLE=1")
    assert "Communicator has 1 nodes which is less than CollNet node threshold 2, disabling CollNet" in one.stderr
    plain = run_cli("search", "dgx-h100", "--nodes", "2", "--env", "NCCL_COLLNET_ENABLE=1")
    assert "no CollNet plugin serves these NICs" in plain.stderr
    result = run_cli("perf", "all_gather", "--sharp", "--nodes", "2", "-b", "16M", "-e", "16M",
                     "-J", "/dev/stdout", env=COLLNET)
    assert result.returncode == 0, result.stderr
    assert '"algorithm": "CollNetDirect"' in result.stdout


@pytest.mark.parametrize("shape", [{}, {"gpus_per_node": 1}, {"gpus_per_node": 6}])
def test_collnet_all_gather_and_reduce_scatter_programs_produce_every_byte_once(shape):
    # One rail per GPU: 8 and 6 GPUs with a NIC each, and one GPU per node (no local peer at all).
    for nodes in (2, 3):
        job = job_of(nodes=nodes, **shape)
        for collective in ("all_gather", "reduce_scatter"):
            for size in SIZES:
                c = call(job, collective, size)
                plan = plan_call(job.comm, c, forced_choice(job.comm, c, "CollNetDirect", "Simple"))
                check_programs(c, all_programs(job, plan), len(job.paths.node_system.gpus()))


def test_collnet_all_gather_needs_a_head_per_gpu():
    job = job_of(nics_per_node=4)
    c = call(job, "all_gather", 1 << 20)
    assert choose(job.comm, c).algorithm != "CollNetDirect"  # priced at 0: 8 local ranks, 4 heads
    plan = plan_call(job.comm, c, forced_choice(job.comm, c, "CollNetDirect", "Simple"))
    with pytest.raises(UsageError, match="needs a head per GPU"):
        all_programs(job, plan)


def test_the_checker_catches_a_lost_rail(sharp2):
    c = call(sharp2, "all_gather", 1 << 20)
    plan = plan_call(sharp2.comm, c, forced_choice(sharp2.comm, c, "CollNetDirect", "Simple"))
    programs = all_programs(sharp2, plan)
    first = programs[3][0]  # rank 3 never receives the other heads' rails on channel 0
    programs[3] = (ChannelProgram(first.channel, tuple(Stream(s.name, ()) if s.name == "gather" else s
                                                      for s in first.streams)),) + programs[3][1:]
    with pytest.raises(PlanCheckError):
        check_programs(c, programs, 8)


@pytest.mark.parametrize("shape", [{}, {"gpus_per_node": 6}])
def test_nvls_all_gather_and_reduce_scatter_across_nodes_produce_every_byte_once(shape):
    # 2.27+: head r receives rail r from the CollNet switch and multicasts it (all_gather), or reduces rail r
    # through the NVLink switch into the CollNet switch (reduce_scatter); every GPU is a head.
    for nodes in (2, 3):
        job = job_of(nodes=nodes, version="2.30", **shape)
        for collective in ("all_gather", "reduce_scatter"):
            for size in SIZES:
                c = call(job, collective, size)
                plan = plan_call(job.comm, c, forced_choice(job.comm, c, "NVLS", "Simple"))
                programs = {r: rank_programs(plan, job.channels.rings, {}, r, job.nvls_layout())
                            for r in range(job.nranks)}
                check_programs(c, programs, len(job.paths.node_system.gpus()))
    old = job_of(version="2.27")  # 2.27 prices NVLS there below CollNet Direct: 1 MiB all_gather takes NVLS
    assert choose(old.comm, call(old, "all_gather", 1 << 20)).algorithm == "NVLS"
