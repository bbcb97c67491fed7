"""`nicksim hang diagnose`: real public hang logs, synthetic ones of each kind, and input that is
empty, binary, cut short, huge or from a thousand ranks."""
from __future__ import annotations

import json
import tracemalloc

import pytest

from conftest import need_validation, run_cli
from nicksim.forensics.evidence import CATEGORIES
from nicksim.forensics.diagnose import diagnose
from nicksim.forensics.read import read_evidence

# What each published log's text supports (../shared/validation/hangs/*.md says why).
PUBLISHED = {
    "H1.md": ("rank-divergence", {7}),  # BROADCAST on rank 7 where rank 3 runs ALLREDUCE at SeqNum 80078
    "H4.md": ("stuck-peer", set()),  # every rank in the same ALLREDUCE, enqueued ahead of completed
    "H6a.md": ("bootstrap", set()),  # "Call to connect failed : Connection timed out" in bootstrap
    "H8a.md": ("data-corruption", set()),  # NCCL_PROTO=LL128 across nodes: Out of bounds values : 2 FAILED
}


def watchdog(rank: int, seq: int, op: str = "ALLREDUCE", numel: int = 1048576, pg: str = "0 (default_pg)",
             numel_out: int | None = None) -> str:
    return (f"[rank{rank}]:[E816 01:45:40.183009389 ProcessGroupNCCL.cpp:607] [PG {pg} Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, "
            f"NumelOut={numel if numel_out is None else numel_out}, Timeout(ms)=600000) ran for 600026 milliseconds "
            "before timing out.")


def work(rank: int, seq: int, enqueued: int, completed: int, pg: str = "0 (default_pg)") -> str:
    return (f"[rank{rank}]:[E816 01:45:40.184373931 ProcessGroupNCCL.cpp:1664] [PG {pg} Rank {rank}] Exception "
            f"(either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {enqueued}, "
            f"last completed NCCL work: {completed}.")


def write(tmp_path, name: str, lines: list[str]) -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_hang_logs_come_out_as_their_text_says(name):
    path = need_validation() / "hangs" / name
    found = diagnose(read_evidence([path]))
    category, culprits = PUBLISHED[name]
    assert found.category == category, found.why
    assert culprits <= set(found.culprit_ranks)
    lines = path.read_text(errors="replace").splitlines()
    assert found.evidence
    for event in found.evidence:  # every piece of evidence is the line it says it is
        assert event.file == name and lines[event.line - 1].strip().startswith(event.text[:80].strip())
    assert found.next_steps


def test_rank_divergence_names_the_odd_rank_out_of_a_thousand(tmp_path):
    lines = [watchdog(r, 4411, "BROADCAST" if r == 517 else "ALLREDUCE", 5056 if r == 517 else 2106881)
             for r in range(1000)]
    found = diagnose(read_evidence([write(tmp_path, "all.log", lines)]))
    assert found.category == "rank-divergence" and found.culprit_ranks == (517,)
    assert found.confidence == "high"
    assert found.collective["op"] == "BROADCAST" and found.collective["seq"] == 4411
    assert any("TORCH_NCCL_DESYNC_DEBUG" in step for step in found.next_steps)


def test_a_rank_that_never_enqueued_the_collective_is_the_straggler(tmp_path):
    lines = [line for r in range(3) for line in (watchdog(r, 12), work(r, 12, 12, 11))]
    lines.append(work(3, 11, 11, 11))  # rank 3 never enqueued SeqNum 12
    found = diagnose(read_evidence([write(tmp_path, "train.log", lines)]))
    assert found.category == "straggler" and found.culprit_ranks == (3,)


def test_ranks_hanging_in_different_communicators(tmp_path):
    lines = [watchdog(0, 5, pg="1"), watchdog(1, 5, pg="1"), watchdog(2, 3, pg="2")]
    found = diagnose(read_evidence([write(tmp_path, "a.log", lines)]))
    assert found.category == "mixed-communicators" and found.culprit_ranks == (2,)


def test_an_ib_retry_error_is_the_fabric(tmp_path):
    lines = ["node-3:81:99 [2] NCCL INFO comm 0x55d1c0 rank 6 nranks 16 cudaDev 2 busId 41000 - Init COMPLETE",
             "node-3:81:120 [2] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.4.1.7<53011> "
             "with error 12, opcode 0, len 0, vendor err 129 (Send) localGid ::ffff:10.4.1.3",
             watchdog(6, 200)]
    found = diagnose(read_evidence([write(tmp_path, "node-3.log", lines)]))
    assert found.category == "fabric" and found.culprit_ranks == (6,)
    assert any("NCCL_IB_TIMEOUT" in step for step in found.next_steps)


