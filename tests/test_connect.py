"""Channels over the job (connect.cc): ring chaining across nodes, trees, channel counts."""
import re

import pytest

from nicksim.job import JobSpec, load_job

from conftest import build, need_validation, searched
from nicksim.graph.connect import connect, format_channels
from nicksim.params import read_params


def channels(system, version, nodes, rank=0, env=None):
    env = env or {}
    _, paths = build(system, version, env=env, nodes=nodes)
    params = read_params(env)
    return connect(paths, searched(paths, params), params, nodes, rank)


def test_rings_and_trees_match_what_nccl_2_22_printed_on_p5():
    """C01 (AWS p5.48xlarge x2, NCCL 2.22.3): rank 0's 16 ring lines and its Trees line.

    The DGX H100 catalog system has p5's structure — 8 H100 on NVSwitch, each GPU with its own NIC
    behind its own PCIe switch, two sockets — and NCCL's choices here depend only on that structure,
    so its rings and trees must come out exactly as NCCL printed them on p5.
    """
    log = (need_validation() / "raw" / "aws_p5_KeitaW_nccl-test-output-v2.22.3-1.log").read_text(errors="replace")
    theirs = [m.group(1).rstrip() for m in re.finditer(r"\[1,0\]<stdout>:\S+ \[0\] NCCL INFO (Channel \d\d/16 :.*)", log)]
    trees = re.search(r"\[1,0\]<stdout>:\S+ \[0\] NCCL INFO (Trees .*)", log).group(1).rstrip()
    assert len(theirs) == 16
    _, paths = build("dgx-h100", "2.22", nodes=2)
    params = read_params({})
    graphs = searched(paths, params)
    ours = format_channels(connect(paths, graphs, params, 2, 0), 22)
    assert ours[:16] == theirs
    assert ours[16] == trees
    # Every rank's Trees line, as each printed it.
    for rank in range(16):
        line = re.search(rf"\[1,{rank}\]<stdout>:\S+ \[\d\] NCCL INFO (Trees .*)", log).group(1).rstrip()
        assert format_channels(connect(paths, graphs, params, 2, rank), 22)[-1] == line, rank


def test_one_node_doubles_the_search_channels():
    ch = channels("dgx-h100", "2.30", 1)
    assert ch.n_channels == 24  # 12 search channels (30 GB/s each), doubled at connect time
    assert format_channels(ch, 30)[-1].startswith("Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1")


def test_ring_lines_as_each_release_dumps_them():
    # rings.cc dumpLine: " %3d" for at most 20 ranks to 2.22; from 2.23 each rank as wide as the
    # largest, the line cut at 127 characters and ended with "..."
    ch = channels("dgx-h100", "2.30", 1)
    assert format_channels(ch, 30)[0] == "Channel 00/24 :" + "".join(f" {r}" for r in ch.rings[0])
    assert format_channels(ch, 22)[0] == "Channel 00/24 : " + "".join(f" {r:3d}" for r in ch.rings[0])
    big = load_job(JobSpec(system="dgx-h100", nodes=32), read_params({})).channels
    newer, older = format_channels(big, 30)[0], format_channels(big, 22)[0]
    assert len(newer) == 127 and newer.endswith("...") and newer.startswith(f"Channel 00/{big.n_channels:02d} :   0 ")
    assert len(older.split(":")[1].split()) == 20


def test_sm90_multi_node_extra_doubling_and_channel_limits():
    # 8 search channels at 48 GB/s on two H100 nodes: doubled (16); the SM90 rule needs < 16, so stays.
    assert channels("dgx-h100", "2.30", 2).n_channels == 16
    assert channels("dgx-h100", "2.30", 2, env={"NCCL_MAX_NCHANNELS": "4"}).n_channels == 4
    assert channels("dgx-h100", "2.30", 2, env={"NCCL_MIN_NCHANNELS": "32"}).n_channels == 32


@pytest.mark.parametrize("nodes", [2, 3, 4])
def test_every_rank_has_one_parent_and_rings_cover_everyone(nodes):
    _, paths = build("dgx-h100", "2.30", nodes=nodes)
    params = read_params({})
    graphs = searched(paths, params)
    per_rank = [connect(paths, graphs, params, nodes, rank) for rank in range(8 * nodes)]
    n = per_rank[0].n_channels
    for c in range(n):
        ups = {ch.rank: ch.tree_up[c] for ch in per_rank}
        assert sum(1 for u in ups.values() if u == -1) == 1  # one root per channel
        for ch in per_rank:
            for child in ch.tree_down[c]:
                if child >= 0:
                    assert ups[child] == ch.rank
            assert sorted(ch.rings[c]) == list(range(8 * nodes))
            assert ch.ring_next[c] == (ch.rings[c][1] if len(ch.rings[c]) > 1 else ch.rank)


