"""`nicksim topo --dump-xml FILE` writes what NCCL_TOPO_DUMP_FILE holds: nothing before `<system>`,
NVSwitch targets as NCCL writes them; where the file came from goes to FILE.nicksim.txt."""
import re

from lxml import etree

from nicksim import api

from conftest import run_cli


def _partial(tmp_path):
    """dgx-h100 as vendors ship such files: the PCI tree, no <gpu> (so no NVLinks)."""
    full = api.topology_xml(api.load("dgx-h100"))
    path = tmp_path / "vendor.xml"
    path.write_text(re.sub(r"<gpu [^>]*>.*?</gpu>", "", full, flags=re.S))
    return path


def test_the_dump_has_nothing_before_the_root_and_its_provenance_beside_it(tmp_path):
    dump = tmp_path / "topo.xml"
    result = run_cli("topo", "dgx-h100", "--dump-xml", str(dump))
    assert result.returncode == 0, result.stderr
    text = dump.read_text()
    assert text.startswith('<system version="1">\n') and "<!--" not in text
    side = (tmp_path / "topo.xml.nicksim.txt").read_text()
    assert side.startswith(f"nicksim {api.VERSION}: the node of dgx-h100")
    assert "NVIDIA DGX H100" in side  # the catalog file's comment, kept out of the dump
    again = run_cli("topo", str(dump))
    assert again.returncode == 0, again.stderr
    assert again.stdout == result.stdout


def test_completed_nvswitch_links_target_the_bus_id_nccl_writes(tmp_path):
    dump = tmp_path / "filled.xml"
    result = run_cli("topo", str(_partial(tmp_path)), "--gpu", "h100", "--dump-xml", str(dump))
    assert result.returncode == 0, result.stderr
    links = etree.fromstring(dump.read_bytes()).findall(".//gpu/nvlink")
    assert len(links) == 8
    # NCCL 2.30.7 src/graph/xml.cc: an NVLink peer NVML gives no bus id for is written "fffffff:ffff:ff"
    assert {(n.get("target"), n.get("count"), n.get("tclass")) for n in links} == {
        ("fffffff:ffff:ff", "18", "0x068000")}
    side = (tmp_path / "filled.xml.nicksim.txt").read_text()
    assert "with gpu=h100" in side and "added H100 SXM5 NVLinks" in side
    again = run_cli("topo", str(dump))  # NCCL's form reads back as the same machine
    assert again.returncode == 0, again.stderr
    assert again.stdout == result.stdout


def test_a_dump_to_a_device_writes_no_side_file(tmp_path):
    assert api.write_topology(api.load("dgx-a100"), "/dev/null") is None
    assert api.write_topology(api.load("dgx-a100"), tmp_path / "a.xml") == tmp_path / "a.xml.nicksim.txt"
