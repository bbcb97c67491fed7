"""Channels over the job (connect.cc): ring chaining across nodes, trees, channel counts."""
import re

import pytest

from conftest import build, need_validation
from nicksim.connect import connect, format_channels
from nicksim.params import read_params
from nicksim.search import search_graphs


def channels(system, version, nodes, rank=0, env=None):
    env = env or {}
    _, paths = build(system, version, env=env, nodes=nodes)
    params = read_params(env)
    return connect(paths, search_graphs(paths, params), params, nodes, rank)


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
    graphs = search_graphs(paths, params)
    ours = format_channels(connect(paths, graphs, params, 2, 0))
    assert ours[:16] == theirs
    assert ours[16] == trees
    # Every rank's Trees line, as each printed it.
    for rank in range(16):
        line = re.search(rf"\[1,{rank}\]<stdout>:\S+ \[\d\] NCCL INFO (Trees .*)", log).group(1).rstrip()
        assert format_channels(connect(paths, graphs, params, 2, rank))[-1] == line, rank


def test_one_node_doubles_the_search_channels():
    ch = channels("dgx-h100", "2.30", 1)
    assert ch.n_channels == 24  # 12 search channels (30 GB/s each), doubled at connect time
    assert format_channels(ch)[-1].startswith("Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1")


def test_sm90_multi_node_extra_doubling_and_channel_limits():
    # 8 search channels at 48 GB/s on two H100 nodes: doubled (16); the SM90 rule needs < 16, so stays.
    assert channels("dgx-h100", "2.30", 2).n_channels == 16
    assert channels("dgx-h100", "2.30", 2, env={"NCCL_MAX_NCHANNELS": "4"}).n_channels == 4
    assert channels("dgx-h100", "2.30", 2, env={"NCCL_MIN_NCHANNELS": "32"}).n_channels == 32


@pytest.mark.parametrize("nodes", [2, 3, 4])
def test_every_rank_has_one_parent_and_rings_cover_everyone(nodes):
    _, paths = build("dgx-h100", "2.30", nodes=nodes)
    params = read_params({})
    graphs = search_graphs(paths, params)
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
