"""Completing partial vendor files (../shared/validation/topologies) and shaping nodes."""
import pytest

from conftest import build, need_validation, run_cli
from nicksim.errors import UsageError
from nicksim.topology.fill import FillOptions, fill_topology, ofi_nic_groups
from nicksim.topology.hardware import fabric, gpu_model
from nicksim.topology.xml import parse_topo_xml, read_topo_xml


def vfile(name):
    return str(need_validation() / "topologies" / name)


def test_every_validation_file_loads_without_options():
    for path in sorted((need_validation() / "topologies").glob("*.xml")):
        system, paths = build(str(path))
        assert system.of_kind("CPU"), path.name


def test_p4d_gpus_are_completed_from_the_pci_device_id():
    # p4d.24xlarge lists A100 endpoints (10de:20b0) without <gpu>; the model is inferred, NVSwitch links added.
    system, paths = build(vfile("topo_aws_p4d_24xl.xml"))
    assert len(system.gpus()) == 8 and len(system.nets()) == 4
    assert all(system.nodes[g].gpu.sm == 80 for g in system.gpus())
    assert paths.total_bw == pytest.approx(12 * 20.0)
    assert any("inferred" in n or "completed 8 GPU" in n for n in system.notes)


def test_p5_v192_places_one_gpu_per_leaf_switch_and_makes_the_endpoints_nics():
    system, paths = build(vfile("topo_aws_p5_48xl_v1.9.2.xml"), gpu="h100", fab="ib")
    assert len(system.gpus()) == 8 and len(system.nets()) == 32
    # Each GPU sits in the switch with its 4 NICs: PIX to those, never through the CPU.
    for rank in range(8):
        g = system.gpu_by_rank(rank)
        pix = [n for n in system.nets() if paths.path(g, n).type == "PIX"]
        assert len(pix) == 4


def test_p5_v192_efa_nics_are_fused_four_per_gpu_as_aws_ofi_nccl_does():
    # aws-ofi-nccl v1.9.2-aws, RDMA protocol: one NCCL device per GPU's group of 4 NICs, reporting
    # 4 x 100 Gbit/s (nccl_ofi_rdma.c get_properties), latency 75 us (platform-aws.c), guid = dev.
    doc = read_topo_xml(vfile("topo_aws_p5_48xl_v1.9.2.xml"))
    filled = fill_topology(doc, FillOptions(gpu=gpu_model("h100"), fabric=fabric("efa")))
    nets = [n for n in filled.doc.root.iter() if n.tag == "net"]
    assert [n.get("dev") for n in nets] == [str(d) for d in range(8)]
    assert {(n.get("speed"), n.get("latency"), n.get("maxconn"), n.get("gdr")) for n in nets} == {
        ("400000", "75.000000", "262144", "1")}
    assert [n.get("guid") for n in nets] == [f"0x{d:x}" for d in range(8)]
    # The other 24 NIC endpoints are gone, as NCCL's ncclTopoTrimXml drops them.
    assert sum(1 for n in filled.doc.root.iter() if n.tag == "pci") == 8 + 8 + 8
    assert any("8 NCCL devices of 4 NICs" in note for note in filled.notes)
    system, paths = build(vfile("topo_aws_p5_48xl_v1.9.2.xml"), "2.22", gpu="h100", fab="efa", nodes=2)
    assert [system.nodes[n].net.bw_gbps for n in system.nets()] == [50.0] * 8
    for rank in range(8):
        g = system.gpu_by_rank(rank)
        pix = [system.nodes[n].net.dev for n in system.nets() if paths.path(g, n).type == "PIX"]
        assert pix == [rank]
    # --nic-gbps is per EFA NIC; a fused device reports the sum.
    slow, _ = build(vfile("topo_aws_p5_48xl_v1.9.2.xml"), gpu="h100", fab="efa", nic_gbps=50)
    assert {slow.nodes[n].net.bw_gbps for n in slow.nets()} == {25.0}


def test_p4d_efa_keeps_one_device_per_nic():
    # p4d: two GPUs and one NIC per switch, so every group holds a single NIC (create_groups_from_info_list
    # makes min(GPUs, NICs) groups), the same devices as the SENDRECV protocol p4d uses by default.
    system, paths = build(vfile("topo_aws_p4d_24xl.xml"), "2.22", fab="efa")
    assert [system.nodes[n].net.dev for n in system.nets()] == [0, 1, 2, 3]
    assert {system.nodes[n].net.bw_gbps for n in system.nets()} == {12.5}
    assert any("one NCCL device each" in n for n in system.notes)


