"""NVIDIA/nccl#1189, rebuilt from its own NCCL 2.20 printout and printed back.

https://github.com/NVIDIA/nccl/issues/1189 ("Please help for clarification of P2P described in
NCCL?"), comment of 2025-04-02 by zhou9402: `alltoall_perf -g 1` on two H20 servers (H20-GPU-05,
H20-GPU-06), two ranks per node (GPUs 18:00 and 38:00), NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH,
NCCL_PXN_DISABLE=1, with an NCCL built in the reporter's workspace.

Version. The `NCCL version` line of that run was not in the text that could be retrieved; the log
pins the release line on its own: the system print names nodes `CPU/0`, `GPU/18000`, `NET/3
(guid/port/bw)` (NCCL 2.21.5 already prints `CPU/0-0`, see test_golden_issue_1591.py), so the build
is at most 2.20; `NVL[370.8]` is 18 x 20.6, the SM90 NVLink speed that replaced 20.0 in 2.20; and the
rings below are exchanged on the odd node, which NCCL's connect.cc does from v2.20.3-1 on. So 2.20.

What the stored text shows, and these tests require line for line:

- H20-GPU-05's `=== System` block: its first nine lines (rank 0) and the sixteen lines from
  `+ PCI[48.0] - PCI/56000` to `+ PCI[48.0] - PCI/D8000` (rank 1's print of the same node); the lines
  in between and after are not compared;
- the path lines NET/1, NET/0 and NET/5 of rank 0 and NET/4, NET/7 and NET/6 of rank 3 (printed on
  H20-GPU-06, the same model: these lines carry no GUID);
- the ring graph `Pattern 4, crossNic 1, nChannels 4, bw 24.000000/24.000000, type NVL/PIX,
  sameChannels 0` and its four channels (ranks 1 and 3);
- ranks 0 and 1 `Trees` lines, `P2P Chunksize set to 131072`, rank 3's `Tree 1/3/5 : ...` lines,
  rank 2's `threadThresholds 8/8/64 | 32/8/64 | 512 | 512`, ranks 2 and 3's `8 coll channels, 0 collnet
  channels, 0 nvls channels, 8 p2p channels, 2 p2p channels per peer`;
- `Ring 02 : 2 -> 0 -> 1` to `Ring 07 : 1 -> 0 -> 2` (rank 0) and `Ring 06 : 0 -> 1 -> 3`, `Ring 07 :
  3 -> 1 -> 0` (rank 1). nicksim prints rank 0's `Channel NN/08 :` ring lines instead; each rank's
  `Ring` line is its previous and next rank on those rings.

The XML is H20-GPU-05 as printed: two Intel sockets (`1/1/2`, SYS 10.0), Broadcom Gen5 switches
`1000c0301000100b` (48.0), GPU 0 with NIC 19000 (NET/3) in switch 16000, GPU 1 with NIC 39000 (NET/2)
in 36000, NICs 48000 (NET/1), 58000 (NET/0) alone in their switches, NIC 26000 (NET/8, 200G)
straight on CPU 0, and on CPU 1 NICs 9a000 (NET/5), ba000 (NET/4), cb000 (NET/7) and one under
d8000 (NET/6). The NETs are in that order, which is NCCL's order in the path lines. The GUIDs of
NET/2, NET/1, NET/6 and the bus id of NET/6's NIC are not in the retrieved text (placeholders; no
compared line shows them); the shape of the middle of the block is what H20-GPU-06 printed for
itself. The log's `0 nvls channels` says NVLS multicast was not available on these machines (a
driver/fabric-manager property, not part of the topology), so the tests pass NCCL_NVLS_ENABLE=0.

Findings. nicksim matches everything but the rings: its connect.py exchanges the ring channel pairs
of odd nodes only from 2.21 on, while NCCL v2.20.3-1 added the exchange ("Alternate rings to avoid
crossing rails": crossNic, an even node count and an even channel count), 2.21 dropped the node-count
condition. Without it nicksim gives rank 0 `Ring 02 : 3 -> 0 -> 1`; with it (nicksim at 2.21) the
issue's lines come out. The GPU path lines of this run are not in the retrieved text; NCCL 2.20
prints their NVLink bandwidth as the float 370.8 through `%f`, i.e. `370.800018` (seen in the 2.20
logs of NVIDIA/nccl#1519), where nicksim prints `370.800000`.
"""
import re

