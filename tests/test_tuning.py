"""NCCL's time model (src/graph/tuning.cc ncclTopoTuneModel), against NCCL's own output."""
import gzip
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import build, run_cli, searched
from nicksim.graph.collnet import COLLNET_OFF, CollNetSetup, collnet_setup
from nicksim.graph.connect import connect
from nicksim.constants import MODELLED_VERSIONS, parse_version, tuning_tables
from nicksim.params import read_params
from nicksim.graph.search import Graph
from nicksim.tuning.cost import (algo_time, format_thread_thresholds, format_tuning_table, thread_thresholds,
                                 time_model_modelled, time_model_rules, tune_inputs, tune_model)


def cost(system="dgx-h100", nodes=1, env=None, version="2.30"):
    env = env or {}
    _, paths = build(system, version, env=env, nodes=nodes)
    params = read_params(env)
    graphs = searched(paths, params)
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
    inputs = tune_inputs(paths, searched(paths, params), 2)
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


def test_every_modelled_release_has_its_time_model():
    assert all(time_model_modelled(v) for v in MODELLED_VERSIONS)
    assert (MODELLED_VERSIONS[0].line, MODELLED_VERSIONS[-1].line) == ("2.18", "2.30")


def test_what_each_release_computes_differently():
    """tuning.cc of each tag: the formulas that changed, on one and two DGX H100 nodes (12 / 8 search
    channels at 30 / 48 GB/s; NVLS 8 heads at 40 GB/s intra, 60 / 48 GB/s inter)."""
    one, two = {v: cost(version=v) for v in ("2.18", "2.23", "2.27", "2.28")}, cost(version="2.18", nodes=2)
    # 2.18: NVLS at the graph's bandwidth x5/6 (8 x 40 x 5/6), latency baseLat 23 us; only the ring
    # prices AllGather; 2.19+ take min(bwIntra, bwInter).
    assert one["2.18"].bw("AllReduce", "NVLS", "Simple") == pytest.approx(8 * 40 * 5 / 6)
    assert one["2.18"].lat("AllReduce", "NVLS", "Simple") == 23.0
    assert one["2.18"].bw("AllGather", "NVLS", "Simple") == 0.0
    # 2.18: NVLS Tree across two nodes x0.7 nNodes / 2(nNodes-1) = x0.7, 23 + 2 x 19 us.
    assert two.lat("AllReduce", "NVLSTree", "Simple") == pytest.approx(23 + 2 * 19)
    # 2.23-2.26: NVLS AllGather keeps its bus bandwidth (8 x 40), 2.19-2.22 took x5/6; 2.27 prices
    # AllGather at min(bwIntra (ppn-1)/ppn, 0.9 bwInter) = 35 GB/s per channel.
    assert one["2.23"].bw("AllGather", "NVLS", "Simple") == pytest.approx(8 * 40)
    assert one["2.27"].bw("AllGather", "NVLS", "Simple") == pytest.approx(8 * 35)
    # 2.28: nvlsEfficiency 0.85 x 7/8 x (ppn-1)/ppn.
    assert one["2.28"].bw("AllGather", "NVLS", "Simple") == pytest.approx(8 * 40 * 0.85 * 7 / 8 * 7 / 8)
    rules = {v: time_model_rules(parse_version(v)) for v in ("2.18", "2.22", "2.23", "2.24", "2.29")}
    assert [rules[v].ring_backup for v in rules] == [False, True, True, False, False]
    assert [rules[v].pat_bw_factor for v in ("2.23", "2.24")] == [0.85, 0.75]
    assert [rules[v].per_function_lists for v in ("2.23", "2.24")] == [False, True]
    assert rules["2.29"].nvls_tree_correction and not time_model_rules(parse_version("2.28")).nvls_tree_correction


def test_nccl_algo_is_one_list_before_2_24():
    """parseList (tuning.cc 2.23.4) has no function prefixes: `Tree` disables the ring everywhere and the
    collectives left with nothing get the ring back from comm->ringbdw; 2.18.6 never disables the ring
    outside AllReduce."""
    t = cost(version="2.23", nodes=2, env={"NCCL_ALGO": "Tree"})
    assert t.bw("AllReduce", "Ring", "Simple") == 0.0 and t.bw("AllReduce", "Tree", "Simple") > 0
    assert t.bw("AllGather", "Ring", "Simple") > 0  # the ring backup
    t = cost(version="2.24", nodes=2, env={"NCCL_ALGO": "Tree"})
    assert t.bw("AllGather", "Ring", "Simple") == 0.0 and t.ring_backup_gbps is None
    t = cost(version="2.18", nodes=2, env={"NCCL_ALGO": "Tree"})
    assert t.bw("AllReduce", "Ring", "Simple") == 0.0 and t.bw("Broadcast", "Ring", "Simple") > 0


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
    """(version, system, nodes, env, header, lines) of a table NCCL printed (rank 0, TUNING and INIT lines).

    `header` holds NCCL's own communicator fields (`comm`) and the tree/ring/NVLS graphs its tuning saw
    (`graph`, one line each), where the golden records them."""
    lines = (GOLDEN / name).read_text().rstrip("\n").split("\n")
    env = {"NCCL_IGNORE_DISABLED_P2P": "2"}  # how the reference runs were made (no driver to ask)
    header = {"graph": [], "options": {}}
    while lines[0].startswith("# "):
        kind, _, rest = lines.pop(0)[2:].partition(" ")
        if kind == "options":  # cluster options of `nicksim topo`, e.g. --nics-per-node 4
            flag, value = rest.split()
            header["options"][flag[2:].replace("-", "_")] = int(value)
        elif kind == "env":
            key, value = rest.split("=", 1)
            env[key] = value
        elif kind == "graph":
            header["graph"].append(rest)
        else:
            header[kind] = rest
    version, system, shape = name.split(".")[0:3], name.split(".")[3], name.split(".")[4]
    return ".".join(version), system, 1 if shape == "1node" else 2, env, header, [line.rstrip() for line in lines]


