"""`nicksim hang diagnose` on the forms real PyTorch and NCCL write: the Flight Recorder's current
schema (FlightRecorder.hpp version 2.10, pickle and JSON), the watchdog's 2.4+ lines, process groups
named by their GUID, and the lines of the causes real reports show (tests/hang_corpus has the reports)."""
from __future__ import annotations

import json
import pickle

import pytest

from nicksim.forensics import diagnose, read_evidence
from nicksim.scenarios.replay import flight_recorder_json


def fr_entry(record: int, seq: int, state: str, pg: tuple = ("0", "default_pg"), op: str = "all_reduce") -> dict:
    """One entry as FlightRecorderDetail.hpp's getCollectiveTrace writes it (torch 2.7+)."""
    created = 1733022855 * 10**9 + record * 10**6
    return {"frames": [], "record_id": record, "pg_id": int(pg[0]), "process_group": pg,
            "thread_name": "pt_main_thread", "thread_id": "139872", "collective_seq_id": seq, "p2p_seq_id": 0,
            "op_id": seq,
            "profiling_name": f"nccl:{op}", "time_created_ns": created, "input_sizes": [[1024, 1024]],
            "input_dtypes": ["Float"], "output_sizes": [[1024, 1024]], "output_dtypes": ["Float"], "state": state,
            "time_discovered_started_ns": None if state == "scheduled" else created + 1000,
            "time_discovered_completed_ns": created + 2000 if state == "completed" else None,
            "retired": state == "completed", "timeout_ms": 600000, "is_p2p": False}


def fr_dump(last_seq: int, state: str, ranks: int = 4) -> dict:
    """A rank's dump: SeqNums 1..last_seq-1 completed, last_seq in `state` (none when last_seq is 0)."""
    entries = [fr_entry(i, i + 1, "completed") for i in range(max(0, last_seq - 1))]
    if last_seq:
        entries.append(fr_entry(last_seq - 1, last_seq, state))
    done = last_seq if state == "completed" else last_seq - 1
    return {"version": "2.10", "comm_lib_version": "2.21.5",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}},
            "pg_status": {"0": {"last_enqueued_collective": last_seq, "last_started_collective":
                                last_seq if state != "scheduled" else last_seq - 1, "last_completed_collective": done}},
            "entries": entries}


def write_dumps(tmp_path, dumps: dict, form: str) -> list:
    paths = []
    for rank, dump in dumps.items():
        if form == "json":
            path = tmp_path / f"nccl_trace_rank_{rank}.json"
            path.write_text(json.dumps(flight_recorder_json(dump)))
        else:
            path = tmp_path / f"nccl_trace_rank_{rank}"
            path.write_bytes(pickle.dumps(dump, protocol=2))
        paths.append(path)
    return paths


def test_json_dumps_with_string_status_and_zero_times_are_read(tmp_path):
    dumps = {r: fr_dump(12, "started") for r in range(3)}
    dumps[3] = fr_dump(11, "completed")  # rank 3 never launched SeqNum 12
    for form in ("json", "pickle"):
        (tmp_path / form).mkdir()
        found = diagnose(read_evidence(write_dumps(tmp_path / form, dumps, form)))
        assert found.category == "straggler" and found.culprit_ranks == (3,), (form, found.why)


def test_a_json_dump_without_entries_is_still_a_dump(tmp_path):
    empty = flight_recorder_json({**fr_dump(0, "completed"), "entries": []})
    assert "entries" not in empty
    (tmp_path / "nccl_trace_rank_2.json").write_text(json.dumps(empty))
    ev = read_evidence([tmp_path / "nccl_trace_rank_2.json"])
    assert ev.dumped == (2,) and ev.members == {"0 (default_pg)": (0, 1, 2, 3)}


def test_a_member_without_a_dump_is_named_from_pg_config(tmp_path):
    dumps = {r: fr_dump(7, "started") for r in (0, 1, 3)}  # rank 2 wrote nothing
    for form in ("json", "pickle"):
        (tmp_path / form).mkdir()
        found = diagnose(read_evidence(write_dumps(tmp_path / form, dumps, form)))
        assert found.category == "stuck-peer" and found.culprit_ranks == (2,), (form, found.why)
        assert "pg_config" in found.why