def test_ofi_groups_split_a_shared_list_and_refuse_uneven_groups():
    # Two GPUs and three NICs behind one switch: 3 NICs for 2 groups -> sizes 2 and 1, which the RDMA
    # protocol refuses ("Wrong number of NICs for device"), so every NIC stays its own device.
    body = ('<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">'
            '<pci busid="0000:10:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">'
            + "".join(f'<pci busid="0000:{b:02x}:00.0" class="0x020000" link_speed="32.0 GT/s PCIe" link_width="16"/>'
                      for b in (0x11, 0x12, 0x13))
            + "".join(f'<pci busid="0000:{b:02x}:00.0" class="0x030200" vendor="0x10de" device="0x2330" '
                      'link_speed="32.0 GT/s PCIe" link_width="16"/>' for b in (0x14, 0x15))
            + '</pci></cpu></system>')
    doc = parse_topo_xml(body, "uneven.xml")
    nics = [n for n in doc.root.iter() if (n.get("class") or "").startswith("0x02")]
    gpus = [n for n in doc.root.iter() if (n.get("class") or "").startswith("0x03")]
    groups, lonely = ofi_nic_groups(doc.root, nics, gpus)
    assert [[n.get("busid")[5:7] for n in g] for g in groups] == [["11"], ["13", "12"]] and not lonely
    filled = fill_topology(doc, FillOptions(gpu=gpu_model("h100"), fabric=fabric("efa")))
    assert sum(1 for n in filled.doc.root.iter() if n.tag == "net") == 3
    assert any("Wrong number of NICs" in n for n in filled.notes)


def test_azure_ndv2_v100_cube_mesh():
    system, paths = build(vfile("topo_azure_ndv2.xml"), gpu="v100")
    assert len(system.gpus()) == 8
    for g in system.gpus():
        total = sum(l.bw_gbps for l in system.nodes[system.device_of(g)].links if l.kind == "NVL")
        assert total == pytest.approx(6 * 20.0)  # 6 NVLinks per V100 (topo.h SM70 20.0)
    g0, g3, g5 = (system.gpu_by_rank(r) for r in (0, 3, 5))
    assert paths.path(g0, g3).type == "NVL" and paths.path(g0, g3).bw_gbps == pytest.approx(40.0)
    assert paths.path(g0, g5).type == "NVB"  # two NVLink hops through GPU 1 or 4


def test_g5_root_ports_become_gpus_and_the_last_endpoint_the_nic():
    system, _ = build(vfile("topo_aws_g5_48xl.xml"), gpu="a10g")
    assert len(system.gpus()) == 8 and len(system.nets()) == 1


def test_gpus_without_a_model_are_left_out_with_a_note():
    system, paths = build(vfile("topo_azure_ndv5.xml"))
    assert not system.gpus()
    assert any("--gpu" in n for n in system.notes)
    completed, _ = build(vfile("topo_azure_ndv5.xml"), gpu="h100", fab="ib", nic_gbps=400)
    assert len(completed.gpus()) == 8 and {completed.nodes[n].net.bw_gbps for n in completed.nets()} == {50.0}


def test_completion_never_changes_what_the_file_states():
    doc = read_topo_xml(vfile("topo_azure_ndv4.xml"))
    filled = fill_topology(doc, FillOptions(gpu=gpu_model("a100")))
    before = {n.get("busid"): n.attrs for n in doc.root.iter() if n.tag == "pci"}
    after = {n.get("busid"): n.attrs for n in filled.doc.root.iter() if n.tag == "pci"}
    for busid, attrs in before.items():
        assert after[busid][:len(attrs)] == attrs


def test_gpus_and_nics_per_node():
    system, _ = build("dgx-h100", gpus_per_node=2, nics_per_node=4, nic_gbps=200)
    assert len(system.gpus()) == 2 and len(system.nets()) == 4
    assert {system.nodes[n].net.bw_gbps for n in system.nets()} == {25.0}
    more, _ = build("dgx-h100", nics_per_node=16)
    assert len(more.nets()) == 16 and sorted(more.nodes[n].net.dev for n in more.nets()) == list(range(16))
    with pytest.raises(UsageError):
        build("dgx-h100", gpus_per_node=9)


def test_trimming_gpus_drops_nvlinks_to_them():
    system, paths = build(vfile("topo_azure_ndv2.xml"), gpu="v100", gpus_per_node=4)
    assert len(system.gpus()) == 4


def test_tcp_fabric_turns_gdr_off():
    system, paths = build("dgx-h100", fab="tcp", nodes=2)
    assert paths.net_plugin == "Socket"
    assert not any(g.enabled for g in paths.gdr_send.values())


def test_a_gpu_model_the_file_contradicts_is_refused():
    # --gpu completes GPUs a file lacks; a catalog DGX H100 has its H100s, and H800 there would be
    # ignored in silence.
    out = run_cli("perf", "all_reduce", "-b", "1G", "-e", "1G", "--gpu", "h800")
    assert out.returncode == 2 and "H100 SXM5, not H800 SXM5" in out.stderr
    assert run_cli("perf", "all_reduce", "-b", "1G", "-e", "1G", "--gpu", "h100").returncode == 0