def _fields(text):
    return dict(item.split("=", 1) for item in text.split())


def _golden_paths(version, system, nodes, env, header):
    """The golden's system: with a CollNet (SHARP) plugin where the run enabled CollNet."""
    sharp = env.get("NCCL_COLLNET_ENABLE") == "1"
    return build(system, version[:4], env=env, nodes=nodes, sharp=sharp, **header["options"])


def _nccl_collnet(comm, params):
    """The CollNet state NCCL's tuning saw (heads as a count: the table reads no more)."""
    if comm.get("collnet", "0") == "0":
        return COLLNET_OFF
    v8 = params.get("NCCL_SHARP_DISABLE_ALLGATHER") != 1, params.get("NCCL_SHARP_DISABLE_REDUCE_SCATTER") != 1
    return CollNetSetup(enabled=True, heads=tuple(range(int(comm["collNetHeadsNum"]))),
                        chain_support=comm["collNetChainSupport"] == "1", iallgather=v8[0], ireducescatter=v8[1])


def _nccl_graphs(header, path_names):
    """The graphs NCCL's tuning saw, as nicksim Graphs (only the fields the time model reads)."""
    keys = {"Tree": "tree", "Ring": "ring", "NVLS": "nvls", "CollNetDirect": "collnet_direct",
            "CollNetChain": "collnet_chain"}
    graphs = {}
    for line in header["graph"]:
        algo, rest = line.split(" ", 1)
        f = _fields(rest)
        graphs[keys[algo]] = Graph(
            id=-1, pattern=int(f["pattern"]), cross_nic=0, n_channels=int(f["nChannels"]),
            bw_intra=float(f["bwIntra"]), bw_inter=float(f["bwInter"]), latency_inter=float(f["latencyInter"]),
            type_intra=path_names[int(f["typeIntra"])], type_inter=path_names[int(f["typeInter"])],
            same_channels=int(f["sameChannels"]), n_hops=0, intra=(), inter=())
    return graphs


_TUNED_FIELDS = ("pattern", "n_channels", "bw_intra", "bw_inter", "latency_inter", "type_intra", "type_inter",
                 "same_channels")


def _tuned(graph):
    """The fields the time model reads, floats as NCCL prints them (%f)."""
    return tuple(round(v, 6) if isinstance(v, float) else v for v in (getattr(graph, f) for f in _TUNED_FIELDS))


def _search_differs(nccl_graphs, graphs):
    """The graphs nicksim's search finds otherwise than NCCL did, in the fields the time model reads."""
    n_channels = min(graphs["ring"].n_channels, graphs["tree"].n_channels)  # init.cc's cross-rank reduction
    ours = {k: replace(g, n_channels=n_channels) if k in ("ring", "tree") else g for k, g in graphs.items()}
    return [key for key, theirs in nccl_graphs.items()
            if (key in ours and _tuned(ours[key]) != _tuned(theirs)) or (key not in ours and theirs.n_channels)]


def test_goldens_cover_the_catalog_and_the_knobs():
    systems = {_golden(n)[1] for n in CASES if n.startswith("2.30.7")}
    assert len(systems) == 7 and sum(1 for n in CASES if "env" in n) >= 6
    # Every modelled release has NCCL's own table for DGX H100, A100 and B200 at one and two nodes.
    for version in MODELLED_VERSIONS:
        if version.minor in (20, 21):
            continue  # read between 2.19 and 2.22, no tag of their own in the goldens
        for system in ("dgx-h100", "dgx-a100", "dgx-b200"):
            for shape in ("1node", "2nodes"):
                assert f"{version}.{system}.{shape}.txt" in CASES


