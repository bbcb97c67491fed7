"""Connection lines as NCCL's transports print them (p2p.cc, shm.cc, net.cc; transport.cc order)."""
from __future__ import annotations

from conftest import run_cli


def _section(out: str, start: str | None, end: str) -> list[str]:
    lines = out.splitlines()
    i = lines.index(start) + 1 if start else next(k for k, l in enumerate(lines) if "coll channels" in l) + 1
    return lines[i:lines.index(end, i)]


def test_two_h100_nodes_trees_as_the_p5_log_prints_them():
    # C01 (NCCL 2.22.3, 2 x 8 H100): rank 0's tree connections begin
    # `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM` and include `Channel 01/0 : 0[0] -> 7[7] via P2P/CUMEM`;
    # its inter-node tree link on channel 0 is `8[0] -> 0[0] [receive]` / `0[0] -> 8[0] [send]`
    # over NIC 0 with GPUDirect RDMA (the p5 log names the plugin `AWS Libfabric`; here it is IB).
    out = run_cli("search", "dgx-h100", "--nodes", "2", "--nccl-version", "2.22")
    assert out.returncode == 0, out.stderr
    trees = _section(out.stdout, "Connected all rings", "Connected all trees")
    assert trees[0] == "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"
    assert "Channel 01/0 : 0[0] -> 7[7] via P2P/CUMEM" in trees
    assert "Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA" in trees
    assert "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA" in trees
    # receives are listed before sends for the same peer (transport.cc)
    assert trees.index("Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA") < \
        trees.index("Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA")


def test_rings_connect_each_channel_once_each_way():
    out = run_cli("search", "dgx-h100", "--nodes", "2")
    rings = _section(out.stdout, None, "Connected all rings")
    # rank 0 sends to its ring successor once per channel (16 channels); it receives over NET
    # on the channels where its predecessor is on the other node.
    sends = [l for l in rings if " -> " in l and l.split(" : ")[1].startswith("0[")]
    assert len(sends) == 16
    channels = sorted(int(l.split()[1].split("/")[0]) for l in sends)
    assert channels == list(range(16))


def test_shm_lines_have_no_connection_index_and_changed_in_2_30():
    old = run_cli("search", "pcie-8x-rtx4090", "--nccl-version", "2.22")
    assert "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct" in old.stdout.splitlines()
    new = run_cli("search", "pcie-8x-rtx4090", "--nccl-version", "2.30")
    assert "Channel 00 : 0[0] -> 1[1] via SHM/direct" in new.stdout.splitlines()


def test_p2p_read_on_a100():
    out = run_cli("search", "dgx-a100", "--nccl-version", "2.22")
    assert "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read" in out.stdout.splitlines()
