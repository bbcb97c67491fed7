"""NVIDIA/nccl#1591, rebuilt from its own NCCL 2.21.5 printout and printed back.

https://github.com/NVIDIA/nccl/issues/1591 ("NCCL internal error for ncclCommInitRank when using
infiniband"): vLLM on two nodes of 8x H100 SXM. The comment of 2025-01-29 ("Sure thing, here are the
full logs") prints `NCCL version 2.21.5+cuda12.4` and then rank 0's GRAPH output. What the stored
text of that comment shows, and what these tests require line for line (log prefix removed, the
indentation NCCL printed kept):

- the first seven lines of the `=== System` block (the rest of the block is in the issue but was
  not in the text that could be retrieved, so it is not compared);
- the complete path lines of GPU/E4000 and NET/0;
- the ring graph, `Pattern 4, crossNic 0, nChannels 2, bw 24.000000/24.000000, type NVL/PXN,
  sameChannels 1` with its two channels `NET/0 GPU/6 GPU/5 GPU/4 GPU/3 GPU/2 GPU/1 GPU/0 GPU/7
  NET/0`, and the start of the tree graph line, `Pattern 3, crossNic 0, nChannels 2,`.

The XML is written from those lines: GPUs 19000/2d000/3f000/66000 on CPU 0 and 9b000/ae000/bf000/
e4000 on CPU 1 (the GPU/E4000 line: PHB to CPU/0-1, SYS to CPU/0-0), each GPU alone under a
Broadcom Gen5 switch (`PCI/0-17000 (1000c03015d91d25)`: vendor 1000 device c030, subsystem
15d9:1d25, 48 GB/s), 18 NVLinks to the NVSwitch (370.8), Intel CPUs (`1/1/2`, SYS 10.0) and one NIC
in the switch of GPU/0-bf000 (the NET/0 line: 3 hops PIX to it, 5 hops PHB to the other CPU-1
GPUs). The NIC is 400G (the 3-hop path is limited to 48.0 by PCI, not by the NIC) and does GPUDirect
RDMA: without GDR, 2.21's ncclTopoComputePaths (GPU by GPU) would have sent GPU/0-bf000's path to
the NIC through the CPU before reaching GPU/E4000, which could then not relay through it and show
`NET/0-0 (5/48.0/PXN)`. The bus ids of the hidden switches and of the NIC
are assumptions; no compared line depends on them.

Findings. The search is right at 2.21: nicksim prints the ring graph as NCCL did. The printing is
not: nicksim gives 2.21 the 2.18-2.20 layout (`CPU/0 (1/1/2)`, `PCI/17000`, path entries
`GPU/19000 (2/370.800000/NVL)`), while NCCL 2.21.5's topo.cc and paths.cc (tag v2.21.5-1) already
print node ids as `%lx-%lx` and path bandwidths as `%.1f` - the layout nicksim reserves for 2.22.
The only printing change from 2.21.5 to 2.22.3 is a line for LOC links (the `<pcilink>` PCI-switch
links 2.22 introduced), and this machine has none, so nicksim's 2.22 output is what 2.21.5 printed
here; the tests below show both.
"""
import pytest

from conftest import run_cli

VERSION = "2.21"

# Visible in the issue (prefix `gh-3714u06:737:737 [0] NCCL INFO ` removed).
SYSTEM_HEAD = """\
=== System : maxBw 48.0 totalBw 370.8 ===
CPU/0-0 (1/1/2)
+ PCI[48.0] - PCI/0-17000 (1000c03015d91d25)
              + PCI[48.0] - GPU/0-19000 (0)
                            + NVL[370.8] - NVS/0
+ PCI[48.0] - PCI/0-2a000 (1000c03015d91d25)
              + PCI[48.0] - GPU/0-2d000 (1)""".splitlines()

PATH_LINES = [
    "GPU/E4000 :GPU/0-19000 (2/370.8/NVL) GPU/0-2d000 (2/370.8/NVL) GPU/0-3f000 (2/370.8/NVL) "
    "GPU/0-66000 (2/370.8/NVL) GPU/0-9b000 (2/370.8/NVL) GPU/0-ae000 (2/370.8/NVL) GPU/0-bf000 (2/370.8/NVL) "
    "GPU/0-e4000 (0/5000.0/LOC) NVS/0-0 (1/370.8/NVL) CPU/0-0 (3/10.0/SYS) CPU/0-1 (2/48.0/PHB) "
    "NET/0-0 (5/48.0/PXN)",
    "NET/0 :GPU/0-19000 (6/10.0/SYS) GPU/0-2d000 (6/10.0/SYS) GPU/0-3f000 (6/10.0/SYS) GPU/0-66000 (6/10.0/SYS) "
    "GPU/0-9b000 (5/48.0/PHB) GPU/0-ae000 (5/48.0/PHB) GPU/0-bf000 (3/48.0/PIX) GPU/0-e4000 (5/48.0/PHB) "
    "CPU/0-0 (4/10.0/SYS) CPU/0-1 (3/48.0/PHB) NET/0-0 (0/5000.0/LOC)",
]

