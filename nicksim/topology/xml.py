"""NCCL topology XML (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE) <-> immutable trees.

`parse_topo_xml` reads a document with lxml and returns a TopoXml: the `<system>` tree as
XmlNode values (tag, ordered attributes, children, source line) plus the comments before the
root. `dump_topo_xml` writes it back the way NCCL's ncclTopoDumpXmlRec does (two-space
indent, attributes in their order, childless elements closed with "/>"), preceded by the same
comments, so dump -> load -> dump is byte-for-byte stable. Malformed XML is a TopologyError
carrying the file and line. Attribute *values* are checked later, by topo.py, which knows
what each attribute means.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from lxml import etree

from ..errors import TopologyError, UsageError
from ..files import read_input

__all__ = [
    "XmlNode",
    "TopoXml",
    "parse_topo_xml",
    "parse_graph_xml",
    "read_topo_xml",
    "dump_topo_xml",
    "write_topo_xml",
    "KNOWN_TAGS",
]

# Elements NCCL's topology loader understands (xml.cc); others are kept and ignored.
KNOWN_TAGS = frozenset({"system", "cpu", "pci", "gpu", "nvlink", "c2c", "nic", "net", "pcilink"})


@dataclass(frozen=True)
class XmlNode:
    """One element: tag, attributes in document order, child elements, and its source line."""

    tag: str
    attrs: tuple[tuple[str, str], ...] = ()
    children: tuple["XmlNode", ...] = ()
    line: int | None = None

    def get(self, key: str, default: str | None = None) -> str | None:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def has(self, key: str) -> bool:
        return any(k == key for k, _ in self.attrs)

    def with_attr(self, key: str, value: str) -> "XmlNode":
        """A copy with `key` set: replaced in place if present, appended otherwise."""
        if self.has(key):
            attrs = tuple((k, value if k == key else v) for k, v in self.attrs)
        else:
            attrs = self.attrs + ((key, value),)
        return replace(self, attrs=attrs)

    def with_children(self, children: tuple["XmlNode", ...] | list["XmlNode"]) -> "XmlNode":
        return replace(self, children=tuple(children))

    def find(self, tag: str) -> "XmlNode | None":
        return next((c for c in self.children if c.tag == tag), None)

    def findall(self, tag: str) -> tuple["XmlNode", ...]:
        return tuple(c for c in self.children if c.tag == tag)

    def iter(self) -> Iterator["XmlNode"]:
        yield self
        for child in self.children:
            yield from child.iter()


@dataclass(frozen=True)
class TopoXml:
    """A topology document: its `<system>` root, leading comments, and where it came from."""

    root: XmlNode
    comments: tuple[str, ...] = ()
    source: str = "<memory>"


def _to_node(element) -> XmlNode:
    children = tuple(_to_node(c) for c in element if isinstance(c.tag, str))
    attrs = tuple((str(k), str(v)) for k, v in element.attrib.items())
    return XmlNode(tag=str(element.tag), attrs=attrs, children=children, line=element.sourceline)


def _parse(data: bytes | str, source: str, root_tag: str, what: str):
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not data.strip():
        raise TopologyError("file is empty", source, f"an {what} with a <{root_tag}> root")
    parser = etree.XMLParser(remove_comments=False, resolve_entities=False, no_network=True, huge_tree=False)
    try:
        tree = etree.fromstring(data, parser).getroottree()
    except etree.XMLSyntaxError as exc:
        line = exc.lineno if exc.lineno else "?"
        message = str(exc.msg) if getattr(exc, "msg", None) else str(exc)
        raise TopologyError(f"broken XML: {message}", f"{source}:{line}", f"well-formed XML ({what})") from None
    root = tree.getroot()
    if root.tag != root_tag:
        raise TopologyError(f"root element is <{root.tag}>", f"{source}:{root.sourceline}",
                            f'<{root_tag} version="1">')
    return root


def parse_graph_xml(data: bytes | str, source: str = "<memory>") -> XmlNode:
    """Parse a graph document (NCCL_GRAPH_FILE / NCCL_GRAPH_DUMP_FILE form): its <graphs> root."""
    return _to_node(_parse(data, source, "graphs", "NCCL graph XML as NCCL_GRAPH_DUMP_FILE writes it"))


def parse_topo_xml(data: bytes | str, source: str = "<memory>") -> TopoXml:
    """Parse a topology document; errors name `source` and the line."""
    root = _parse(data, source, "system", "NCCL topology XML as NCCL_TOPO_DUMP_FILE writes it")
    comments = []
    for sibling in root.itersiblings(preceding=True):
        if isinstance(sibling, etree._Comment):
            comments.append(sibling.text or "")
    comments.reverse()
    return TopoXml(root=_to_node(root), comments=tuple(comments), source=source)


def read_topo_xml(path: str | Path) -> TopoXml:
    """Read a topology file from disk."""
    path = Path(path)
    try:
        data = read_input(path, "a path to an NCCL topology XML or a catalog name")
    except UsageError as err:  # the topology's own kind of error, with the same words
        raise TopologyError(err.what, err.where, err.valid) from None
    return parse_topo_xml(data, str(path))


def _dump_node(node: XmlNode, indent: int, out: list[str]) -> None:
    attrs = "".join(f' {k}="{_escape(v)}"' for k, v in node.attrs)
    pad = " " * indent
    if not node.children:
        out.append(f"{pad}<{node.tag}{attrs}/>")
        return
    out.append(f"{pad}<{node.tag}{attrs}>")
    for child in node.children:
        _dump_node(child, indent + 2, out)
    out.append(f"{pad}</{node.tag}>")


def _escape(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")


def dump_topo_xml(doc: TopoXml) -> str:
    """The document as text, in NCCL's dump layout, comments first."""
    out = [f"<!--{c}-->" for c in doc.comments]
    _dump_node(doc.root, 0, out)
    return "\n".join(out) + "\n"


def write_topo_xml(doc: TopoXml, path: str | Path) -> None:
    """Write the document to `path` (as NCCL_TOPO_DUMP_FILE would)."""
    try:
        Path(path).write_text(dump_topo_xml(doc), encoding="utf-8")
    except OSError as exc:
        raise TopologyError(f"cannot write: {exc.strerror}", str(path), "a writable file path") from None