import pytest

from conftest import run_cli

VERSION = "2.20"
ENV = ("--env", "NCCL_PXN_DISABLE=1", "--env", "NCCL_NVLS_ENABLE=0")

SYSTEM_HEAD = """\
=== System : maxBw 48.0 totalBw 370.8 ===
CPU/0 (1/1/2)
+ PCI[48.0] - PCI/16000 (1000c0301000100b)
              + PCI[48.0] - GPU/18000 (0)
                            + NVL[370.8] - NVS/0
              + PCI[48.0] - NIC/19000
                            + NET[50.0] - NET/3 (aa24210003bd70c4/1/50.000000)
+ PCI[48.0] - NIC/26000
              + NET[25.0] - NET/8 (ba332c0003bd70c4/1/25.000000)""".splitlines()

SYSTEM_MIDDLE = """\
+ PCI[48.0] - PCI/56000 (1000c0301000100b)
              + PCI[48.0] - NIC/58000
                            + NET[50.0] - NET/0 (a2761f0003bd70c4/1/50.000000)
+ SYS[10.0] - CPU/1
CPU/1 (1/1/2)
+ PCI[48.0] - PCI/98000 (1000c0301000100b)
              + PCI[48.0] - NIC/9A000
                            + NET[50.0] - NET/5 (de3b210003bd70c4/1/50.000000)
+ PCI[48.0] - PCI/B8000 (1000c0301000100b)
              + PCI[48.0] - NIC/BA000
                            + NET[50.0] - NET/4 (5a07200003bd70c4/1/50.000000)
+ PCI[48.0] - PCI/C8000 (1000c0301000100b)
              + PCI[48.0] - NIC/CB000
                            + NET[50.0] - NET/7 (1efa1f0003bd70c4/1/50.000000)
+ PCI[48.0] - PCI/D8000 (1000c0301000100b)""".splitlines()

_CPU0_NETS = "NET/3 ({}) NET/8 ({}) NET/2 ({}) NET/1 ({}) NET/0 ({})"
_CPU1_NETS = "NET/5 ({}) NET/4 ({}) NET/7 ({}) NET/6 ({})"


def _net_line(net: str, gpus: str, cpus: str, cpu0: tuple, cpu1: tuple) -> str:
    return f"{net} :{gpus} {cpus} {_CPU0_NETS.format(*cpu0)} {_CPU1_NETS.format(*cpu1)}"


_G0 = "GPU/18000 (5/48.000000/PHB) GPU/38000 (5/48.000000/PHB)"
_G1 = "GPU/18000 (6/10.000000/SYS) GPU/38000 (6/10.000000/SYS)"
_C0 = "CPU/0 (3/48.000000/PHB) CPU/1 (4/10.000000/SYS)"
_C1 = "CPU/0 (4/10.000000/SYS) CPU/1 (3/48.000000/PHB)"
_PHB6, _PHB5, _SYS7, _SYS6, _LOC = ("6/48.000000/PHB", "5/25.000000/PHB", "7/10.000000/SYS",
                                    "6/10.000000/SYS", "0/5000.000000/LOC")
PATH_LINES = {  # NET/1, NET/0, NET/5 from rank 0; NET/4, NET/7, NET/6 from rank 3
    "NET/1": _net_line("NET/1", _G0, _C0, (_PHB6, _PHB5, _PHB6, _LOC, _PHB6), (_SYS7,) * 4),
    "NET/0": _net_line("NET/0", _G0, _C0, (_PHB6, _PHB5, _PHB6, _PHB6, _LOC), (_SYS7,) * 4),
    "NET/5": _net_line("NET/5", _G1, _C1, (_SYS7, _SYS6, _SYS7, _SYS7, _SYS7), (_LOC, _PHB6, _PHB6, _PHB6)),
    "NET/4": _net_line("NET/4", _G1, _C1, (_SYS7, _SYS6, _SYS7, _SYS7, _SYS7), (_PHB6, _LOC, _PHB6, _PHB6)),
    "NET/7": _net_line("NET/7", _G1, _C1, (_SYS7, _SYS6, _SYS7, _SYS7, _SYS7), (_PHB6, _PHB6, _LOC, _PHB6)),
    "NET/6": _net_line("NET/6", _G1, _C1, (_SYS7, _SYS6, _SYS7, _SYS7, _SYS7), (_PHB6, _PHB6, _PHB6, _LOC)),
}

