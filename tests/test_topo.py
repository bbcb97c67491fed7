"""The System: NCCL's bandwidths and structure, printed as ncclTopoPrint does."""
import re

import pytest

from conftest import build, need_validation
from nicksim.topology.catalog import CATALOG
from nicksim.constants import parse_version, topo_rules
from nicksim.errors import TopologyError
from nicksim.topology.fill import FillOptions, fill_topology, ofi_nic_groups
from nicksim.topology.hardware import gpu_model
from nicksim.topology.system import build_system, format_system, pci_gen_code
from nicksim.topology.xml import parse_topo_xml, read_topo_xml


def links_of(system, index, kind):
    return [l for l in system.nodes[index].links if l.kind == kind]


def test_dgx_h100_nvlink_is_18_links_times_the_version_constant():
    # topo.h SM90_NVLINK_BW: 20.6 (2.20+) -> 18 x 20.6 = 370.8; 20.0 in 2.19 -> 360.0, as 2.19 logs print.
    for version, expected in (("2.30", 370.8), ("2.22", 370.8), ("2.19", 360.0)):
        system, paths = build("dgx-h100", version)
        dev = system.device_of(system.gpus()[0])
        (nvl,) = links_of(system, dev, "NVL")
        assert nvl.bw_gbps == pytest.approx(expected)
        assert paths.total_bw == pytest.approx(expected)
        assert paths.max_bw == pytest.approx(expected)  # one node: best GPU-GPU path (search.cc)


def test_catalog_bandwidths():
    # Per GPU: NVLink links x per-link constant (topo.h 2.30.7: SM80 20.0, SM90 20.6, SM100 40.1),
    # PCIe width x code / 80 (kvDictPciGen: Gen4 120 -> 24, Gen5 240 -> 48).
    expected = {
        "dgx-a100": 12 * 20.0, "dgx-h100": 18 * 20.6, "hgx-h200": 18 * 20.6, "hgx-h800": 8 * 20.6, "dgx-b200": 18 * 40.1,
        "gb200-nvl72": 18 * 40.1, "pcie-8x-rtx4090": 24.0, "pcie-2x-rtx2080ti": 12.0, "pcie-8x-l40s": 24.0,
        "aws-p5": 18 * 20.6, "azure-ndv4": 12 * 20.0, "azure-ndv5": 18 * 20.6,
    }
    assert set(expected) == set(CATALOG)
    for name, total in expected.items():
        _, paths = build(name)
        assert paths.total_bw == pytest.approx(total), name


def test_multi_node_max_bw_is_the_gpu_to_nic_path():
    # search.cc ncclTopoSearchInit: with inter, maxBw = best GPU->NET path: min(PCIe Gen5 x16 48, NET 400G = 50).
    _, paths = build("dgx-h100", nodes=2)
    assert paths.max_bw == pytest.approx(48.0) and paths.total_bw == pytest.approx(370.8)


def test_net_speed_is_mbps_over_8000():
    system, _ = build("dgx-h100")
    assert {system.nodes[n].net.bw_gbps for n in system.nets()} == {50.0}
    system, _ = build("dgx-a100")
    assert {system.nodes[n].net.bw_gbps for n in system.nets()} == {25.0}


def _two_socket(vendor_attrs):
    return parse_topo_xml(f'''<system version="1">
  <cpu numaid="0" {vendor_attrs}/>
  <cpu numaid="1" {vendor_attrs}/>
</system>''', "two.xml")


@pytest.mark.parametrize("attrs,version,bw", [
    ('arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143"', "2.26", 22.0),   # SRP_QPI_BW
    ('arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143"', "2.25", 10.0),   # SKL before SRP existed
    ('arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="207"', "2.30", 40.0),   # ERP_QPI_BW
    ('arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="79"', "2.30", 6.0),     # BDW_QPI_BW
    ('arch="x86_64" vendor="AuthenticAMD" familyid="175" modelid="1"', "2.19", 16.0),   # AMD_BW, 2.19+
    ('arch="x86_64" vendor="AuthenticAMD" familyid="175" modelid="1"', "2.18", 5000.0), # LOC_BW before
    ('arch="arm64"', "2.30", 6.0),                                                      # ARM_BW
    ('arch="ppc64"', "2.30", 32.0),                                                     # P9_BW
])
def test_inter_cpu_bandwidth(attrs, version, bw):
    system = build_system(_two_socket(attrs), topo_rules(parse_version(version)))
    cpu0 = system.of_kind("CPU")[0]
    (sys_link,) = links_of(system, cpu0, "SYS")
    assert sys_link.bw_gbps == bw


