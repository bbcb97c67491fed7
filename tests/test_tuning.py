"""NCCL's time model (src/graph/tuning.cc ncclTopoTuneModel), against NCCL's own output."""
import gzip
from pathlib import Path

import pytest

from conftest import build, run_cli
from nicksim.connect import connect
from nicksim.constants import parse_version, tuning_tables
from nicksim.errors import UsageError
from nicksim.params import read_params
from nicksim.search import search_graphs
from nicksim.tuning import (algo_time, format_thread_thresholds, format_tuning_table, thread_thresholds, tune_inputs,
                            tune_model)


def cost(system="dgx-h100", nodes=1, env=None, version="2.30"):
    env = env or {}
    _, paths = build(system, version, env=env, nodes=nodes)
    params = read_params(env)
    graphs = search_graphs(paths, params)
    return tune_model(tuning_tables(parse_version(version)), tune_inputs(paths, graphs, nodes), params)


def test_single_node_h100_allreduce_matches_the_worked_example():
    """nccl-facts.md 7.9: 8 x H100, 12 search channels at 30 GB/s (ring), 8 NVLS heads at 40 GB/s.

    Ring: LL 6.6 + 14 x 0.6 us; LL128 14 + 14 x 1.9; Simple 8.4 + 14 x 3.4. Bus bandwidths 141 (LL cap),
    331.2 (x0.92), 360 (12 x 30) and NVLS 8 x 40 x 0.85 x 7/8 x 2 = 476, each times 8/14 as algorithm bandwidth.
    """
    t = cost()
    assert [t.lat("AllReduce", "Ring", p) for p in ("LL", "LL128", "Simple")] == pytest.approx([15.0, 40.6, 56.0])
    assert [t.bw("AllReduce", "Ring", p) for p in ("LL", "LL128", "Simple")] == \
        pytest.approx([141 * 8 / 14, 331.2 * 8 / 14, 360 * 8 / 14])
    assert t.bw("AllReduce", "NVLS", "Simple") == pytest.approx(476 * 8 / 14)
    assert t.lat("AllReduce", "NVLS", "Simple") == 25.0


def test_combinations_nccl_never_runs_cost_nothing():
    t = cost()
    assert t.bw("AllReduce", "NVLSTree", "Simple") == 0.0        # NVLS Tree needs several nodes
    assert t.bw("AllReduce", "CollNetDirect", "Simple") == 0.0   # no CollNet plugin
    assert t.bw("Broadcast", "Tree", "Simple") == 0.0            # Broadcast and Reduce are ring-only
    assert t.bw("AllReduce", "PAT", "Simple") == 0.0             # PAT is AllGather/ReduceScatter only
    assert t.bw("AllGather", "PAT", "Simple") == 0.0             # ... and one GPU per node
    assert t.bw("AllReduce", "NVLS", "LL") == 0.0                # NVLS is Simple-only


def test_multi_node_uses_the_network_latencies_and_cpu_overhead():
    t = cost(nodes=2)
    # Ring AllReduce on 16 ranks over 2 nodes: 30 steps, 2 of them over the network (NET ring LL 2.7 us)
    # and 28 inside a node at max(NVLink ring LL 0.6, Intel net overhead 1.0) us.
    assert t.lat("AllReduce", "Ring", "LL") == pytest.approx(6.6 + 28 * 1.0 + 2 * 2.7)
    assert t.bw("AllReduce", "NVLS", "Simple") == 0.0  # NVLS across nodes needs CollNet
    assert t.bw("AllReduce", "NVLSTree", "Simple") > 0.0


def test_nccl_proto_and_algo_follow_parse_list():
    t = cost(env={"NCCL_PROTO": "^LL128"})
    assert t.bw("AllReduce", "Ring", "LL128") == 0.0 and t.bw("AllReduce", "Ring", "LL") > 0
    t = cost(env={"NCCL_ALGO": "allreduce:tree"})
    assert t.bw("AllReduce", "Ring", "Simple") == 0.0 and t.bw("AllReduce", "Tree", "Simple") > 0
    assert t.bw("AllGather", "Ring", "Simple") > 0  # other collectives untouched


def test_algo_time_adds_bytes_over_bandwidth_with_nccls_corrections():
    """ncclTopoGetAlgoTime (tuning.cc 2.30.7): lat + nBytes / (1000 x bw), tree bandwidth times the
    correction factor of its log2(nBytes/64) bucket, ring Simple latency x1.4 past the plateau."""
    env = {"NCCL_IGNORE_DISABLED_P2P": "2"}
    _, paths = build("dgx-h100", "2.30", env=env, nodes=2)
    params = read_params(env)
    inputs = tune_inputs(paths, search_graphs(paths, params), 2)
    table = tune_model(tuning_tables(parse_version("2.30")), inputs, params)
    ring = table.bw("AllReduce", "Ring", "Simple")
    lat = table.lat("AllReduce", "Ring", "Simple")
    # 1 KiB over 16 channels x 16 ranks is 4 bytes each: no plateau; 1 MiB is 4 KiB each: plateau.
    assert algo_time(table, inputs, "AllReduce", "Ring", "Simple", 1024, 16).time_us == \
        pytest.approx(lat + 1024 / (1000 * ring))
    assert algo_time(table, inputs, "AllReduce", "Ring", "Simple", 1 << 20, 16).time_us == \
        pytest.approx(lat * 1.4 + (1 << 20) / (1000 * ring))
    tree = table.bw("AllReduce", "Tree", "Simple")
    factor = tuning_tables(parse_version("2.30")).tree_correction_factor[2][14]  # log2(2^20 / 64) = 14
    assert factor == 0.5
    assert algo_time(table, inputs, "AllReduce", "Tree", "Simple", 1 << 20, 16).time_us == \
        pytest.approx(table.lat("AllReduce", "Tree", "Simple") + (1 << 20) / (1000 * tree * factor))
    assert algo_time(table, inputs, "AllReduce", "NVLS", "Simple", 1 << 20, 16).time_us == -1.0