RING_GRAPH = """\
Pattern 4, crossNic 1, nChannels 4, bw 24.000000/24.000000, type NVL/PIX, sameChannels 0
 0 : NET/3 GPU/0 GPU/1 NET/2
 1 : NET/2 GPU/1 GPU/0 NET/3
 2 : NET/3 GPU/0 GPU/1 NET/2
 3 : NET/2 GPU/1 GPU/0 NET/3""".splitlines()

TREES = {
    0: "Trees [0] 1/2/-1->0->-1 [1] -1/-1/-1->0->1 [2] 1/2/-1->0->-1 [3] -1/-1/-1->0->1 "
       "[4] 1/-1/-1->0->2 [5] -1/-1/-1->0->1 [6] 1/-1/-1->0->2 [7] -1/-1/-1->0->1",
    1: "Trees [0] -1/-1/-1->1->0 [1] 0/3/-1->1->-1 [2] -1/-1/-1->1->0 [3] 0/3/-1->1->-1 "
       "[4] -1/-1/-1->1->0 [5] 0/-1/-1->1->3 [6] -1/-1/-1->1->0 [7] 0/-1/-1->1->3",
}
TREE_LINES_RANK3 = ["Tree 1 : 1 -> 3 -> 2/-1/-1", "Tree 5 : -1 -> 3 -> 2/1/-1", "Tree 3 : 1 -> 3 -> 2/-1/-1"]
THREAD_THRESHOLDS = "threadThresholds 8/8/64 | 32/8/64 | 512 | 512"  # rank 2
CHANNEL_COUNTS = ("8 coll channels, 0 collnet channels, 0 nvls channels, 8 p2p channels, "
                  "2 p2p channels per peer")  # ranks 2 and 3
RING_LINES = {
    0: ["Ring 02 : 2 -> 0 -> 1", "Ring 03 : 1 -> 0 -> 2", "Ring 04 : 2 -> 0 -> 1",
        "Ring 05 : 1 -> 0 -> 2", "Ring 06 : 2 -> 0 -> 1", "Ring 07 : 1 -> 0 -> 2"],
    1: ["Ring 06 : 0 -> 1 -> 3", "Ring 07 : 3 -> 1 -> 0"],
}


def _issue_1189_xml() -> str:
    pci = 'link_speed="32.0 GT/s PCIe" link_width="16"'
    bcm = 'class="0x060400" vendor="0x1000" device="0xc030" subsystem_vendor="0x1000" subsystem_device="0x100b"'

    def gpu(bus: int, rank: int) -> str:
        return (f'<pci busid="0000:{bus:02x}:00.0" class="0x030200" vendor="0x10de" device="0x2329" {pci}>'
                f'<gpu dev="{rank}" sm="90" rank="{rank}" gdr="1"><nvlink target="0000:00:00.0" count="18" '
                'tclass="0x068000"/></gpu></pci>')

    def nic(bus: int, dev: int, guid: str, speed: int = 400000) -> str:
        return (f'<pci busid="0000:{bus:02x}:00.0" class="0x020000" vendor="0x15b3" device="0x1021" {pci}>'
                f'<nic><net name="mlx5_{dev}" dev="{dev}" speed="{speed}" port="1" guid="0x{guid}" '
                'maxconn="131072" gdr="1"/></nic></pci>')

    def switch(bus: int, *children: str) -> str:
        return f'<pci busid="0000:{bus:02x}:00.0" {bcm} {pci}>' + "".join(children) + "</pci>"

    cpu = 'arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143"'
    cpu0 = (switch(0x16, gpu(0x18, 0), nic(0x19, 3, "aa24210003bd70c4"))
            + nic(0x26, 8, "ba332c0003bd70c4", 200000)
            + switch(0x36, gpu(0x38, 1), nic(0x39, 2, "2"))      # GUID not in the retrieved text
            + switch(0x46, nic(0x48, 1, "1"))                    # GUID not in the retrieved text
            + switch(0x56, nic(0x58, 0, "a2761f0003bd70c4")))
    cpu1 = (switch(0x98, nic(0x9a, 5, "de3b210003bd70c4"))
            + switch(0xb8, nic(0xba, 4, "5a07200003bd70c4"))
            + switch(0xc8, nic(0xcb, 7, "1efa1f0003bd70c4"))
            + switch(0xd8, nic(0xda, 6, "6")))                   # bus id and GUID assumed
    return (f'<system version="1"><cpu numaid="0" {cpu}>{cpu0}</cpu>'
            f'<cpu numaid="1" {cpu}>{cpu1}</cpu></system>')


