"""Graph search against NCCL's own output, 2.18.6 to 2.30.7 (tests/golden/nccl-search), plus search properties."""
import gzip
from pathlib import Path

import pytest

from conftest import build, run_cli, searched
from nicksim.params import read_params
from nicksim.graph.search import RING, format_graph, search_graph

GOLDEN = Path(__file__).parent / "golden" / "nccl-search"
CASES = sorted(p.name for p in GOLDEN.iterdir() if p.name.endswith((".txt", ".txt.gz")))
NCCL_LINE_LIMIT = 1023  # debug.cc formats into char buffer[1024]


def _read(name):
    data = (GOLDEN / name).read_bytes()
    text = gzip.decompress(data).decode() if name.endswith(".gz") else data.decode()
    return [line.rstrip() for line in text.rstrip("\n").split("\n")]


def _case(name):
    parts = name.removesuffix(".gz").removesuffix(".txt").split(".")
    version, system, shape = ".".join(parts[:3]), parts[3], parts[4]
    env = {"NCCL_IGNORE_DISABLED_P2P": "2"}
    if len(parts) > 5:
        key, value = ".".join(parts[5:]).split("=")
        env[key] = value
    return version, system, 1 if shape == "1node" else 2, env


# Goldens nicksim does not reproduce yet: file name -> the difference and where NCCL's rule lives.
# Each is a strict xfail, so a fix that makes one pass must also remove it from here.
KNOWN_DIFFERENCES: dict[str, str] = {}

RELEASES = {"2.18.6", "2.19.4", "2.22.3", "2.23.4", "2.24.3", "2.25.1", "2.26.6", "2.27.7", "2.28.9", "2.29.7",
            "2.30.7"}


def _param(name):
    reason = KNOWN_DIFFERENCES.get(name)
    return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=reason)) if reason else name


def test_goldens_cover_the_catalog():
    systems = {_case(n)[1] for n in CASES}
    assert len(systems) == 8 and len(CASES) >= 16
    assert {_case(n)[0] for n in CASES} == RELEASES
    for release in RELEASES:  # one and two nodes of every catalog system (NCCL 2.18/2.19 crash on gb200-nvl72,
        for system in systems - {"gb200-nvl72"}:  # 2.22-2.24 on two of its nodes)
            for shape in ("1node", "2nodes"):
                assert f"{release}.{system}.{shape}.txt" in CASES
    assert set(KNOWN_DIFFERENCES) <= set(CASES)
    collnet = [n for n in CASES if "NCCL_COLLNET_ENABLE=1" in n]
    assert len(collnet) >= 16 and all("Pattern 3" in "\n".join(_read(n)) for n in collnet)


@pytest.mark.parametrize("name", [_param(n) for n in CASES])
def test_search_matches_nccl(name):
    version, system, nodes, env = _case(name)
    # CollNet cases: the topology's NICs carry coll="1" (a CollNet/SHARP plugin serves them), as --sharp makes them
    _, paths = build(system, version[:4], env=env, nodes=nodes, sharp=env.get("NCCL_COLLNET_ENABLE") == "1")
    ours = [line.rstrip() for g in searched(paths, read_params(env)).values() for line in format_graph(paths, g)]
    theirs = _read(name)
    assert len(ours) == len(theirs)
    for mine, nccl in zip(ours, theirs, strict=True):
        # NCCL's 1024-byte log buffer holds its "host:pid:tid [rank] NCCL INFO " prefix too, so a long
        # channel line (gb200-nvl72) is cut some 25-40 characters short of 1023: compare what it kept.
        if len(nccl) >= NCCL_LINE_LIMIT - 40 and len(mine) > len(nccl):
            assert mine.startswith(nccl[:-2])
        else:
            assert mine == nccl


def test_every_ring_visits_each_gpu_once_per_channel():
    for system in ("dgx-h100", "pcie-8x-l40s", "dgx-a100"):
        for nodes in (1, 2):
            _, paths = build(system, nodes=nodes)
            ring = search_graph(paths, read_params({}), RING, 0, 1, 32)
            ranks = sorted(paths.system.nodes[g].gpu.rank for g in paths.system.gpus())
            assert ring.n_channels >= 1
            for channel in ring.intra:
                assert sorted(channel) == ranks