def test_print_format_per_version():
    # topo.cc ncclTopoPrintRec: "%s/%lX" until 2.20; 2.21 nodes "%s/%lx-%lx" but link targets "%s/%lX";
    # 2.22 also prints LOC links; 2.23+ both "%lx-%lx"; 2.30 hangs each GPU below a DEV node.
    old = "\n".join(format_system(build("dgx-h100", "2.20")[0], 0, 0))
    assert "+ PCI[48.0] - GPU/1B000 (0)" in old and "+ NVL[370.8] - NVS/0" in old and "LOC[" not in old
    v221 = "\n".join(format_system(build("dgx-h100", "2.21")[0], 0, 0))
    assert "GPU/0-1b000 (0)" in v221 and "+ NVL[370.8] - NVS/0\n" in v221 + "\n" and "LOC[" not in v221
    mid = "\n".join(format_system(build("dgx-h100", "2.22")[0], 0, 0))
    assert "GPU/0-1b000 (0)" in mid and "+ NVL[370.8] - NVS/0\n" in mid + "\n"
    new = "\n".join(format_system(build("dgx-h100", "2.30")[0], 0, 0))
    assert "DEV/0-1b000" in new and "+ LOC[5000.0] - GPU/0-1b000" in new and "- NVS/0-0" in new
    # NET targets gain the collective-support field in 2.26.
    assert re.search(r"NET/0-0 \(0/[0-9a-f]+/1/50\.000000\)", new)
    assert re.search(r"NET/0 \([0-9a-f]+/1/50\.000000\)", mid)


def test_c2c_is_an_nvlink_before_2_26():
    # topo.cc ncclTopoAddC2c connects LINK_NVL before v2.26 and LINK_C2C after; bw = bw x count / 1000.
    new, _ = build("gb200-nvl72", "2.30")
    old, _ = build("gb200-nvl72", "2.25")
    dev = new.device_of(new.gpus()[0])
    (c2c,) = links_of(new, dev, "C2C")
    assert c2c.bw_gbps == pytest.approx(45000 * 5 / 1000)
    gpu = old.gpus()[0]
    assert sorted(l.bw_gbps for l in links_of(old, gpu, "NVL")) == [225.0, pytest.approx(18 * 40.0)]


def test_gb200_is_one_nvlink_domain_of_72():
    system, paths = build("gb200-nvl72")
    assert len(system.gpus()) == 72 and len(system.host_hashes) == 18 and len(system.of_kind("NVS")) == 1
    first, last = system.gpu_by_rank(0), system.gpu_by_rank(71)
    assert paths.path(first, last).type == "NVL"


def test_broadcom_gen4_switches_are_flattened():
    # topo.cc ncclTopoFlattenBcmSwitches: the SimAI A100 file's 0x1000c0101000a096 sub-switches merge up.
    folder = need_validation() / "topologies"
    system, paths = build(str(folder / "topo_aliyun_simai_topo_8A100_4CX6.xml"))
    ids = {system.nodes[i].local_id for i in system.of_kind("PCI")}
    assert 0xC000 in ids and 0xE000 not in ids and 0x15000 not in ids
    gpu0 = system.gpu_by_rank(0)
    net1 = next(n for n in system.nets() if system.nodes[n].net.dev == 1)
    assert paths.path(gpu0, net1).type == "PXB"


