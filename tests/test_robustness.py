"""Damaged topology files: any mutation either loads or fails as one NickSimError, never a crash."""
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nicksim.topology.catalog import topology_dir
from nicksim.constants import MODELLED_VERSIONS, topo_rules
from nicksim.errors import NickSimError
from nicksim.topology.fill import FillOptions, fill_topology
from nicksim.topology.hardware import GPU_MODELS
from nicksim.params import read_params
from nicksim.graph.paths import compute_paths
from nicksim.topology.system import build_system
from nicksim.topology.xml import TopoXml, XmlNode, dump_topo_xml, parse_topo_xml, read_topo_xml

_BASES = [read_topo_xml(topology_dir() / name) for name in ("dgx-h100.xml", "pcie-8x-l40s.xml", "dgx-a100.xml")]
# A DGX-1 style cube-mesh (GPU-to-GPU NVLinks), completed from a bare file, exercises NVLink targets.
_BASES.append(fill_topology(parse_topo_xml(
    '<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">'
    + "".join(f'<pci busid="0000:{b:02x}:00.0" class="0x030200" link_speed="8.0 GT/s PCIe" link_width="16"/>'
              for b in range(1, 9)) + "</cpu></system>", "cube.xml"), FillOptions(gpu=GPU_MODELS["v100"])).doc)
_VALUES = st.sampled_from(["", "fast", "-1", "0", "0x", "1e9", "99999999999999999999", "0000:zz:00.0",
                           "0000:18:00.0", "x86_64", "arm64", "16.0 GT/s PCIe", "0x068000", "0x030200", "nan"])


def _nodes(root: XmlNode) -> list[XmlNode]:
    return list(root.iter())


def _mutate(root: XmlNode, target: int, action: str, key_pick: int, value: str) -> XmlNode:
    counter = {"i": -1}

    def rec(node: XmlNode) -> XmlNode | None:
        counter["i"] += 1
        here = counter["i"]
        kids = tuple(k for k in (rec(c) for c in node.children) if k is not None)
        node = node.with_children(kids) if kids != node.children else node
        if here != target:
            return node
        if action == "drop-element" and node.tag != "system":
            return None
        if not node.attrs:
            return node
        key = node.attrs[key_pick % len(node.attrs)][0]
        if action == "drop-attr":
            return replace(node, attrs=tuple(a for a in node.attrs if a[0] != key))
        return node.with_attr(key, value)
    return rec(root)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(_BASES) - 1), st.lists(st.tuples(st.integers(0, 400),
       st.sampled_from(("set", "drop-attr", "drop-element")), st.integers(0, 20), _VALUES), min_size=1, max_size=4),
       st.sampled_from(MODELLED_VERSIONS), st.sampled_from([None, "h100", "a100", "rtx4090"]))
def test_mutated_files_load_or_fail_cleanly(base, mutations, version, gpu):
    doc = _BASES[base]
    root = doc.root
    for target, action, key_pick, value in mutations:
        root = _mutate(root, target % len(_nodes(root)), action, key_pick, value)
    text = dump_topo_xml(TopoXml(root, doc.comments, doc.source))
    try:
        filled = fill_topology(parse_topo_xml(text, "mutated.xml"),
                               FillOptions(gpu=GPU_MODELS[gpu] if gpu else None))
        system = build_system(filled.doc, topo_rules(version))
        compute_paths(system, read_params({}), nranks=2 * len(system.gpus()))
    except NickSimError as err:
        assert err.line() and "\n" not in err.line()