def test_launcher_prefixes_do_not_hide_the_rank(tmp_path):
    lines = ["[1,2]<stderr>:[E816 01:45:40 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective operation "
             "timeout: WorkNCCL(SeqNum=9, OpType=ALLGATHER, NumelIn=8, NumelOut=64, Timeout(ms)=1800000) ran for "
             "1800421 milliseconds before timing out.",
             "[1,5]<stderr>:" + watchdog(5, 9, "ALLGATHER", 8, numel_out=64).split(":", 1)[1]]
    found = diagnose(read_evidence([write(tmp_path, "mpirun.out", lines)]))
    assert found.category == "stuck-peer"
    assert {e.rank for e in found.evidence if e.kind == "watchdog"} == {2, 5}


def test_world_size_from_nccl_init_names_the_silent_ranks(tmp_path):
    lines = [f"h{r}:1{r}:1{r} [0] NCCL INFO comm 0x7f rank {r} nranks 4 cudaDev 0 busId 1000 - Init COMPLETE"
             for r in range(4)]
    lines += [watchdog(r, 77) for r in (0, 1, 3)]  # rank 2 says nothing
    found = diagnose(read_evidence([write(tmp_path, "job.log", lines)]))
    assert found.category == "stuck-peer" and found.culprit_ranks == (2,)


def test_ranks_that_read_different_settings(tmp_path):
    a = write(tmp_path, "r0.log", ["h0:10:10 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1"])
    b = write(tmp_path, "r1.log", ["h0:11:11 [1] NCCL INFO NCCL_P2P_DISABLE set by environment to 0"])
    found = diagnose(read_evidence([a, b]))
    assert found.category == "config-mismatch" and "NCCL_P2P_DISABLE" in found.why


@pytest.mark.parametrize("content", [b"", b"\x00\xff" * 50000, b"\n\n\n", "é€漢字\n".encode() * 100])
def test_nothing_to_go_on_is_unknown_with_the_reason(tmp_path, content):
    path = tmp_path / "empty.log"
    path.write_bytes(content)
    found = diagnose(read_evidence([path]))
    assert found.category == "unknown" and found.why.startswith("because")


def test_lines_cut_mid_way_are_skipped_not_misread(tmp_path):
    cut = watchdog(3, 80078)[:120]  # "...WorkNCCL(SeqNum=80078, OpType=AL"
    found = diagnose(read_evidence([write(tmp_path, "cut.log", [cut, watchdog(4, 80078)[:-40]])]))
    assert found.category == "stuck-peer" and found.collective["seq"] == 80078
    assert {e.rank for e in found.evidence if e.kind == "watchdog"} == {4}


