"""NVIDIA/nccl#1358, rebuilt from its own NCCL 2.20 printout and printed back.

https://github.com/NVIDIA/nccl/issues/1358 ("how does NCCL support peer-to-peer connections across
NUMA nodes without the features of NICs and NVLinks?"). In the reporter's second comment
(themoonstone) `all_reduce_perf -g 2` runs on two NVIDIA L4 (PCI 2a and ab) of host LIUCC13-AC-01;
the comment prints `NCCL version 2.20.3+cuda12.3`. That version line belongs to the comment's second
run (pid 106, NCCL_P2P_LEVEL=SYS); the lines below are from its first run (pid 84) in the same
container, whose own version line was not in the retrievable text. Their layout (`CPU/0`,
`GPU/2A000`, path bandwidths as `%f`) is the 2.18-2.20 one, consistent with 2.20.3. The graph code
of 2.20.3 and of 2.20.5 (which nicksim models as 2.20) differs only by a blank line in search.cc.

What the stored text shows, and these tests require line for line (prefix `LIUCC13-AC-01:84:98 [0]
NCCL INFO ` removed):

- the last eleven lines of the `=== System` block, from CPU/0's `+ SYS[10.0] - CPU/2` to the closing
  rule (the header and CPU/0's first two lines sit in a part of the comment that could not be
  retrieved and are not compared);
- both GPU path lines;
- the ring graph `Pattern 4, crossNic 0, nChannels 1, bw 10.000000/10.000000, type SYS/PIX,
  sameChannels 1` with channel ` 0 : GPU/0 GPU/1`, and the start of the tree graph line (the text
  breaks off inside it).

The XML: three Intel NUMA nodes (`1/1/2`, SYS 10.0) created in the order NCCL printed them (0, 2, 1:
NCCL creates a CPU when the first device under it is added, GPUs before NICs); each L4 (sm 89, Gen4
x16 = 24.0) straight under its root port (GPU/2A000 -> CPU/0 is one hop, PHB); and the Ethernet NIC
at 3d:00.0 under CPU/1 on a 2.5 GT/s x1 link (1 x 15 / 80 = 0.19, printed `PCI[0.2]`). One node and
all its GPUs in the communicator: NCCL drops the NET nodes from the system it prints and keeps the
NIC, as the log shows.

nicksim prints every one of these lines.
"""
import pytest

from conftest import run_cli

VERSION = "2.20"

SYSTEM_TAIL = """\
+ SYS[10.0] - CPU/2
+ SYS[10.0] - CPU/1
CPU/2 (1/1/2)
+ PCI[24.0] - GPU/AB000 (1)
+ SYS[10.0] - CPU/0
+ SYS[10.0] - CPU/1
CPU/1 (1/1/2)
+ SYS[10.0] - CPU/0
+ SYS[10.0] - CPU/2
+ PCI[0.2] - NIC/3D000
==========================================""".splitlines()

PATH_LINES = [
    "GPU/2A000 :GPU/2A000 (0/5000.000000/LOC) GPU/AB000 (3/10.000000/SYS) CPU/0 (1/24.000000/PHB) "
    "CPU/2 (2/10.000000/SYS) CPU/1 (2/10.000000/SYS)",
    "GPU/AB000 :GPU/2A000 (3/10.000000/SYS) GPU/AB000 (0/5000.000000/LOC) CPU/0 (2/10.000000/SYS) "
    "CPU/2 (1/24.000000/PHB) CPU/1 (2/10.000000/SYS)",
]

RING_GRAPH = """\
Pattern 4, crossNic 0, nChannels 1, bw 10.000000/10.000000, type SYS/PIX, sameChannels 1
 0 : GPU/0 GPU/1""".splitlines()
TREE_GRAPH_START = "Pattern 1, crossNic 0, nChannels 1, bw 10.000000/10.00000"

ISSUE_1358_XML = """\
<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:2a:00.0" class="0x030200" vendor="0x10de" device="0x27b8" link_speed="16.0 GT/s PCIe" link_width="16">
      <gpu dev="0" sm="89" rank="0" gdr="1"/>
    </pci>
  </cpu>
  <cpu numaid="2" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:ab:00.0" class="0x030200" vendor="0x10de" device="0x27b8" link_speed="16.0 GT/s PCIe" link_width="16">
      <gpu dev="1" sm="89" rank="1" gdr="1"/>
    </pci>
  </cpu>
  <cpu numaid="1" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:3d:00.0" class="0x020000" link_speed="2.5 GT/s PCIe" link_width="1">
      <nic><net name="ens3" dev="0" speed="1000" port="0" guid="0x0" maxconn="65536" gdr="0"/></nic>
    </pci>
  </cpu>
</system>
"""


@pytest.fixture(scope="module")
def topo_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("issue1358") / "issue-1358.xml"
    path.write_text(ISSUE_1358_XML)
    return str(path)


def test_system_tail_and_path_lines(topo_file):
    result = run_cli("topo", topo_file, "--nccl-version", VERSION, "--paths")
    assert result.returncode == 0, result.stderr
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    end = lines.index("==========================================")
    assert lines[end + 1 - len(SYSTEM_TAIL):end + 1] == SYSTEM_TAIL
    assert lines[end + 1:end + 3] == PATH_LINES


def test_ring_graph(topo_file):
    result = run_cli("search", topo_file, "--nccl-version", VERSION)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:len(RING_GRAPH)] == RING_GRAPH
    assert lines[len(RING_GRAPH)].startswith(TREE_GRAPH_START)
