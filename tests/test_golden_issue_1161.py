"""NVIDIA/nccl#1161 (validation case C20b), rebuilt from its own printout and printed back.

https://github.com/NVIDIA/nccl/issues/1161 ("all_reduce_perf between NVLINK connected H100 PCIe GPUs
lower than A100 SXM4 GPUs", 2024-01-27): `all_reduce_perf -b 1G -e 8G -f 2 -g 2` on two H100 PCIe
joined by an NVLink bridge, one process.

Version. `Channel 00/0 : 1[21000] -> 0[1000] via P2P/direct pointer` prints bus ids in hex, which
p2p.cc did up to v2.18.1-1 (v2.18.3-1 prints device indices), so the run was 2.18 or older: 2.18.

What the log shows: GPU bus ids 0000:01:00.0 (rank 0) and 0000:21:00.0 (rank 1), and rank 0's
`Trees` line with 24 channels, each `1/-1/-1->0->-1`.

The NVLink count. The log does not print it, but the channel count pins it: NCCL's search for two
SM90 GPUs joined by n NVLinks (20.6 GB/s each in its tables) finds floor(n x 20.6 / 60) channels at
60 GB/s, duplicates them at half speed and connect doubles them again, so 24 channels need 18 links
(NVML reporting NV18); 12 links, the 600 GB/s of the datasheet at 50 GB/s per link, give 16. (Checked
against NCCL 2.18.6 and 2.19.4's own search: 6, 12 and 18 links give 4, 8 and 12 search channels.)
tests/golden/topologies/nccl-issue-1161.xml is that machine as NCCL would dump it: two H100 PCIe (10de:2331) on a CPU, 18 links
each way; the CPU model is not in the log and does not take part in the graphs.

Finding. The log's trees point the same way on all 24 channels; NCCL's own tree search (2.17.1 and
2.18.1, run on this file with 12 to 36 links, on PCIe alone, and behind an NVSwitch) balances the
two link directions instead: tree channels 6-11 run GPU 1 -> GPU 0, so rank 0 prints
`-1/-1/-1->0->1` there and on their copies 18-23. nicksim does what those releases do; the log's
trees come from a release before 2.17 (which nicksim does not model). The tests require the
log's lines where the releases agree and NCCL's own search where they do not.
"""
from __future__ import annotations

import re

from pathlib import Path

from conftest import REPO, run_cli

TOPOLOGY = REPO / "tests" / "golden" / "topologies" / "nccl-issue-1161.xml"

LOG_TREE = "1/-1/-1->0->-1"
LOG_TREES = "Trees " + " ".join(f"[{c}] {LOG_TREE}" for c in range(24))


def _topology(path, links):
    gpus = (("0000:01:00.0", "0000:21:00.0"), ("0000:21:00.0", "0000:01:00.0"))
    body = "".join(
        f'    <pci busid="{bus}" class="0x030200" vendor="0x10de" device="0x2331" subsystem_vendor="0x10de" '
        f'subsystem_device="0x1626" link_speed="32.0 GT/s PCIe" link_width="16">\n'
        f'      <gpu dev="{i}" sm="90" rank="{i}" gdr="1">\n'
        f'        <nvlink target="{peer}" count="{links}" tclass="0x030200"/>\n'
        f'      </gpu>\n    </pci>\n' for i, (bus, peer) in enumerate(gpus))
    path.write_text('<system version="1">\n  <cpu numaid="0" affinity="ffffffff" arch="x86_64" '
                    'vendor="AuthenticAMD" familyid="25" modelid="1">\n' + body + '  </cpu>\n</system>\n')
    return str(path)


def _trees(stdout):
    line = next(line for line in stdout.splitlines() if line.startswith("Trees "))
    return dict(re.findall(r"\[(\d+)\] (\S+)", line))


def test_the_stored_topology_is_the_one_rebuilt_here(tmp_path):
    rebuilt = _topology(tmp_path / "nv18.xml", 18)
    assert TOPOLOGY.read_text().split("-->\n", 1)[1] == Path(rebuilt).read_text()


def test_24_channels_and_the_logged_trees():
    out = run_cli("search", str(TOPOLOGY), "--nccl-version", "2.18")
    assert out.returncode == 0, out.stderr
    assert re.search(r"^24 coll channels", out.stdout, re.M)
    assert "Channel 23/24 :    0   1" in out.stdout
    trees = _trees(out.stdout)
    assert len(trees) == 24
    for c in range(24):
        # The log's tree where 2.17/2.18 search forward; NCCL's own reversed half elsewhere.
        assert trees[str(c)] == (LOG_TREE if c % 12 < 6 else "-1/-1/-1->0->1"), c


def test_twelve_links_would_have_printed_16_channels(tmp_path):
    out = run_cli("search", _topology(tmp_path / "nv12.xml", 12), "--nccl-version", "2.18")
    assert out.returncode == 0, out.stderr
    assert re.search(r"^16 coll channels", out.stdout, re.M)
    assert LOG_TREES not in out.stdout.splitlines()