def test_no_path_falls_back_to_simple_order_and_says_so():
    # Two nodes but no NIC: search.cc prints "Could not find a path for pattern 4, falling back to
    # simple order" and returns one channel in rank order at bw 0.1 with no NIC (type SYS/DIS).
    _, paths = build("dgx-h100", nodes=2, nics_per_node=0)
    ring = search_graph(paths, read_params({}), RING, 0, 1, 32)
    assert ring.fallback and "falling back to simple order" in ring.notes[0]
    assert (ring.n_channels, round(ring.bw_intra, 6), ring.bw_inter) == (1, 0.1, 0.0)
    assert (ring.type_intra, ring.type_inter) == ("SYS", "DIS")
    assert ring.intra == (tuple(range(8)),)
    assert format_graph(paths, ring)[1].startswith(" 0 : NET/ffffffffffffffff-ffffffffffffff GPU/0-1b000")


XML_GOLDEN = Path(__file__).parent / "golden" / "nccl-graph-xml"


@pytest.mark.parametrize("name", sorted(p.name for p in XML_GOLDEN.glob("*.graph.xml")))
def test_graph_dump_matches_nccl(name):
    from nicksim.graph.search import graphs_xml
    parts = name.split(".")
    version, system, shape = ".".join(parts[:2]), parts[3], parts[4]
    env = {"NCCL_IGNORE_DISABLED_P2P": "2"}
    _, paths = build(system, version, env=env, nodes=1 if shape == "1node" else 2)
    ours = graphs_xml(paths, searched(paths, read_params(env)))
    assert ours == (XML_GOLDEN / name).read_text()


def test_search_command_prints_and_dumps(tmp_path):
    dump = tmp_path / "graphs.xml"
    result = run_cli("search", "dgx-h100", "--nodes", "2", "--dump-graph", str(dump),
                     env={"NCCL_IGNORE_DISABLED_P2P": "2"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Pattern 4, crossNic 2, nChannels 8, bw 48.000000/48.000000, type NVL/PIX")
    assert dump.read_text() == (XML_GOLDEN / "2.30.7.dgx-h100.2nodes.graph.xml").read_text()


def test_a_note_about_the_release_is_said_once():
    result = run_cli("search", "dgx-h100", "--nccl-version", "2.21")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("has not been checked against NCCL itself") == 1


def test_checked_releases_say_nothing_about_checking():
    result = run_cli("search", "dgx-h100", "--nccl-version", "2.25")
    assert result.returncode == 0, result.stderr
    assert "has not been checked" not in result.stderr


@pytest.mark.parametrize("version", ["2.22", "2.30"])
def test_collnet_graphs_are_searched_and_dumped_as_nccl_does(version, tmp_path):
    # With a CollNet (SHARP) plugin serving the NICs and NCCL_COLLNET_ENABLE=1, init.cc searches the
    # CollNet chain (id 2) and direct (id 2 in 2.22, 4 after) graphs; ncclTopoDumpGraphs writes them
    # between tree and NVLS. The golden is NCCL's own dump (tests/golden/nccl-graph-xml/README.md).
    dump = tmp_path / "graphs.xml"
    result = run_cli("search", "dgx-h100", "--sharp", "--nodes", "2", "--nccl-version", version,
                     "--env", "NCCL_COLLNET_ENABLE=1", "--dump-graph", str(dump), env={"NCCL_IGNORE_DISABLED_P2P": "2"})
    assert result.returncode == 0, result.stderr
    assert "Pattern 6, crossNic 0, nChannels 8" in result.stdout
    full = {"2.22": "2.22.3", "2.30": "2.30.7"}[version]
    assert dump.read_text() == (XML_GOLDEN / f"collnet-{full}.dgx-h100.2nodes.xml").read_text()


def test_sharp_without_collnet_enable_searches_no_collnet_graph():
    result = run_cli("search", "dgx-h100", "--sharp", "--nodes", "2")
    assert result.returncode == 0, result.stderr
    assert "Pattern 6" not in result.stdout
    assert result.stdout.count("Pattern ") == 3  # ring, tree, NVLS
    assert "NCCL_COLLNET_ENABLE=1" in result.stderr
