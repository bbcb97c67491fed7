"""Topology XML reading and writing: line numbers in errors, lossless dump -> load."""
import pytest

from conftest import need_validation
from nicksim.topology.catalog import CATALOG, topology_dir
from nicksim.constants import parse_version, topo_rules
from nicksim.errors import TopologyError
from nicksim.topology.system import build_system, format_system
from nicksim.topology.xml import dump_topo_xml, parse_topo_xml, read_topo_xml


def _files():
    files = [topology_dir() / e.file for e in CATALOG.values()]
    return files


def test_broken_xml_names_the_line(tmp_path):
    path = tmp_path / "broken.xml"
    path.write_text('<system version="1">\n  <cpu numaid="0">\n    <pci busid="0000:01:00.0">\n  </cpu>\n</system>\n')
    with pytest.raises(TopologyError) as err:
        read_topo_xml(path)
    assert err.value.where.startswith(f"{path}:") and err.value.where.split(":")[-1].isdigit()
    assert "broken XML" in err.value.what


def test_root_must_be_system():
    with pytest.raises(TopologyError) as err:
        parse_topo_xml('<graphs version="1"/>', "g.xml")
    assert err.value.where == "g.xml:1" and "<system" in err.value.valid


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.xml"
    empty.write_text("")
    with pytest.raises(TopologyError, match="empty"):
        read_topo_xml(empty)
    with pytest.raises(TopologyError, match="no such file"):
        read_topo_xml(tmp_path / "nope.xml")


def test_comments_before_root_and_unknown_attributes_survive():
    text = ('<!-- vendor: example -->\n<system version="1">\n  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel"'
            ' familyid="6" modelid="85" color="blue"/>\n</system>\n')
    doc = parse_topo_xml(text, "t.xml")
    assert doc.comments == (" vendor: example ",)
    dumped = dump_topo_xml(doc)
    assert dumped.startswith("<!-- vendor: example -->\n")
    assert 'color="blue"' in dumped


def _round_trip(path):
    doc = read_topo_xml(path)
    once = dump_topo_xml(doc)
    again = dump_topo_xml(parse_topo_xml(once, str(path)))
    assert once == again
    rules = topo_rules(parse_version("2.30"))
    # Same system either way (element lines differ between layouts, the model must not).
    a = build_system(doc, rules)
    b = build_system(parse_topo_xml(once, str(path)), rules)
    assert format_system(a, 0, 0) == format_system(b, 0, 0)


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.name)
def test_catalog_files_round_trip(path):
    _round_trip(path)


def test_validation_files_round_trip():
    folder = need_validation() / "topologies"
    files = sorted(folder.glob("*.xml"))
    assert len(files) >= 10
    for path in files:
        _round_trip(path)