@pytest.mark.parametrize("body,fragment,line", [
    ('<cpu numaid="0"><pci busid="0000:01:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" link_width="16">'
     '<nic><net name="x" dev="0" speed="fast"/></nic></pci></cpu>', 'speed="fast" is not an integer', 2),
    ('<cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">'
     '<gpu dev="0" sm="80" rank="0" gdr="1"><nvlink target="0000:99:00.0" count="12" tclass="0x030200"/>'
     '</gpu></pci></cpu>', "target 0000:99:00.0 is not a GPU in this file", 2),
    ('<cpu numaid="0"><pci busid="0000:01:00.0"/>\n<pci busid="0000:01:00.0"/></cpu>', "appears twice", 3),
    ('<cpu numaid="zero"/>', 'numaid="zero" is not an integer', 2),
    ('<cpu numaid="0"><pci busid="nope"/></cpu>', "not a PCI bus id", 2),
    ('<cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200" link_width="x16"/></cpu>', "link_width", 2),
    ('<cpu numaid="0" arch="sparc"/>', 'arch="sparc" is unknown', 2),
    ('<cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">'
     '<gpu dev="0" sm="80" rank="0" gdr="1"><nvlink target="0000:02:00.0" count="4" tclass="0x030200"/></gpu></pci>'
     '<pci busid="0000:02:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">'
     '<gpu dev="1" sm="80" rank="1" gdr="1"/></pci></cpu>', "has no NVLink back", 2),
])
def test_bad_values_name_file_line_and_what_is_valid(body, fragment, line):
    doc = parse_topo_xml(f'<system version="1">\n{body}\n</system>', "bad.xml")
    with pytest.raises(TopologyError) as err:
        build_system(doc, topo_rules(parse_version("2.30")))
    assert fragment in err.value.what
    assert err.value.where == f"bad.xml:{line}"
    assert err.value.valid


def test_c01_p5_file_completed_with_h100_matches_the_log():
    """C01 (AWS p5, NCCL 2.22.3, aws-ofi-nccl 1.9.2-aws): GPU bus ids, the plugin's NIC groups and
    the NET device each rank's GPU uses, from its INFO log."""
    folder = need_validation()
    log = (folder / "raw" / "aws_p5_KeitaW_nccl-test-output-v2.22.3-1.log").read_text(errors="replace")
    busids = {int(m.group(1)): int(m.group(2), 16) for m in
              re.finditer(r"cudaDev (\d) nvmlDev \d busId ([0-9a-f]+)", log)}
    # Rank 0's "NET/OFI NIC group G device #K BUSID" lines (every rank prints the same 32).
    logged = [(int(m.group(1)), int(m.group(2)), m.group(3).lower()) for m in
              re.finditer(r"\[1,0\]<stdout>:\S+ \[0\] NCCL INFO NET/OFI NIC group (\d+) device #(\d+) (\S+)", log)]
    # Each local rank's GPU receives from its peer node through one NET device, with GPUDirect RDMA.
    via = {int(m.group(1)): int(m.group(2)) for m in
           re.finditer(r"\[1,(\d)\]<stdout>:test-nccl-worker-0:\S+ \[\d\] NCCL INFO Channel 00/0 : \d+\[\d\] -> \d+\[\d\] "
                       r"\[receive\] via NET/AWS Libfabric/(\d+)/GDRDMA", log)}
    assert len(busids) == 8 and len(logged) == 32 and len(via) == 8
    topo = str(folder / "topologies" / "topo_aws_p5_48xl_v1.9.2.xml")
    # The plugin's grouping, run on the file completed without it (32 bare NICs), gives the logged groups.
    plain = fill_topology(read_topo_xml(topo), FillOptions(gpu=gpu_model("h100")))
    nics = [n for n in plain.doc.root.iter() if n.find("nic") is not None]
    gpus = [n for n in plain.doc.root.iter() if n.find("gpu") is not None]
    groups, lonely = ofi_nic_groups(plain.doc.root, nics, gpus)
    assert not lonely
    assert [(g, k, nic.get("busid")) for g, group in enumerate(groups) for k, nic in enumerate(group)] == logged
    system, paths = build(topo, "2.22", gpu="h100", fab="efa", nodes=2)
    assert paths.net_plugin == "AWS Libfabric"
    for rank in range(8):
        gpu = system.nodes[system.gpu_by_rank(rank)]
        assert gpu.local_id == busids[gpu.gpu.dev]
        near = _closest_nets(paths, rank)
        assert [system.nodes[n].net.dev for n in near] == [via[rank]]
        assert [_nic_busid(system, n) for n in near] == [groups[via[rank]][0].get("busid")]
        assert paths.gdr_recv[(rank, near[0])].enabled and paths.gdr_send[(rank, near[0])].enabled
    # "NVLS multicast support is available": the GPUs hang off NVSwitches; and the communicator shape.
    assert "NVLS multicast support is available on dev 0" in log and len(system.of_kind("NVS")) == 1
    shape = re.search(r"\[0\] NCCL INFO comm \S+ rank 0 nRanks (\d+) nNodes (\d+) localRanks (\d+)", log)
    from nicksim.graph.cluster import ClusterSpec, build_cluster
    from nicksim.topology.hardware import fabric
    cluster = build_cluster(system, paths, ClusterSpec(nodes=int(shape.group(2)), fabric=fabric("efa")))
    assert (cluster.nranks, cluster.gpus_per_node) == (int(shape.group(1)), int(shape.group(3)))


