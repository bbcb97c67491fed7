"""NCCL_GRAPH_FILE: graphs read back in NCCL_GRAPH_DUMP_FILE form instead of searched (search.cc, 2.22.3)."""
from __future__ import annotations

import re

import pytest

from conftest import run_cli


@pytest.mark.parametrize("system, nodes, version", [("dgx-h100", "2", "2.22"), ("dgx-b200", "2", "2.30"),
                                                     ("dgx-a100", "1", "2.19"), ("pcie-8x-rtx4090", "1", "2.26")])
def test_a_dumped_graph_reads_back_to_the_same_decisions(tmp_path, system, nodes, version):
    dump = tmp_path / "graph.xml"
    searched = run_cli("search", system, "--nodes", nodes, "--nccl-version", version, "--dump-graph", str(dump))
    assert searched.returncode == 0, searched.stderr
    loaded = run_cli("search", system, "--nodes", nodes, "--nccl-version", version,
                     "--env", f"NCCL_GRAPH_FILE={dump}")
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout == searched.stdout
    assert "Search 0 : " in loaded.stderr and "channels loaded from XML graph" in loaded.stderr


def test_a_smaller_ring_from_the_file_is_used(tmp_path):
    dump = tmp_path / "graph.xml"
    run_cli("search", "dgx-h100", "--dump-graph", str(dump))
    text = dump.read_text()
    ring = re.search(r'(<graph id="0".*?</graph>)', text, re.S).group(1)
    channels = re.findall(r"<channel>.*?</channel>", ring, re.S)
    smaller = re.sub(r'nchannels="\d+"', 'nchannels="2"', ring.split("<channel>")[0]) + "".join(
        "<channel>" + c[len("<channel>"):] for c in channels[:2]) + "\n  </graph>"
    edited = tmp_path / "edited.xml"
    edited.write_text(text.replace(ring, smaller))
    out = run_cli("search", "dgx-h100", "--env", f"NCCL_GRAPH_FILE={edited}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("Pattern 4, crossNic 0, nChannels 2,")
    assert "Channel 03/04 :" in out.stdout and "Channel 04/" not in out.stdout  # 2 search channels, doubled


@pytest.mark.parametrize("content, what", [
    ("<graphs version=\"1\"><graph", "broken XML"),
    ("<system version=\"1\"/>", "root element is <system>"),
    ('<graphs version="1"><graph id="0" pattern="4" crossnic="0" nchannels="1" speedintra="20" speedinter="20" '
     'typeintra="NVL" typeinter="PIX" samechannels="1"><channel><gpu dev="0x63"/></channel></graph></graphs>',
     "dev 99 not found"),
    ('<graphs version="1"><graph id="0" pattern="4" crossnic="0" nchannels="1" speedintra="20" speedinter="20" '
     'typeintra="FOO" typeinter="PIX" samechannels="1"><channel><gpu dev="0"/></channel></graph></graphs>',
     'typeintra="FOO"'),
])
def test_bad_graph_files_are_one_line(tmp_path, content, what):
    bad = tmp_path / "bad.xml"
    bad.write_text(content)
    out = run_cli("search", "dgx-h100", "--env", f"NCCL_GRAPH_FILE={bad}")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and what in lines[0] and "bad.xml" in lines[0], out.stderr


def test_missing_graph_file():
    out = run_cli("search", "dgx-h100", "--env", "NCCL_GRAPH_FILE=/nonexistent/graph.xml")
    assert out.returncode == 2 and "/nonexistent/graph.xml" in out.stderr