RING_GRAPH = """\
Pattern 4, crossNic 0, nChannels 2, bw 24.000000/24.000000, type NVL/PXN, sameChannels 1
 0 : NET/0 GPU/6 GPU/5 GPU/4 GPU/3 GPU/2 GPU/1 GPU/0 GPU/7 NET/0
 1 : NET/0 GPU/6 GPU/5 GPU/4 GPU/3 GPU/2 GPU/1 GPU/0 GPU/7 NET/0""".splitlines()
TREE_GRAPH_START = "Pattern 3, crossNic 0, nChannels 2,"  # the stored text breaks off here


def _issue_1591_xml() -> str:
    pci = 'link_speed="32.0 GT/s PCIe" link_width="16"'
    bcm = 'class="0x060400" vendor="0x1000" device="0xc030" subsystem_vendor="0x15d9" subsystem_device="0x1d25"'
    cpu = 'arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143"'
    nic = (f'<pci busid="0000:c0:00.0" class="0x020700" vendor="0x15b3" device="0x1021" {pci}><nic>'
           '<net name="mlx5_0" dev="0" speed="400000" port="1" guid="0x1" maxconn="131072" gdr="1"/></nic></pci>')
    rank = iter(range(8))

    def switch(bus: int, gpu_bus: int, extra: str = "") -> str:
        r = next(rank)
        gpu = (f'<pci busid="0000:{gpu_bus:02x}:00.0" class="0x030200" vendor="0x10de" device="0x2330" {pci}>'
               f'<gpu dev="{r}" sm="90" rank="{r}" gdr="1"><nvlink target="0000:00:00.0" count="18" '
               'tclass="0x068000"/></gpu></pci>')
        return f'<pci busid="0000:{bus:02x}:00.0" {bcm} {pci}>{gpu}{extra}</pci>'

    # 17000 and 2a000 are printed; 3c000, 63000, 98000, ab000, bc000, e1000 and the NIC's c0000 are assumed.
    cpu0 = switch(0x17, 0x19) + switch(0x2a, 0x2d) + switch(0x3c, 0x3f) + switch(0x63, 0x66)
    cpu1 = switch(0x98, 0x9b) + switch(0xab, 0xae) + switch(0xbc, 0xbf, nic) + switch(0xe1, 0xe4)
    return (f'<system version="1"><cpu numaid="0" {cpu}>{cpu0}</cpu>'
            f'<cpu numaid="1" {cpu}>{cpu1}</cpu></system>')


@pytest.fixture(scope="module")
def topo_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("issue1591") / "issue-1591.xml"
    path.write_text(_issue_1591_xml())
    return str(path)


def _topo(topo_file: str, version: str) -> tuple[list[str], list[str]]:
    result = run_cli("topo", topo_file, "--nccl-version", version, "--nodes", "2", "--paths")
    assert result.returncode == 0, result.stderr
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("=== System"))
    end = lines.index("==========================================", start)
    return lines[start:end + 1], lines


def _path_line(lines: list[str], head: str) -> str:
    return next((line for line in lines if line.startswith(head + " :")), f"<no {head} path line>")


def test_ring_graph_2_21(topo_file):
    result = run_cli("search", topo_file, "--nccl-version", VERSION, "--nodes", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    i = lines.index(RING_GRAPH[0])
    assert lines[i:i + len(RING_GRAPH)] == RING_GRAPH
    assert lines[i + len(RING_GRAPH)].startswith(TREE_GRAPH_START)


# topo.cc / paths.cc (v2.21.5) print nodes as %s/%lx-%lx and path entries with %.1f: 2.22's layout
# without the LOC-link lines 2.22 added.
def test_system_and_path_lines_in_2_21_layout(topo_file):
    block, lines = _topo(topo_file, VERSION)
    assert block[:len(SYSTEM_HEAD)] == SYSTEM_HEAD
    assert [_path_line(lines, "GPU/E4000"), _path_line(lines, "NET/0")] == PATH_LINES


def test_same_lines_from_the_2_22_layout(topo_file):
    # The XML is not at fault: nicksim's 2.22 layout (what 2.21.5 printed for a machine without LOC
    # links) gives the issue's lines exactly; only the version-to-layout mapping is wrong.
    block, lines = _topo(topo_file, "2.22")
    assert block[:len(SYSTEM_HEAD)] == SYSTEM_HEAD
    assert [_path_line(lines, "GPU/E4000"), _path_line(lines, "NET/0")] == PATH_LINES
