"""AWS p5.48xlarge x2 with NCCL 2.22.3 (../shared/validation/cases/C01.md, from KeitaW/p5-nccl-test-2024-07-19):
the rank-0 INFO lines nicksim reproduces, read from the case file itself.

The job ran with aws-ofi-nccl 1.9.2-aws, which presents each GPU's group of 4 EFA NICs as one
400 Gbit/s NCCL device (see fill.py, rule 3) and whose p5 topology file writes link_speed
"32 GT/s PCIe/s", which NCCL reads as Gen5 (topo.py pci_gen_code). With both, every rank-0 line
below comes out as the log prints it.
"""
from __future__ import annotations

import functools
import re

from conftest import need_validation, run_cli


def _case_text() -> str:
    return (need_validation() / "cases" / "C01.md").read_text()


_RING = re.compile(r"Channel (\d+)/\d+ :(?: +\d+)+")  # "Channel 00/16 :    0   7 ...", not "Channel 00/0 : 8[0] -> ..."


def _log_lines(prefix: str) -> list[str]:
    """The case file's rank-0 INFO lines starting with `prefix`, with the log prefix cut, in order."""
    texts = [re.sub(r"^.*NCCL INFO ", "", line) for line in _case_text().splitlines() if "NCCL INFO " in line]
    return [text for text in texts if text.startswith(prefix)]


def _ring_lines() -> list[str]:
    """The case file's `Channel NN/16 :` ring lines; its note "(channels 08-15 repeat 00-07)"
    becomes those lines, renumbered."""
    rings: list[str] = []
    for line in _case_text().splitlines():
        text = re.sub(r"^.*NCCL INFO ", "", line)
        if _RING.fullmatch(text):
            rings.append(text)
        repeat = re.fullmatch(r"\(channels (\d+)-(\d+) repeat (\d+)-(\d+)\)", line.strip())
        if repeat:
            first, last, src, _ = (int(g) for g in repeat.groups())
            by_channel = {int(_RING.fullmatch(r).group(1)): r for r in rings}
            rings += [re.sub(r"^Channel \d+", f"Channel {c:02d}", by_channel[src + c - first])
                      for c in range(first, last + 1)]
    return rings


def _launcher_env() -> list[str]:
    """The NCCL_* settings of the job's launcher spec (the case file's "env `KEY=VALUE`, ..." list),
    less NCCL_DEBUG, which only turns the log on."""
    spec = _case_text().split("Launcher spec", 1)[1].split("\n* ", 1)[0]
    return [kv for kv in re.findall(r"`(NCCL_[A-Z0-9_]+=[^`]+)`", spec) if not kv.startswith("NCCL_DEBUG")]


@functools.lru_cache(maxsize=1)
def _search_c01() -> tuple[str, ...]:
    topo = need_validation() / "topologies" / "topo_aws_p5_48xl_v1.9.2.xml"
    env = [arg for kv in _launcher_env() for arg in ("--env", kv)]
    out = run_cli("search", "--system", str(topo), "--gpu", "h100", "--nodes", "2", "--fabric", "efa",
                  "--nccl-version", "2.22", *env)
    assert out.returncode == 0, out.stderr
    return tuple(out.stdout.splitlines())


def test_the_case_file_gives_sixteen_rings_and_the_launcher_env():
    rings = _ring_lines()
    assert [line[:13] for line in rings] == [f"Channel {c:02d}/16" for c in range(16)]
    assert rings[8:] == [line.replace(f"Channel {c:02d}", f"Channel {c + 8:02d}") for c, line in enumerate(rings[:8])]
    assert _launcher_env() == ["NCCL_BUFFSIZE=8388608", "NCCL_P2P_NET_CHUNKSIZE=524288"]


def test_ring_orders_as_the_log_prints_them():
    got = [line for line in _search_c01() if _RING.fullmatch(line)]
    assert got == _ring_lines()


def test_net_connections_as_the_log_prints_them():
    # Rank 0 reaches rank 8 through NET device 0 (the group of 0000:52:00.0) with GPUDirect RDMA.
    wanted = [line for line in _log_lines("Channel ") if "via NET/" in line]
    assert wanted == ["Channel 00/0 : 8[0] -> 0[0] [receive] via NET/AWS Libfabric/0/GDRDMA",
                      "Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA"]
    for line in wanted:
        assert line in _search_c01()


def test_trees_as_the_log_prints_them():
    wanted = _log_lines("Trees ")
    assert len(wanted) == 1
    assert [line for line in _search_c01() if line.startswith("Trees ")] == wanted


def test_nvls_heads_as_the_log_prints_them():
    wanted = _log_lines("NVLS Head")
    assert len(wanted) == 3  # the case file shows heads 0, 1 and 7
    got = [line for line in _search_c01() if line.startswith("NVLS Head")]
    assert len(got) == 8
    for line in wanted:
        assert line in got


def test_thread_thresholds_as_the_log_prints_them():
    assert _log_lines("threadThresholds") == [line for line in _search_c01() if line.startswith("threadThresholds")]


def test_channel_counts_and_p2p_chunk_size_as_the_log_prints_them():
    for prefix in ("16 coll channels", "P2P Chunksize"):
        wanted = _log_lines(prefix)
        assert len(wanted) == 1
        assert [line for line in _search_c01() if line.startswith(prefix)] == wanted


def test_search_uses_one_400g_device_per_gpu():
    # 8 ring channels at 48 GB/s (the PCIe Gen5 x16 link to the NIC), doubled to 16 for SM90 at connect time.
    assert "Pattern 4, crossNic 1, nChannels 8, bw 48.000000/48.000000, type NVL/PIX, sameChannels 0" in _search_c01()


def test_one_node_jobs_print_no_nvls_heads():
    out = run_cli("search", "dgx-h100", "--nccl-version", "2.22")
    assert out.returncode == 0 and "NVLS Head" not in out.stdout
    two = run_cli("search", "dgx-h100", "--nodes", "2", "--rank", "8")
    assert two.returncode == 0 and "NVLS Head" not in two.stdout  # only node 0 prints them
