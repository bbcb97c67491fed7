"""The release rules as one table (nicksim/constants/rules.py), and what reading them fixed.

Sources are NVIDIA/nccl at the tags named (git show TAG:FILE); line numbers are those of that tag.
"""
import ast
import inspect
import sys
import threading
from pathlib import Path

import pytest

from conftest import build
from nicksim.constants import MODELLED_VERSIONS, ReleaseRules, parse_version, rules, topo_rules
from nicksim.constants.rules import RELEASE_CHANGES, check_changes, rules_for_minor
from nicksim.constants.topo_rules import TOPO_CHANGES
from nicksim.constants.tuning_tables import TIME_MODEL_CHANGES, TUNING_CHANGES
from nicksim.graph import search as search_module
from nicksim.graph.connect import all_nvlink, p2p_chunk_nbytes
from nicksim.graph.paths import compute_paths
from nicksim.graph.search import format_graph, search_graphs
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.topology.system import build_system
from nicksim.topology.xml import parse_topo_xml

PACKAGE = Path(__file__).resolve().parent.parent / "nicksim"
GOLDEN = Path(__file__).parent / "golden" / "nccl-search"


# --- the table ------------------------------------------------------------------------------------

@pytest.mark.parametrize("table", [RELEASE_CHANGES, TOPO_CHANGES, TUNING_CHANGES, TIME_MODEL_CHANGES],
                         ids=["release", "topo", "tuning", "time-model"])
def test_every_change_table_is_well_formed(table):
    # every rule has a value for the oldest modelled line (2.18) and its entries ascend
    assert check_changes(table) == []
    for name, steps in table.items():
        assert steps[0][0] <= MODELLED_VERSIONS[0].minor, name
        assert [first for first, _ in steps] == sorted({first for first, _ in steps}), name


def test_the_table_and_the_dataclass_name_the_same_rules():
    fields = set(ReleaseRules.__dataclass_fields__) - {"version"}
    assert fields == set(RELEASE_CHANGES)


def test_a_malformed_table_is_reported():
    assert check_changes({"late": ((20, 1),), "unsorted": ((18, 1), (25, 2), (22, 3))}) == [
        "late: first entry 2.20 is after 2.18", "unsorted: entries do not ascend ([18, 25, 22])"]


@pytest.mark.parametrize("version", MODELLED_VERSIONS, ids=str)
def test_rules_build_for_every_modelled_release(version):
    r = rules(version)
    assert r.version == version and rules_for_minor(version.minor) is r
    assert topo_rules(version).release is r  # reachable from any System as system.rules.release


def test_the_newest_release_stands_for_none_and_unmodelled_lines_are_refused():
    assert rules_for_minor(None) is rules(MODELLED_VERSIONS[-1])
    with pytest.raises(Exception, match="2.17 is not modelled"):
        rules_for_minor(17)


def _rules(line):
    return rules(parse_version(line))


def test_maxchannels_is_32_until_2_24_and_64_from_2_25():
    # devcomm.h v2.18.6-1:52 and device.h v2.19.4-1:54 .. v2.24.3-1:62 "#define MAXCHANNELS 32";
    # device.h v2.25.1-1:62 .. v2.30.7-1:91 "#define MAXCHANNELS 64"
    assert {v.line: rules(v).maxchannels for v in MODELLED_VERSIONS} == {
        v.line: 32 if v.minor <= 24 else 64 for v in MODELLED_VERSIONS}


def test_spot_checks_against_nccl_sources():
    # graph.h NCCL_TOPO_MAX_NODES: 256 (v2.26.6-1:77), 576 (v2.27.7-1:80), 640 (v2.29.7-1)
    assert [_rules(v).topo_max_nodes for v in ("2.26", "2.27", "2.29")] == [256, 576, 640]
    # device.h NCCL_MAX_NVLS_ARITY: 8 (v2.20.5-1:160), 32 (v2.21.5-1:170)
    assert (_rules("2.20").nvls_arity, _rules("2.21").nvls_arity) == (8, 32)
    # transport/nvls.cc ncclNvlsInit: "gpuCount <= 2" returns (v2.27.7-1:160), "gpuCount < 2" (v2.28.9-1:161)
    assert (_rules("2.27").nvls_min_gpus, _rules("2.28").nvls_min_gpus) == (3, 2)
    # search.cc NCCL_SEARCH_GLOBAL_TIMEOUT (5ULL<<16) in v2.18.6-1, (1ULL<<19) from v2.19.4-1
    assert (_rules("2.18").search_global_timeout, _rules("2.19").search_global_timeout) == (5 << 16, 1 << 19)
    # search.cc v2.25.1-1:940 sm100SpeedArrayIntra[] = { 90.0, 80.0, ..., 20.0, 19.0 }; none before
    assert _rules("2.24").search_speeds_sm100_intra is None
    assert _rules("2.25").search_speeds_sm100_intra == (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0)
    # init.cc: the CollNet Direct graph, id 2 in v2.22.3-1, 4 from v2.23.4-1 (one CollNet graph before)
    assert [_rules(v).collnet_direct_graph_id for v in ("2.21", "2.22", "2.23")] == [None, 2, 4]
    # paths.cc ncclTopoPathAllNVLink: min over pairs until v2.24.3-1:831-841, ncclTopoGetGpuMaxPath from v2.25.1-1:845
    assert (_rules("2.24").all_nvlink_test, _rules("2.25").all_nvlink_test) == ("best-pair", "worst-pair")
    # init.cc: no bound of p2pChunkSize by the Simple step in v2.18.6-1:525-535, one from v2.19.4-1:549-550
    assert (_rules("2.18").p2p_chunk_capped_by_step, _rules("2.19").p2p_chunk_capped_by_step) == (False, True)


