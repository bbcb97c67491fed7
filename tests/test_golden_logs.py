"""Systems rebuilt from their own NCCL printouts in public issues, printed back line for line.

NVIDIA/nccl#1197 (NCCL 2.19.4, 8x H100 SXM in PLX Gen4 switches, 4x 200G NICs, 2x Intel Skylake+)
posted its `=== System` print. The XML below is written from that print alone: bus ids, switch
ids, link widths, NIC guids/ports and the NVSwitch link count are what the print shows. The
poster re-indented the lines, so they are compared without leading blanks.
"""
from nicksim.constants import parse_version, topo_rules
from nicksim.params import read_params
from nicksim.graph.paths import compute_paths, format_nccl_paths
from nicksim.topology.system import build_system, format_system
from nicksim.topology.xml import parse_topo_xml

ISSUE_1197_PRINT = """\
=== System : maxBw 24.0 totalBw 360.0 ===
CPU/0 (1/1/2)
+ PCI[24.0] - PCI/2000 (10b5879610b58796)
+ PCI[24.0] - GPU/4000 (0)
+ NVL[360.0] - NVS/0
+ PCI[24.0] - GPU/5000 (1)
+ NVL[360.0] - NVS/0
+ PCI[24.0] - NIC/6000
+ NET[25.0] - NET/0 (0/0/25.000000)
+ PCI[24.0] - PCI/8000 (10b5879610b58796)
+ PCI[24.0] - GPU/A000 (2)
+ NVL[360.0] - NVS/0
+ PCI[24.0] - GPU/B000 (3)
+ NVL[360.0] - NVS/0
+ PCI[24.0] - NIC/C000
+ NET[25.0] - NET/1 (1/0/25.000000)
+ SYS[10.0] - CPU/1
CPU/1 (1/1/2)
+ PCI[24.0] - PCI/82000 (10b5879610b58796)
+ PCI[24.0] - GPU/84000 (4)
+ NVL[360.0] - NVS/0
+ PCI[24.0] - GPU/85000 (5)
+ NVL[360.0] - NVS/0
+ PCI[24.0] - NIC/86000
+ NET[25.0] - NET/2 (2/0/25.000000)
+ PCI[24.0] - PCI/88000 (10b5879610b58796)
+ PCI[24.0] - GPU/8A000 (6)
+ NVL[360.0] - NVS/0
+ PCI[24.0] - GPU/8B000 (7)
+ NVL[360.0] - NVS/0
+ PCI[24.0] - NIC/8C000
+ NET[25.0] - NET/3 (3/0/25.000000)"""


def _issue_1197_xml() -> str:
    pci = 'link_speed="16.0 GT/s PCIe" link_width="16"'
    plx = 'class="0x060400" vendor="0x10b5" device="0x8796" subsystem_vendor="0x10b5" subsystem_device="0x8796"'
    rank = iter(range(8))
    dev = iter(range(8))
    net = iter(range(4))

    def switch(bus, gpu_buses, nic_bus):
        gpus = "".join(
            f'<pci busid="0000:{b:02x}:00.0" class="0x030200" {pci}><gpu dev="{next(dev)}" sm="90" '
            f'rank="{next(rank)}" gdr="1"><nvlink target="ffff:ff:00.0" count="18" tclass="0x068000"/></gpu></pci>'
            for b in gpu_buses)
        n = next(net)
        nic = (f'<pci busid="0000:{nic_bus:02x}:00.0" class="0x020700" {pci}><nic><net name="mlx5_{n}" dev="{n}" '
               f'speed="200000" port="0" guid="0x{n:x}" maxconn="131072" gdr="1"/></nic></pci>')
        return f'<pci busid="0000:{bus:02x}:00.0" {plx} {pci}>{gpus}{nic}</pci>'

    cpu = 'arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143"'
    return (f'<system version="1"><cpu numaid="0" {cpu}>{switch(0x02, (0x04, 0x05), 0x06)}'
            f'{switch(0x08, (0x0a, 0x0b), 0x0c)}</cpu><cpu numaid="1" {cpu}>{switch(0x82, (0x84, 0x85), 0x86)}'
            f'{switch(0x88, (0x8a, 0x8b), 0x8c)}</cpu></system>')


def test_issue_1197_system_print_line_for_line():
    system = build_system(parse_topo_xml(_issue_1197_xml(), "issue-1197.xml"), topo_rules(parse_version("2.19.4")))
    # A multi-node job (the issue runs with NET): maxBw is the GPU->NIC path.
    paths = compute_paths(system, read_params({}), nranks=2 * len(system.gpus()))
    printed = [line.strip() for line in format_system(system, paths.max_bw, paths.total_bw)]
    expected = ISSUE_1197_PRINT.splitlines()
    assert printed[:len(expected)] == expected
    assert printed[len(expected):] == ["+ SYS[10.0] - CPU/0", "=========================================="]


def test_path_lines_in_2_22_layout():
    # NVIDIA/nccl-tests#307 (NCCL 2.22): "GPU/CE000 :GPU/0-4e000 (5/10.0/SYS) ... CPU/0-1 (2/24.0/PHB)":
    # the header keeps %lX, the entries are %lx-%lx with one decimal.
    system = build_system(parse_topo_xml(_issue_1197_xml(), "issue-1197.xml"), topo_rules(parse_version("2.22")))
    line = format_nccl_paths(compute_paths(system, read_params({})))[0]
    assert line.startswith("GPU/4000 :GPU/0-4000 (0/5000.0/LOC) GPU/0-5000 (2/370.8/NVL) ")
    assert "CPU/0-0 (2/24.0/PHB) CPU/0-1 (3/10.0/SYS)" in line