def _counts(system, version, nodes, env=None, rank=0):
    from nicksim.graph.connect import format_channel_counts, p2p_channels
    env = env or {}
    _, paths = build(system, version, env=env, nodes=nodes)
    params = read_params(env)
    ch = connect(paths, searched(paths, params), params, nodes, rank)
    p2p = p2p_channels(paths, ch.n_channels, nodes, params, rank)
    return format_channel_counts(paths.system.rules.version.minor, ch.n_channels, ch.nvls_channels, p2p)


@pytest.mark.parametrize("log, version", [("aws_p5_KeitaW_nccl-test-output-v2.22.3-1.log", "2.22"),
                                          ("aws_p5_KeitaW_nccl-test-output-v2.22.3-1-with-tuner.log", "2.20")])
def test_channel_counts_line_as_nccl_printed_on_p5(log, version):
    """init.cc's `N coll channels, ...` line on 2 x 8 H100 (the p5 logs: 2.22.3, and 2.20.3 for the
    with-tuner run): 16 p2p channels, 2 per peer — each GPU sits behind a PCIe switch, so no NIC
    count is derived from its host link and 2 channels per network peer remain (paths.cc)."""
    text = (need_validation() / "raw" / log).read_text(errors="replace")
    theirs = {m.group(1).rstrip() for m in re.finditer(r"\[1,0\]<stdout>:\S+ \[0\] NCCL INFO (\d+ coll channels.*)", text)}
    assert len(theirs) == 1
    assert _counts("dgx-h100", version, 2) == theirs.pop()


def test_channel_counts_line_across_releases():
    assert _counts("dgx-h100", "2.19", 2) == "16 coll channels, 16 nvls channels, 16 p2p channels, 2 p2p channels per peer"
    # 2.29+: max(NICs driving the GPU's host bandwidth, ceil(50 GB/s / 14 GB/s per channel)) = 4 per net peer.
    assert _counts("dgx-h100", "2.30", 2).endswith("16 p2p channels, 4 p2p channels per peer")
    # One A100 node: 24 channels -> 32 p2p channels; NVLink peers need 2 x 12 links -> 24 -> 32 per peer.
    assert _counts("dgx-a100", "2.22", 1) == ("24 coll channels, 24 collnet channels, 0 nvls channels, "
                                              "32 p2p channels, 32 p2p channels per peer")
    assert _counts("pcie-8x-rtx4090", "2.22", 1).endswith("2 p2p channels, 2 p2p channels per peer")


def test_nvls_raises_the_channel_count_in_2_20_to_2_27():
    # connect.cc (2.20.5-2.27.7): fewer collective channels than NVLS channels are copied up to them.
    env = {"NCCL_MAX_NCHANNELS": "4"}
    assert _counts("dgx-h100", "2.22", 2, env).startswith("16 coll channels")
    assert _counts("dgx-h100", "2.30", 2, env).startswith("4 coll channels")
    assert _counts("dgx-a100", "2.22", 1, env).startswith("4 coll channels")  # no NVLS


def test_p2p_chunk_size():
    from nicksim.graph.connect import p2p_chunk_nbytes
    def chunk(system, nodes, env=None):
        _, paths = build(system, "2.22", env=env or {}, nodes=nodes)
        return p2p_chunk_nbytes(paths, nodes, read_params(env or {}))
    assert chunk("dgx-h100", 1) == 524288          # every pair on NVLink: NCCL_P2P_NVL_CHUNKSIZE
    assert chunk("pcie-8x-rtx4090", 1) == 131072   # NCCL_P2P_PCI_CHUNKSIZE
    assert chunk("dgx-h100", 2) == 131072          # NCCL_P2P_NET_CHUNKSIZE
    assert chunk("dgx-h100", 2, {"NCCL_P2P_NET_CHUNKSIZE": "524288"}) == 524288  # as the p5 job set it
    assert chunk("dgx-h100", 1, {"NCCL_BUFFSIZE": "1048576"}) == 131072  # at most one Simple step
