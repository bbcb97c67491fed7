"""NCCL's per-call choice (enqueue.cc getAlgoInfo / topoGetAlgoInfo of each release, 2.18.6 to 2.30.7)."""
from __future__ import annotations

import pytest

from nicksim.calls import call_for_size
from nicksim.tuning.choose import _candidates, choose, nvls_supported
from nicksim.errors import UsageError
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.tuning.cost import algo_time


def job_of(system="dgx-h100", nodes=1, version="2.30", env=None, **spec):
    return load_job(JobSpec(system=system, nodes=nodes, nccl_version=version, **spec), read_params(env or {}))


@pytest.fixture(scope="module")
def h100():
    return job_of()


def ar(job, size, dtype="float", op="sum"):
    return call_for_size("all_reduce", size, dtype, op, 0, job.nranks)


def test_single_h100_node_small_messages_ring_ll_large_nvls_simple(h100):
    # What users report on one H100 node: Ring/LL for small messages, NVLS/Simple from a few MB.
    for k in range(3, 21):  # 8 B .. 1 MiB
        got = choose(h100.comm, ar(h100, 1 << k))
        assert (got.algorithm, got.protocol) == ("Ring", "LL"), 1 << k
    for k in range(22, 34):  # 4 MiB .. 8 GiB
        got = choose(h100.comm, ar(h100, 1 << k))
        assert (got.algorithm, got.protocol) == ("NVLS", "Simple"), 1 << k
        assert got.max_channels == 16  # NVLS_NCHANNELS_SM90 (transport/nvls.cc)


def test_the_choice_is_the_cheapest_priced_pair(h100):
    table = h100.comm.table
    for size in (8, 4096, 1 << 17, 1 << 21, 1 << 26, 1 << 31):
        call = ar(h100, size)
        got = choose(h100.comm, call)
        times = [algo_time(table, h100.comm.inputs, "AllReduce", a, p, size, h100.comm.n_channels).time_us
                 for a in table.algorithms if not a.startswith("CollNet") for p in ("LL", "LL128", "Simple")]
        assert got.time_us == min(t for t in times if t >= 0)


def test_ring_ll_channels_and_threads_follow_the_thread_threshold(h100):
    # Ring LL threshold = 8 B/thread x nRanks = 64; 512 threads: nc shrinks while nbytes < nc*512*64,
    # then threads halve while nbytes < nc*nt*64 and nt % 128 == 0; at least 3 warps.
    for size, nc, nt in ((8, 1, 96), (8192, 1, 128), (32768, 1, 512), (131072, 4, 512), (524288, 16, 512)):
        got = choose(h100.comm, ar(h100, size))
        assert (got.max_channels, got.n_threads) == (nc, nt), size


def test_ring_simple_gets_an_extra_warp_and_tree_all_threads():
    job = job_of(env={"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"})
    got = choose(job.comm, ar(job, 1 << 30))
    assert (got.algorithm, got.protocol, got.n_threads) == ("Ring", "Simple", 512 + 32)
    tree = job_of(env={"NCCL_ALGO": "Tree"})
    assert choose(tree.comm, ar(tree, 1 << 30)).n_threads == 640


def test_nccl_algo_and_proto_restrict_the_choice():
    job = job_of(env={"NCCL_ALGO": "^NVLS,NVLSTree"})
    for size in (1 << 10, 1 << 24, 1 << 30):
        assert choose(job.comm, ar(job, size)).algorithm != "NVLS"
    job = job_of(env={"NCCL_PROTO": "LL128"})
    assert {choose(job.comm, ar(job, 1 << k)).protocol for k in range(3, 33, 3)} == {"LL128"}


def test_nvls_disabled_falls_back_to_ring():
    job = job_of(env={"NCCL_NVLS_ENABLE": "0"})
    assert choose(job.comm, ar(job, 1 << 30)).algorithm == "Ring"


def test_two_h100_nodes_use_tree_then_nvls_tree():
    job = job_of(nodes=2)
    assert (choose(job.comm, ar(job, 8)).algorithm, choose(job.comm, ar(job, 8)).protocol) == ("Tree", "LL")
    assert choose(job.comm, ar(job, 1 << 30)).algorithm == "NVLSTree"


def test_nvls_multimem_types():
    # device.h ncclNvlsSupported (2.30.7)
    assert nvls_supported("sum", "float") and nvls_supported("max", "bfloat16")
    assert not nvls_supported("max", "float") and not nvls_supported("sum", "int8")
    assert not nvls_supported("avg", "half") and not nvls_supported("prod", "int32")


def test_unsupported_nvls_reduction_is_not_chosen(h100):
    got = choose(h100.comm, ar(h100, 1 << 30, op="max"))
    assert got.algorithm != "NVLS"


def test_fp8_rings_are_least_preferred_beyond_eight_ranks():
    job = job_of(nodes=2, env={"NCCL_ALGO": "Ring,Tree"})
    assert choose(job.comm, ar(job, 1 << 28, dtype="float")).algorithm == "Ring"
    assert choose(job.comm, ar(job, 1 << 28, dtype="f8e4m3")).algorithm == "Tree"


def test_fp8_is_refused_before_2_24():
    job = job_of(version="2.22")
    with pytest.raises(UsageError, match="2.24"):
        choose(job.comm, ar(job, 1024, dtype="f8e5m2"))