def watchdog_24(rank: int, seq: int, op: str = "ALLREDUCE", numel: int = 1048576) -> str:
    return (f"[rank{rank}]:[E606 09:09:08.164985384 ProcessGroupNCCL.cpp:757] [Rank {rank}] Watchdog caught collective "
            f"operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
            "Timeout(ms)=600000) ran for 600004 milliseconds before timing out.")


def progress_24(rank: int, seq: int, enqueued: int, completed: int, pg: str = "PG ID 0 PG GUID 0(default_pg)") -> str:
    return (f"[rank{rank}]:[E606 09:09:08.169193939 ProcessGroupNCCL.cpp:2395] [{pg} Rank {rank}]  failure detected "
            f"by watchdog at work sequence id: {seq} PG status: last enqueued work: {enqueued}, last completed work: "
            f"{completed}")


def write(tmp_path, lines: list[str], name: str = "train.log"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return [path]


def test_the_watchdog_progress_line_of_pytorch_2_4_is_read(tmp_path):
    lines = [line for r in range(3) for line in (watchdog_24(r, 12), progress_24(r, 12, 12, 11))]
    lines.append("[rank3]:[E606 09:09:08.17 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID 0(default_pg) Rank 3] Received "
                 "a dump signal due to a collective timeout from  rank 0 and we will try our best to dump the debug "
                 "info. Last enqueued NCCL work: 11, last completed NCCL work: 11.")
    ev = read_evidence(write(tmp_path, lines))
    assert ev.work[0].get("enqueued") == 12 and ev.work[0].get("completed") == 11
    assert ev.timeouts[0].get("pg") == "0 (default_pg)"  # the timeout took its group from the progress line
    found = diagnose(ev)
    assert found.category == "straggler" and found.culprit_ranks == (3,)


def test_groups_are_told_apart_by_guid_not_by_the_local_pg_id(tmp_path):
    # PG ID counts the groups one process made: two tensor-parallel groups both have PG ID 5 on their ranks
    lines = [watchdog_24(0, 40), progress_24(0, 40, 40, 39, "PG ID 5 PG GUID 37(TENSOR_MODEL_PARALLEL_GROUP)"),
             watchdog_24(1, 40), progress_24(1, 40, 40, 39, "PG ID 5 PG GUID 37(TENSOR_MODEL_PARALLEL_GROUP)"),
             watchdog_24(2, 17), progress_24(2, 17, 17, 16, "PG ID 5 PG GUID 38(TENSOR_MODEL_PARALLEL_GROUP)")]
    found = diagnose(read_evidence(write(tmp_path, lines)))
    assert found.category == "mixed-communicators" and found.culprit_ranks == (2,), found.why


def test_a_rank_timed_out_at_a_lower_seqnum_diverged_it_was_not_behind(tmp_path):
    lines = [watchdog_24(r, 30) for r in (0, 1, 2)] + [watchdog_24(3, 29)]
    found = diagnose(read_evidence(write(tmp_path, lines)))
    assert found.category == "rank-divergence" and found.culprit_ranks == (3,), found.why


def test_oom_in_nccl_setup_names_the_rank_out_of_memory_not_those_that_saw_it_go(tmp_path):
    lines = ["[rank3]:node2:311:402 [3] include/alloc.h:103 NCCL WARN Cuda failure 'out of memory'",
             "[rank3]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:268, unhandled cuda error",
             "node1:211:302 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer "
             "node2<48366>", "[rank0]: torch.distributed.DistBackendError: NCCL error: remote process exited or "
             "there was a network error"]
    ev = read_evidence(write(tmp_path, lines))
    found = diagnose(ev)
    assert found.category == "resource-exhaustion" and found.culprit_ranks == (3,), found.why
    assert any("GPU memory" in step for step in found.next_steps)


def test_a_rank_that_died_is_the_culprit_not_the_ranks_that_lost_it(tmp_path):
    lines = ["[rank5]: Traceback (most recent call last):", "[rank5]: Fatal Python error: Segmentation fault",
             "[rank1]:[W socket.cpp:464] ncclRemoteError: remote process exited or there was a network error",
             "[rank2]: Connection reset by peer"]
    found = diagnose(read_evidence(write(tmp_path, lines)))
    assert found.category == "stuck-peer" and found.culprit_ranks == (5,), found.why


def test_a_veth_or_link_local_interface_later_in_ncclS_list_is_named(tmp_path):
    lines = ["h1:10:10 [0] NCCL INFO NET/Socket : Using [0]ens5:172.31.0.137<0> [1]veth75fa783:"
             "fe80::14ad:64ff:fe64:b31e%veth75fa783<0>",
             "h1:10:20 [0] NCCL INFO Call to connect returned Connection timed out, retrying",
             "h2:11:21 [0] NCCL INFO Call to connect returned Connection timed out, retrying"]
    ev = read_evidence(write(tmp_path, lines))
    assert ev.counts.get("bootstrap") == 2  # INFO-level retries count
    found = diagnose(ev)
    assert found.category == "interface-selection" and "veth75fa783" in found.why
    assert "NCCL_SOCKET_IFNAME" in found.next_steps[0]


def test_pasted_lines_without_nccls_prefix_still_count(tmp_path):
    lines = ["NET/IB : Got completion from peer 10.0.0.2<50214> with status=12 opcode=0 len=0 vendor err 129"]
    assert diagnose(read_evidence(write(tmp_path, lines))).category == "fabric"


def test_two_ranks_on_one_gpu_get_one_gpu_per_rank_advice(tmp_path):
    lines = ["[rank1]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
             "[rank1]: Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1000"]
    found = diagnose(read_evidence(write(tmp_path, lines)))
    assert found.category == "invalid-usage" and "set_device" in found.next_steps[0]


def test_coll_lines_whose_calls_differ_at_one_opcount_are_divergence(tmp_path):
    fmt = ("n1:{pid}:{pid} [{d}] NCCL INFO AllReduce: opCount 1f sendbuff 0x7f00 recvbuff 0x7f00 count {count} "
           "datatype 7 op 0 root 0 comm 0x55{d}0 [nranks=4] stream 0x5600")
    lines = [f"n1:{100 + d}:{100 + d} [{d}] NCCL INFO comm 0x55{d}0 rank {d} nranks 4 cudaDev {d} busId 1000 - "
             "Init COMPLETE" for d in range(4)]
    lines += [fmt.format(pid=100 + d, d=d, count=4096 if d != 2 else 4097) for d in range(4)]
    found = diagnose(read_evidence(write(tmp_path, lines)))
    assert found.category == "rank-divergence" and found.culprit_ranks == (2,), found.why


# The keys PyTorch's own analyser reads (tools/flight_recorder: loader.read_dump takes the rank from the
# file name after its prefix and reads entries, version and pg_config; types.Op reads each entry's).
_FR_TRACE_ENTRY_KEYS = {"profiling_name", "state", "process_group", "input_sizes", "output_sizes", "collective_seq_id",
                        "p2p_seq_id", "input_dtypes", "output_dtypes", "time_created_ns", "record_id", "pg_id",
                        "thread_id", "thread_name", "time_discovered_started_ns", "time_discovered_completed_ns",
                        "retired", "timeout_ms", "is_p2p", "op_id", "frames"}


def test_a_replay_writes_the_schema_pytorch_writes_and_reads(tmp_path):
    import ast
    from nicksim.scenarios.library import SCENARIOS
    from nicksim.scenarios.replay import FLIGHT_RECORDER_VERSION, replay
    done = replay(SCENARIOS["straggler"], tmp_path)
    prefix = "nccl_trace_rank_"
    dumps = sorted(p for p in tmp_path.iterdir() if p.name.startswith(prefix) and "." not in p.name)
    assert len(dumps) == SCENARIOS["straggler"].nranks
    for path in dumps:
        rank = int(path.name[len(prefix):])
        with open(path, "rb") as f:
            dump = pickle.load(f)
        assert "rank" not in dump and dump["version"] == FLIGHT_RECORDER_VERSION and dump["comm_lib_version"]
        for name, info in dump["pg_config"].items():
            assert info["name"] == name and rank in ast.literal_eval(info["ranks"])
        for entry in dump["entries"]:
            assert set(entry) == _FR_TRACE_ENTRY_KEYS
            assert entry["profiling_name"].split(":")[0] == "nccl" and len(entry["process_group"]) == 2
        as_json = json.loads((tmp_path / f"{path.name}.json").read_text())
        assert all(isinstance(v, str) for st in as_json["pg_status"].values() for v in st.values())
    assert done.diagnosis.category == SCENARIOS["straggler"].expect


def test_coll_lines_where_a_rank_stopped_earlier_name_it_behind(tmp_path):
    fmt = ("n1:{pid}:{pid} [{d}] NCCL INFO AllReduce: opCount {op:x} sendbuff 0x7f00 recvbuff 0x7f00 count 4096 "
           "datatype 7 op 0 root 0 comm 0x55{d}0 [nranks=4] stream 0x5600")
    lines = [f"n1:{100 + d}:{100 + d} [{d}] NCCL INFO comm 0x55{d}0 rank {d} nranks 4 cudaDev {d} busId 1000 - "
             "Init COMPLETE" for d in range(4)]
    lines += [fmt.format(pid=100 + d, d=d, op=op) for op in range(40) for d in range(4) if not (d == 1 and op > 30)]
    found = diagnose(read_evidence(write(tmp_path, lines)))
    assert found.category == "straggler" and found.culprit_ranks == (1,), found.why
    assert "opCount 27" in found.why and "1e" in found.why


def test_pytorchs_desync_report_names_the_ranks_out_of_step(tmp_path):
    head = [watchdog_24(r, 41208) for r in range(3)]
    behind = head + ["[rank0]:\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync "
                     "are:",
                     "[rank0]:\t     [3] finished collective #41207, but didn't join collective #41208 (count from 1)"]
    found = diagnose(read_evidence(write(tmp_path, behind, "behind.log")))
    assert found.category == "straggler" and found.culprit_ranks == (3,) and found.confidence == "high"
    gone = head + ["[rank0]:\t - To our best knowledge, ranks [3] are the lagging ranks that caused this timeout. "
                   "They never joined any collectives"]
    found = diagnose(read_evidence(write(tmp_path, gone, "gone.log")))
    assert found.category == "stuck-peer" and found.culprit_ranks == (3,)
    everyone = [watchdog_24(r, 39) for r in range(4)] + [
        "[rank0]:\t   - [0, 1, 2, 3] joined but didn't finish collective #39 (count from 1)"]
    found = diagnose(read_evidence(write(tmp_path, everyone, "all.log")))
    assert "desync report" not in found.why  # nobody out of step: the report adds nothing


# One line of each kind as people paste them, often without NCCL's host:pid:tid prefix: each must
# reach the reader's kinds (the words that let a line through are the kinds' own, not a second list).
_PASTED = {
    "usage": ["ncclInvalidUsage: This usually reflects invalid usage of NCCL library.", "AllReduce : invalid type 9",
              "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1000"],
    "transport": ["misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong type 4 != 3"],
    "died": ["Aborted (core dumped)", "Fatal Python error: Segmentation fault",
             "RuntimeError: CUDA error: an illegal memory access was encountered"],
    "resource": ["include/shm.h:28 Call to posix_fallocate failed : No space left on device",
                 "misc/ibvwrap.cc:278 Call to ibv_reg_mr failed with error Cannot allocate memory"],
    "p2p": ["NET/IB : Got completion from peer 10.0.0.2<4441> with error 4, opcode 1, len 0, vendor err 81"],
    "fabric": ["transport retry counter exceeded", "local catastrophic error", "with error 12, opcode 1, len 0"],
    "peer_lost": ["remote process exited or there was a network error", "Call to recv failed : Broken pipe"],
    "interface": ["Bootstrap : no socket interface found", "NET/Socket : No usable listening interface found"],
    "unsupported": ["no kernel image is available for execution on the device"],
    "bootstrap": ["misc/socket.cc:586 NCCL WARN socketPollConnect poll() returned 1, no POLLOUT events"],
}


@pytest.mark.parametrize("kind,line", [(k, line) for k, lines in _PASTED.items() for line in lines])
def test_every_kind_reads_the_lines_pasted_without_prefix(tmp_path, kind, line):
    ev = read_evidence(write(tmp_path, [line]))
    assert ev.of(kind), (kind, ev.events.keys())