def _closest_nets(paths, rank):
    from nicksim.graph.paths import local_nets
    return local_nets(paths, rank)


def _nic_busid(system, net):
    nic = next(l.dst for l in system.nodes[net].links if l.kind == "NET")
    local = system.nodes[nic].local_id
    return f"0000:{local >> 12 & 0xff:02x}:{local >> 4 & 0xff:02x}.{local & 0xf:x}"


@pytest.mark.parametrize("speed, code", [
    ("32 GT/s PCIe/s", 240),   # aws-ofi-nccl 1.9.2's p5 file: starts with "32 GT/s" -> Gen5
    ("32.0 GT/s PCIe", 240), ("16 GT/s", 120), ("8.0 GT/s PCIe", 60), ("2.5 GT/s PCIe", 15),
    ("64.0 GT/s PCIe", 480), ("Unknown", None), ("", None), (None, None),
])
def test_link_speed_is_read_by_prefix_as_kvconvertoint_does(speed, code):
    # xml.h kvConvertToInt: strncmp(str, d->str, strlen(d->str)), first match in kvDictPciGen order.
    assert pci_gen_code(speed) == code


def test_p5_v192_link_speed_string_gives_gen5_links_without_a_note():
    system, _ = build(str(need_validation() / "topologies" / "topo_aws_p5_48xl_v1.9.2.xml"), "2.22",
                      gpu="h100", fab="efa")
    for net in system.nets():
        nic = next(l.dst for l in system.nodes[net].links if l.kind == "NET")
        assert [l.bw_gbps for l in system.nodes[nic].links if l.kind == "PCI"] == [48.0]  # 16 x 240 / 80
    assert not any("unknown to NCCL" in n for n in system.notes)


def test_link_bandwidths_are_nccl_floats():
    # topo.cc keeps link->bw in float: one <nvlink count="18"> to the NVSwitches is 18 x 20.6f =
    # 370.800018 in float32, which 2.18-2.20 print with %f in their path lines (NVIDIA/nccl#1519
    # shows 370.800018); per-switch elements (5+4+4+5 links) add up to 370.799988 instead.
    from nicksim.constants import parse_version, topo_rules
    from nicksim.params import read_params
    from nicksim.graph.paths import compute_paths, format_nccl_paths
    from nicksim.topology.system import build_system
    from nicksim.topology.xml import parse_topo_xml
    gpus = "".join(
        f'<pci busid="0000:{b}:00.0" class="0x030200" vendor="0x10de" device="0x2330" subsystem_vendor="0x10de" '
        f'subsystem_device="0x16c1" link_speed="32.0 GT/s PCIe" link_width="16">'
        f'<gpu dev="{i}" sm="90" rank="{i}" gdr="1"><nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/>'
        f'</gpu></pci>' for i, b in enumerate(("1b", "43")))
    doc = parse_topo_xml(f'<system version="1"><cpu numaid="0" affinity="ff" arch="x86_64" vendor="GenuineIntel" '
                         f'familyid="6" modelid="143">{gpus}</cpu></system>')
    system = build_system(doc, topo_rules(parse_version("2.20")))
    lines = "\n".join(format_nccl_paths(compute_paths(system, read_params({}), nranks=2)))
    assert "/370.800018/NVL)" in lines
    dgx = "\n".join(format_nccl_paths(build("dgx-h100", "2.20")[1]))
    assert "/370.799988/NVL)" in dgx