@pytest.mark.parametrize("name", CASES)
def test_tuning_table_matches_nccl(name):
    """NCCL's own TUNING table and threadThresholds line (tuning.cc of the tag, run on the catalog
    system's XML after NCCL's own graph search).

    Where the golden records the communicator and the tree/ring/NVLS graphs NCCL's tuning saw (the
    releases added since 2.19.4, 2.22.3 and 2.30.7), the time model prices exactly those; the others
    go through nicksim's own search."""
    version, system, nodes, env, header, theirs = _golden(name)
    _, paths = _golden_paths(version, system, nodes, env, header)
    params = read_params(env)
    tables = tuning_tables(parse_version(version))
    ranks = nodes * len(paths.node_system.gpus())
    assert format_thread_thresholds(thread_thresholds(tables, ranks, params)) == theirs[-1]
    if header["graph"]:
        comm = _fields(header["comm"])
        inputs = tune_inputs(paths, _nccl_graphs(header, paths.system.rules.path_names), nodes,
                             _nccl_collnet(comm, params))
        assert (inputs.n_ranks, inputs.n_nodes, inputs.min_compcap, inputs.max_compcap) == \
            (int(comm["nRanks"]), int(comm["nNodes"]), int(comm["minCompCap"]), int(comm["maxCompCap"]))
        if comm["cpuArch"] != "-1":  # 2.18 asks the topology itself (ncclTopoCpuType), not the comm
            assert (inputs.cpu_arch, inputs.cpu_vendor) == (int(comm["cpuArch"]), int(comm["cpuVendor"]))
    else:
        inputs = tune_inputs(paths, searched(paths, params), nodes)
    ours = format_tuning_table(tune_model(tables, inputs, params))
    assert [line.rstrip() for line in ours] == theirs[:-1]


# Goldens of the added releases where nicksim's own search finds NCCL's graphs, so that search and
# time model together must print NCCL's table. (2.18's search differs on NVSwitch systems, and the
# Blackwell tree graphs of 2.25-2.28 differ; the tests above price NCCL's own graphs there. Four
# H100s with eight NICs take half a minute to search and stay with the test above.)
PIPELINE = sorted(n for n in CASES if n.split(".")[3] == "dgx-h100" and "env" not in n and "gpus4" not in n
                  and n.startswith(("2.23.", "2.24.", "2.25.", "2.26.", "2.27.", "2.28.", "2.29."))) + [
    "2.18.6.dgx-a100.1node.txt", "2.18.6.pcie-8x-rtx4090.1node.txt", "2.18.6.pcie-8x-rtx4090.2nodes.txt",
    "2.26.6.dgx-a100.2nodes.txt", "2.29.7.dgx-b200.2nodes.txt"]


@pytest.mark.parametrize("name", PIPELINE)
def test_nicksim_search_and_time_model_print_nccls_table(name):
    """Search, CollNet set-up (heads, chain support, node threshold) and time model together print
    NCCL's table; the CollNet goldens cover 8, 4 and 2 NICs for 8 GPUs and 4 GPUs per node."""
    version, system, nodes, env, header, theirs = _golden(name)
    _, paths = _golden_paths(version, system, nodes, env, header)
    params = read_params(env)
    graphs = searched(paths, params)
    assert not _search_differs(_nccl_graphs(header, paths.system.rules.path_names), graphs)
    collnet = collnet_setup(paths, graphs, nodes, params)
    comm = _fields(header["comm"])
    assert collnet.enabled == (comm.get("collnet") == "1")
    if collnet.enabled:
        assert (collnet.n_heads, int(collnet.chain_support)) == \
            (int(comm["collNetHeadsNum"]), int(comm["collNetChainSupport"]))
    table = tune_model(tuning_tables(parse_version(version)), tune_inputs(paths, graphs, nodes, collnet), params)
    assert [line.rstrip() for line in format_tuning_table(table)] == theirs[:-1]


ALGOTIME = Path(__file__).parent / "golden" / "nccl-algotime"


@pytest.mark.parametrize("name", sorted(p.name for p in ALGOTIME.glob("*.txt.gz")))
def test_algo_time_matches_nccl(name):
    """ncclTopoGetAlgoTime of NCCL's own tuning.cc (numPipeOps 1) for every collective, algorithm,
    protocol and size 2^0..2^33 bytes on DGX H100, after NCCL's own search and tuning; NCCL computes
    in float32, so times agree to float32 precision."""
    version, system, shape = name.split(".")[:3], name.split(".")[3], name.split(".")[4]
    version, nodes = ".".join(version), 1 if shape == "1node" else 2
    env = {"NCCL_IGNORE_DISABLED_P2P": "2"}
    header = {"options": {"nics_per_node": 4} if ".nics4." in name else {}}
    if ".collnet." in name:  # NCCL with a SHARP plugin and NCCL_COLLNET_ENABLE=1
        env["NCCL_COLLNET_ENABLE"] = "1"
    _, paths = _golden_paths(version, system, nodes, env, header)
    params = read_params(env)
    graphs = searched(paths, params)
    inputs = tune_inputs(paths, graphs, nodes, collnet_setup(paths, graphs, nodes, params))
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