# --- no stage compares release numbers ---------------------------------------------------------------

STAGES = ("graph", "tuning", "plan", "topology", "formats", "model", "params.py")
_RELEASE_NAMES = {"minor", "version_minor"}
# Comparisons that are about data, not the release: none so far.
ALLOWED: set[tuple[str, int]] = set()


def _names_release(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id in _RELEASE_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in _RELEASE_NAMES
    return False


def _release_comparisons(path: Path) -> list[tuple[str, int, str]]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_names_release(n) for n in [node.left, *node.comparators]):
            found.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "at_least":
            found.append(node)
    rel = str(path.relative_to(PACKAGE))
    return [(rel, n.lineno, ast.unparse(n)) for n in found if (rel, n.lineno) not in ALLOWED]


def test_no_stage_compares_release_numbers():
    files = []
    for stage in STAGES:
        target = PACKAGE / stage
        files += [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))
    assert len(files) > 30
    found = [hit for path in files for hit in _release_comparisons(path)]
    assert found == [], "read a rule from constants/rules.py instead:\n" + "\n".join(map(str, found))


# --- MAXCHANNELS: 32 until 2.24 --------------------------------------------------------------------

def _job(version, nodes=1, env=None, **spec):
    return load_job(JobSpec(system="dgx-h100", nodes=nodes, nccl_version=version, **spec), read_params(env or {}))


@pytest.mark.parametrize("version,maxchannels", [("2.18", 32), ("2.24", 32), ("2.25", 64), ("2.30", 64)])
def test_channel_counts_stop_at_the_release_maxchannels(version, maxchannels):
    # init.cc v2.24.3-1:1565-1567 caps config.minCTAs at MAXCHANNELS; connect.cc copies channels up to it
    job = _job(version, nodes=2, env={"NCCL_MIN_CTAS": "64"})
    assert job.channels.n_channels == maxchannels
    # transport/nvls.cc v2.24.3-1:173: nvlsChannels = max(minCTAs, min(maxCTAs, NCCL_NVLS_NCHANNELS)),
    # maxCTAs defaulting to MAXCHANNELS (init.cc v2.24.3-1:1574)
    assert _job(version, env={"NCCL_NVLS_NCHANNELS": "64"}).channels.nvls_channels == maxchannels


@pytest.mark.parametrize("version,maxchannels", [("2.22", 32), ("2.24", 32), ("2.25", 64), ("2.30", 64)])
def test_init_asks_the_search_for_the_release_maxchannels(version, maxchannels, monkeypatch):
    # init.cc v2.24.3-1:898-935: ring 1..MAXCHANNELS/2, CollNet Direct and NVLS 1..MAXCHANNELS
    asked = {}
    real = search_module.search_graph

    def spy(paths, params, pattern, gid, low, high, collnet=0):
        asked[gid] = high
        return real(paths, params, pattern, gid, low, high, collnet)

    monkeypatch.setattr(search_module, "search_graph", spy)
    _, paths = build("dgx-h100", version, env={"NCCL_COLLNET_ENABLE": "1"}, nodes=2, sharp=True)
    graphs = search_graphs(paths, read_params({"NCCL_COLLNET_ENABLE": "1"}))
    direct = _rules(version).collnet_direct_graph_id
    assert asked[0] == maxchannels // 2 and asked[3] == maxchannels and asked[direct] == maxchannels
    assert {"ring", "tree", "collnet_chain", "collnet_direct", "nvls"} <= set(graphs)


# --- the P2P chunk of a rank without NVLink peers ---------------------------------------------------

@pytest.mark.parametrize("version,chunk", [("2.18", 131072), ("2.19", 131072), ("2.24", 131072),
                                           ("2.25", 524288), ("2.30", 524288)])
def test_a_lone_gpu_takes_the_pci_chunk_until_2_24(version, chunk):
    # init.cc computeBuffSizes (v2.18.6-1:525-527, v2.24.3-1:615-617, v2.25.1-1:623-625): one node ->
    # NVL chunk (512 KiB) if isAllNvlink, else the PCI chunk (128 KiB). ncclTopoPathAllNVLink until 2.24
    # starts from PATH_DIS and keeps the best pair (paths.cc v2.18.6-1:755-765, v2.24.3-1:831-841): no
    # pair, no NVLink. From 2.25 ncclTopoGetGpuMaxPath starts from PATH_LOC (paths.cc v2.25.1-1:845-864).
    job = _job(version, gpus_per_node=1)
    assert p2p_chunk_nbytes(job.paths, 1, job.params) == chunk
    assert all_nvlink(job.paths) == (chunk == 524288)