def test_other_release_lines_are_refused_not_guessed():
    with pytest.raises(UsageError, match="not modelled yet"):
        cost(version="2.26")


def test_tuning_table_layout_is_nccls():
    lines = format_tuning_table(cost())
    assert lines[0].startswith("  Algorithm   |") and "Tree" in lines[0] and "CollNetDirect" in lines[0]
    assert lines[1].count("LL128") == 3
    assert lines[2].startswith(" Max NThreads |")
    # Tree, then Ring (LL, LL128, Simple) in the first block.
    assert lines[7].startswith("    AllReduce |") and "|    15.0/  80.6 |    40.6/ 189.3 |    56.0/ 205.7 |" in lines[7]
    assert len(lines) == 3 * 8


def test_cli_prints_the_table_when_tuning_is_selected():
    result = run_cli("search", "dgx-h100", "--env", "NCCL_DEBUG_SUBSYS=INIT,TUNING")
    assert result.returncode == 0, result.stderr
    assert " Max NThreads |" in result.stdout
    result = run_cli("search", "dgx-h100")
    assert " Max NThreads |" not in result.stdout


GOLDEN = Path(__file__).parent / "golden" / "nccl-tuning"
CASES = sorted(p.name for p in GOLDEN.glob("*.txt"))


def _golden(name):
    """(version, system, nodes, env, lines) of a table NCCL printed (rank 0, TUNING and INIT lines)."""
    lines = (GOLDEN / name).read_text().rstrip("\n").split("\n")
    env = {"NCCL_IGNORE_DISABLED_P2P": "2"}  # how the reference runs were made (no driver to ask)
    if lines[0].startswith("# env "):
        key, value = lines.pop(0)[len("# env "):].split("=", 1)
        env[key] = value
    version, system, shape = name.split(".")[0:3], name.split(".")[3], name.split(".")[4]
    return ".".join(version), system, 1 if shape == "1node" else 2, env, [line.rstrip() for line in lines]


def test_goldens_cover_the_catalog_and_the_knobs():
    systems = {_golden(n)[1] for n in CASES if n.startswith("2.30.7")}
    assert len(systems) == 7 and sum(1 for n in CASES if "env" in n) >= 6


@pytest.mark.parametrize("name", CASES)
def test_tuning_table_matches_nccl(name):
    """NCCL's own TUNING table and threadThresholds line (tuning.cc of the tag, run on the catalog
    system's XML after NCCL's own graph search)."""
    version, system, nodes, env, theirs = _golden(name)
    _, paths = build(system, version[:4], env=env, nodes=nodes)
    params = read_params(env)
    tables = tuning_tables(parse_version(version))
    ranks = nodes * len(paths.node_system.gpus())
    assert format_thread_thresholds(thread_thresholds(tables, ranks, params)) == theirs[-1]
    graphs = search_graphs(paths, params)
    ours = format_tuning_table(tune_model(tables, tune_inputs(paths, graphs, nodes), params))
    assert [line.rstrip() for line in ours] == theirs[:-1]


ALGOTIME = Path(__file__).parent / "golden" / "nccl-algotime"


@pytest.mark.parametrize("name", sorted(p.name for p in ALGOTIME.glob("*.txt.gz")))
def test_algo_time_matches_nccl(name):
    """ncclTopoGetAlgoTime of NCCL's own tuning.cc (numPipeOps 1) for every collective, algorithm,
    protocol and size 2^0..2^33 bytes on DGX H100, after NCCL's own search and tuning; NCCL computes
    in float32, so times agree to float32 precision."""
    version, system, shape = name.split(".")[:3], name.split(".")[3], name.split(".")[4]
    version, nodes = ".".join(version), 1 if shape == "1node" else 2
    env = {"NCCL_IGNORE_DISABLED_P2P": "2"}
    _, paths = build(system, version[:4], env=env, nodes=nodes)
    params = read_params(env)
    graphs = search_graphs(paths, params)
    inputs = tune_inputs(paths, graphs, nodes)
    table = tune_model(tuning_tables(parse_version(version)), inputs, params)
    n_channels = connect(paths, graphs, params, nodes, 0).n_channels
    lines = gzip.decompress((ALGOTIME / name).read_bytes()).decode().splitlines()
    assert len(lines) == 5 * len(table.algorithms) * 3 * 34
    for line in lines:
        fields = line.split()
        func, algo, proto, nbytes, time_us = fields[1], fields[2], fields[3], int(fields[4]), float(fields[5])
        ours = algo_time(table, inputs, func, algo, proto, nbytes, n_channels)
        assert ours.time_us == pytest.approx(time_us, rel=2e-6, abs=1e-6), line
        if len(fields) > 6:
            assert fields[6] == f"backup={int(ours.backup)}", line