def test_a_huge_file_without_newlines_is_read_in_bounded_memory(tmp_path):
    path = tmp_path / "garbage.log"
    with open(path, "wb") as f:
        chunk = bytes(range(128, 256)) * 8192  # 1 MiB of bytes no keyword is made of, and no newline
        for _ in range(24):
            f.write(chunk)
        f.write(b"\n" + watchdog(1, 3).encode() + b"\n" + watchdog(2, 3).encode() + b"\n")
    tracemalloc.start()
    try:
        found = diagnose(read_evidence([path]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20  # a few blocks, whatever the file's size (24 MiB here)
    assert found.category == "stuck-peer"
    assert [e.line for e in found.evidence if e.kind == "watchdog"] == [2, 3]


def test_the_command_prints_and_writes_json(tmp_path):
    path = write(tmp_path, "all.log", [watchdog(0, 5), watchdog(1, 5, "BROADCAST", 10)])
    result = run_cli("hang", "diagnose", path, "--json", str(tmp_path / "d.json"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("category: rank-divergence")
    doc = json.loads((tmp_path / "d.json").read_text())
    assert set(doc) >= {"category", "culprit_ranks", "collective", "evidence", "confidence", "next_steps"}
    assert doc["category"] in CATEGORIES
    assert doc["evidence"][0]["file"] == "all.log" and doc["evidence"][0]["line"] in (1, 2)


@pytest.mark.parametrize("make", ["missing", "folder"])
def test_a_file_that_cannot_be_read_is_one_line_and_status_2(tmp_path, make):
    target = tmp_path / "nope.log"
    if make == "folder":
        target.mkdir()
    result = run_cli("hang", "diagnose", str(target))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and str(target) in result.stderr


RAS_BEHIND = """Communicators... (0.01s)
=============
Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         8        16        16   RUNNING  MISMATCH

Warnings
========

#0-0 (5c1f0e27a9d3b441) MISMATCH
  Communicator ranks have different collective operation counts
  15 ranks have launched up to operation 2214
  1 rank has launched up to operation 2213
  Rank 11 -- GPU 3 managed by process 90211 on node 10.0.3.12
"""

RAS_DEAD = """Errors
======
DEAD
  1 job process is considered dead (unreachable via the RAS network)
  Process 77120 on node 10.0.3.14 managing GPU 6
#0-0 (5c1f0e27a9d3b441) INCOMPLETE
  Missing communicator data from 1 rank
  The missing rank: 14
"""


def test_nccl_ras_status_names_the_rank_behind_and_the_dead_one(tmp_path):
    (tmp_path / "ras.txt").write_text(RAS_BEHIND)
    behind = diagnose(read_evidence([tmp_path / "ras.txt"]))
    assert behind.category == "straggler" and behind.culprit_ranks == (11,)
    (tmp_path / "ras2.txt").write_text(RAS_DEAD)
    dead = diagnose(read_evidence([tmp_path / "ras2.txt"]))
    assert dead.category == "stuck-peer" and dead.culprit_ranks == (14,)


def test_nccl_ras_json_names_the_missing_rank(tmp_path):
    doc = {"nccl_version": "2.29.1", "communicators": [{
        "hash": "0x1f", "size": 4, "ranks_count": 3, "missing_ranks_count": 1,
        "ranks": [{"rank": r, "collective_counts": {"AllReduce": 40, "Broadcast": 1}} for r in (0, 1, 3)],
        "missing_ranks": [{"rank": 2, "status": {"unresponsive": True, "considered_dead": False}}]}]}
    (tmp_path / "ras.json").write_text(json.dumps(doc))
    found = diagnose(read_evidence([tmp_path / "ras.json"]))
    assert found.category == "stuck-peer" and found.culprit_ranks == (2,)


@pytest.mark.parametrize("form", [
    "[rank{r}]:[E1201 03:14:15.1 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank {r}] Exception (either an error or "
    "timeout) detected by watchdog at work: 12, last enqueued NCCL work: {e}, last completed NCCL work: 11.",
    "[rank{r}]:[E1201 03:14:15.1 ProcessGroupNCCL.cpp:1538] [PG 0 (default_pg) Rank {r}] Timeout at NCCL work: 12, "
    "last enqueued NCCL work: {e}, last completed NCCL work: 11.",
    "[rank{r}]:[E1201 03:14:15.1 ProcessGroupNCCL.cpp:2104] [PG ID 0 PG GUID 0(default_pg) Rank {r}] failure detected "
    "by watchdog at work sequence id: 12 PG status: last enqueue: {e}, last completed: 11",
])
def test_each_releases_wording_of_the_watchdogs_progress_line(tmp_path, form):
    lines = [watchdog(r, 12) for r in range(3)] + [form.format(r=r, e=12) for r in range(3)] + [form.format(r=3, e=11)]
    found = diagnose(read_evidence([write(tmp_path, "w.log", lines)]))
    assert found.category == "straggler" and found.culprit_ranks == (3,)


def test_a_watchdog_line_without_numel_from_older_pytorch(tmp_path):
    old = ("[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, "
           "OpType={op}, Timeout(ms)=1800000) ran for 1800317 milliseconds before timing out.")
    lines = [old.format(r=r, op="BROADCAST" if r == 1 else "ALLREDUCE") for r in range(4)]
    found = diagnose(read_evidence([write(tmp_path, "old.log", lines)]))
    assert found.category == "rank-divergence" and found.culprit_ranks == (1,)


def test_pytorchs_own_desync_check_names_the_rank_that_differs(tmp_path):
    line = ("[rank{a}]: RuntimeError: Detected mismatch between collectives on ranks. Rank {a} is running collective: "
            "CollectiveFingerPrint(SequenceNumber=41, OpType={op_a}, TensorShape=[1024], TensorDtypes=Float, "
            "TensorDeviceTypes=TensorOptions(dtype=float, device=cuda)), but Rank {b} is running collective: "
            "CollectiveFingerPrint(SequenceNumber=41, OpType={op_b}, TensorShape=[8], TensorDtypes=Float, "
            "TensorDeviceTypes=TensorOptions(dtype=float, device=cuda)).")
    lines = [line.format(a=a, op_a="ALLREDUCE", b=2, op_b="BROADCAST") for a in (0, 1, 3)]
    found = diagnose(read_evidence([write(tmp_path, "detail.log", lines)]))
    assert found.category == "rank-divergence" and found.culprit_ranks == (2,)
    assert found.collective["seq"] == 41 and found.confidence == "high"


def test_a_shared_memory_segment_nccl_cannot_make_points_at_the_containers_shm(tmp_path):
    lines = ["node1:311:402 [2] include/shm.h:28 NCCL WARN Error while creating shared memory segment "
             "/dev/shm/nccl-GV1a2A (size 9637888)", "node1:311:402 [2] NCCL INFO transport/shm.cc:114 -> 2"]
    found = diagnose(read_evidence([write(tmp_path, "shm.log", lines)]))
    assert found.category == "resource-exhaustion"
    assert "--shm-size" in found.next_steps[0]