@pytest.mark.parametrize("version", ["2.18", "2.19", "2.24", "2.25", "2.29"])
def test_one_gpu_per_node_across_nodes_takes_the_net_chunk(version):
    # init.cc v2.18.6-1:525 "if (comm->nNodes > 1) comm->p2pChunkSize = ncclParamP2pNetChunkSize()" (128 KiB,
    # init.cc v2.18.6-1:508): whatever the node holds, e.g. 10 nodes x 1 H100 (xxrjun cluster01, NCCL 2.29.2)
    job = _job(version, nodes=2, gpus_per_node=1)
    assert p2p_chunk_nbytes(job.paths, 2, job.params) == 131072


def _bridged_pairs_xml() -> str:
    """Four RTX A6000 (sm 86) behind one PCIe switch, NVLink bridges between 0-1 and 2-3 only."""
    pci = 'link_speed="16.0 GT/s PCIe" link_width="16"'
    buses = (0x19, 0x1a, 0x1b, 0x1c)

    def gpu(i):
        peer = buses[i ^ 1]
        return (f'<pci busid="0000:{buses[i]:02x}:00.0" class="0x030000" vendor="0x10de" device="0x2230" '
                f'subsystem_vendor="0x10de" subsystem_device="0x1459" {pci}><gpu dev="{i}" sm="86" rank="{i}" '
                f'gdr="1"><nvlink target="0000:{peer:02x}:00.0" count="4" tclass="0x030000"/></gpu></pci>')

    cpu = 'numaid="0" affinity="ffffffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="106"'
    switch = (f'<pci busid="0000:17:00.0" class="0x060400" vendor="0x10b5" device="0x8747" subsystem_vendor="0x10b5" '
              f'subsystem_device="0x8747" {pci}>{"".join(gpu(i) for i in range(4))}</pci>')
    return f'<system version="1"><cpu {cpu}>{switch}</cpu></system>'


@pytest.mark.parametrize("version,chunk", [("2.22", 524288), ("2.24", 524288), ("2.25", 131072), ("2.30", 131072)])
def test_nvlink_bridged_pairs_take_the_nvl_chunk_until_2_24(version, chunk):
    # the same two rules: until 2.24 the best pair (an NVLink bridge) decides, from 2.25 the worst (PCIe)
    system = build_system(parse_topo_xml(_bridged_pairs_xml(), "bridged.xml"), topo_rules(parse_version(version)))
    paths = compute_paths(system, read_params({}))
    assert {paths.gpu_path(0, 1).type, paths.gpu_path(0, 2).type} == {"NVL", "PIX"}
    assert p2p_chunk_nbytes(paths, 1, read_params({})) == chunk


def test_the_p2p_chunk_fits_a_simple_step_from_2_19():
    env = {"NCCL_BUFFSIZE": "1048576"}  # one Simple step is 128 KiB
    assert p2p_chunk_nbytes(_job("2.18", env=env).paths, 1, read_params(env)) == 524288
    assert p2p_chunk_nbytes(_job("2.19", env=env).paths, 1, read_params(env)) == 131072


# --- the search recursion leaves the process alone -----------------------------------------------------

def test_a_deep_search_leaves_the_recursion_limit_and_threads_alone(monkeypatch):
    import gzip
    set_limit, stack_size = sys.setrecursionlimit, threading.stack_size
    limit, stack = sys.getrecursionlimit(), stack_size()
    _, paths = build("gb200-nvl72", "2.30", env={"NCCL_IGNORE_DISABLED_P2P": "2"})
    changed = []
    monkeypatch.setattr(sys, "setrecursionlimit", lambda n: changed.append(n))
    monkeypatch.setattr(threading, "stack_size", lambda *size: changed.append(size) or stack)
    # far less Python stack than the search is deep (72 GPUs x 16 ring channels, several calls each)
    set_limit(len(inspect.stack()) + 150)
    try:
        graphs = search_graphs(paths, read_params({"NCCL_IGNORE_DISABLED_P2P": "2"}))
    finally:
        set_limit(limit)
    monkeypatch.undo()
    assert changed == [] and sys.getrecursionlimit() == limit and stack_size() == stack
    ours = [line.rstrip() for g in graphs.values() for line in format_graph(paths, g)]
    text = gzip.decompress((GOLDEN / "2.30.7.gb200-nvl72.1node.txt.gz").read_bytes()).decode()
    theirs = [line.rstrip() for line in text.rstrip("\n").split("\n")]
    assert len(ours) == len(theirs) and ours[0] == theirs[0]
    # NCCL's 1024-byte log buffer cut its longest lines (see test_search.py)
    assert all(a.startswith(b[:-2]) if len(b) >= 980 else a == b for a, b in zip(ours, theirs))