@pytest.fixture(scope="module")
def topo_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("issue1189") / "issue-1189.xml"
    path.write_text(_issue_1189_xml())
    return str(path)


@pytest.fixture(scope="module")
def search(topo_file):
    """nicksim search output per (version, rank), run once each."""
    cache = {}

    def run(rank: int, version: str = VERSION) -> list[str]:
        if (version, rank) not in cache:
            result = run_cli("search", topo_file, "--nccl-version", version, "--nodes", "2", "--rank", str(rank), *ENV)
            assert result.returncode == 0, result.stderr
            cache[version, rank] = result.stdout.splitlines()
        return cache[version, rank]
    return run


def _ring_lines(rank0_lines: list[str], rank: int) -> list[str]:
    """Each rank's `Ring NN : prev -> rank -> next` lines from rank 0's `Channel NN/MM :` lines."""
    out = []
    for line in rank0_lines:
        m = re.match(r"Channel (\d\d)/\d\d :((?:\s+\d+)+)$", line)
        if m:
            ring = [int(r) for r in m.group(2).split()]
            i = ring.index(rank)
            out.append(f"Ring {m.group(1)} : {ring[i - 1]} -> {rank} -> {ring[(i + 1) % len(ring)]}")
    return out


def _visible_ring_lines(rank0_lines: list[str]) -> dict[int, list[str]]:
    """The Ring lines of ranks 0 and 1 from the first channel the issue shows (02 and 06) on."""
    return {rank: _ring_lines(rank0_lines, rank)[int(shown[0][5:7]):] for rank, shown in RING_LINES.items()}


def test_system_block_and_path_lines(topo_file):
    for rank in (0, 1):
        result = run_cli("topo", topo_file, "--nccl-version", VERSION, "--nodes", "2", "--rank", str(rank),
                         "--paths", *ENV)
        assert result.returncode == 0, result.stderr
        lines = [line.rstrip() for line in result.stdout.splitlines()]
        assert lines[:len(SYSTEM_HEAD)] == SYSTEM_HEAD
        i = lines.index(SYSTEM_MIDDLE[0])
        assert i > len(SYSTEM_HEAD) and lines[i:i + len(SYSTEM_MIDDLE)] == SYSTEM_MIDDLE
        printed = {line.split(" :")[0]: line for line in lines if re.match(r"NET/\d+ :", line)}
        assert {net: printed.get(net) for net in PATH_LINES} == PATH_LINES


def test_ring_graph(search):
    for rank in (1, 3):
        lines = search(rank)
        i = lines.index(RING_GRAPH[0])
        assert lines[i:i + len(RING_GRAPH)] == RING_GRAPH


def test_trees_thresholds_and_channel_counts(search):
    for rank, trees in TREES.items():
        lines = search(rank)
        assert trees in lines
        assert lines[lines.index(trees) + 1] == "P2P Chunksize set to 131072"
    rank3 = next(line for line in search(3) if line.startswith("Trees "))
    entries = dict(re.findall(r"\[(\d+)\] (\S+)", rank3))
    for expected in TREE_LINES_RANK3:
        c = expected.split()[1]
        down, up = re.fullmatch(r"(\S+)->3->(-?\d+)", entries[c]).groups()
        assert f"Tree {c} : {up} -> 3 -> {down}" == expected
    assert THREAD_THRESHOLDS in search(2)
    assert CHANNEL_COUNTS in search(2) and CHANNEL_COUNTS in search(3)


# connect.cc (v2.20.3) exchanges odd nodes' ring channel pairs for cross-NIC rings on an even
# number of nodes ("Alternate rings to avoid crossing rails").
def test_ring_lines_2_20(search):
    assert _visible_ring_lines(search(0)) == RING_LINES


def test_ring_lines_come_from_the_odd_node_exchange(search):
    # What NCCL printed is the exchanged ring, which nicksim applies from 2.21 on (same graphs there).
    rank0 = search(0, "2.21")
    assert next(line for line in rank0 if line.startswith("Pattern 4")) == RING_GRAPH[0]
    assert _visible_ring_lines(rank0) == RING_LINES