def test_point_to_point_has_no_algorithm_choice(h100):
    with pytest.raises(UsageError, match="point-to-point"):
        choose(h100.comm, call_for_size("alltoall", 1 << 20, "float", "sum", 0, h100.nranks))


@pytest.mark.parametrize("version", ["2.18", "2.23", "2.26", "2.29"])
def test_every_release_line_chooses(version):
    job = job_of(version=version)
    assert (choose(job.comm, ar(job, 8)).algorithm, choose(job.comm, ar(job, 8)).protocol) == ("Ring", "LL")


def test_ring_backup_rescues_a_call_in_2_23_not_in_2_24():
    """enqueue.cc 2.23.4 still keeps the ring's bandwidth (comm->ringbdw) as a backup when NCCL_ALGO leaves a
    call nothing it can run; 2.24.3 dropped it and fails. NVLS Tree is all that is left here, and float max
    has no multimem reduction."""
    call = {"NCCL_ALGO": "NVLSTree"}
    job = job_of(nodes=2, version="2.23", env=call)
    got = choose(job.comm, ar(job, 1 << 20, op="max"))
    assert got.algorithm == "Ring" and got.backup
    job = job_of(nodes=2, version="2.24", env=call)
    with pytest.raises(UsageError, match="no algorithm/protocol"):
        choose(job.comm, ar(job, 1 << 20, op="max"))


@pytest.mark.parametrize("version, channels", [("2.24", 16), ("2.25", 32), ("2.26", 32), ("2.27", 24), ("2.30", 24)])
def test_nvls_channels_on_one_b200_node(version, channels):
    """nvls.cc: NCCL_NVLS_NCHANNELS 16 until 2.24; NVLS_NCHANNELS_SM100 32 in 2.25-2.26; 24 in one NVLink
    domain (NVLS_NCHANNELS_SM100_NVL) from 2.27."""
    job = job_of(system="dgx-b200", version=version)
    got = choose(job.comm, ar(job, 1 << 30))
    assert (got.algorithm, got.max_channels) == ("NVLS", channels)


def test_tree_takes_every_thread_from_2_22():
    """topoGetAlgoInfo: 2.18.6 and 2.19.4 size Tree threads like the ring (512 LL threads here); from 2.22.3
    Tree always runs NCCL_MAX_NTHREADS."""
    for version, threads in (("2.18", 512), ("2.19", 512), ("2.22", 640), ("2.26", 640)):
        job = job_of(nodes=2, version=version, env={"NCCL_ALGO": "Tree"})
        got = choose(job.comm, ar(job, 4096))
        assert (got.algorithm, got.protocol, got.n_threads) == ("Tree", "LL", threads), version


def _nvls_priced(job, collective, op="sum", dtype="float"):
    call = call_for_size(collective, 1 << 26, dtype, op, 0, job.nranks)
    return {a for a, _ in _candidates(job.comm, call)} & {"NVLS", "NVLSTree"}


def test_which_calls_may_use_nvls_per_release():
    """updateCollCostTable / topoGetAlgoInfo: 2.18 asks NCCL_NVLS_SUPPORTS(type, op) only; 2.19-2.21 the
    comm's NVLS support too; 2.22-2.26 let AllGather through regardless (it is priced at -1 without an NVLS
    graph); 2.25-2.26 keep NVLS AllGather/ReduceScatter to 32 ranks, 2.27+ to 32 local ranks."""
    off = {"NCCL_NVLS_ENABLE": "0"}
    assert _nvls_priced(job_of(version="2.18", env=off), "all_reduce") == {"NVLS", "NVLSTree"}
    assert _nvls_priced(job_of(version="2.18"), "all_reduce", op="max") == set()
    assert _nvls_priced(job_of(version="2.21", env=off), "all_gather") == set()
    assert _nvls_priced(job_of(version="2.22", env=off), "all_gather") == {"NVLS", "NVLSTree"}
    assert _nvls_priced(job_of(version="2.27", env=off), "all_gather") == set()
    assert _nvls_priced(job_of(version="2.24", system="gb200-nvl72"), "all_gather") == {"NVLS", "NVLSTree"}
    assert _nvls_priced(job_of(version="2.25", system="gb200-nvl72"), "all_gather") == {"NVLSTree"}
    assert _nvls_priced(job_of(version="2.27", system="gb200-nvl72"), "all_gather") == set()
    assert _nvls_priced(job_of(version="2.27", system="gb200-nvl72"), "all_reduce") == {"NVLS", "NVLSTree"}


def test_nvls_is_initialised_only_for_enough_gpus():
    """transport/nvls.cc ncclNvlsInit: no NVLS for two GPUs or fewer until 2.27, for one from 2.28
    (checked against NCCL's own init emulation on DGX H100 with 1, 2 and 3 GPUs per node)."""
    for version, gpus, expected in (("2.22", 2, False), ("2.22", 3, True), ("2.27", 2, False),
                                    ("2.28", 1, False), ("2.28", 2, True), ("2.30", 2, True)):
        job = job_of(version=version, gpus_per_node=gpus)
        assert ("nvls" in job.graphs) == expected, (version, gpus)
        assert (job.comm.nvls_channels > 0) == expected
