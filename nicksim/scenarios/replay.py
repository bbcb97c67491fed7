"""A scenario run on the DES, and what its people would have seen.

`replay(scenario, out_dir)` builds the scenario's job, runs every rank's own calls through
`simulate_sequences` with its faults and stragglers and the watchdog limit, and reads from the
HangReport where each rank stands: in a call it launched and waits in, enqueued but never
launched, not yet at the call (still in its own work), or done. It then writes, per rank, the
lines NCCL_DEBUG=INFO and PyTorch's ProcessGroupNCCL would have printed (init, settings, the IB
error where a fault stalled that rank's transfers, the watchdog timeout and its last enqueued /
completed line) to rank<R>.log, a Flight Recorder dump in PyTorch's current schema as its
pickle (nccl_trace_rank_<R>, the file PyTorch writes on a timeout) and its JSON form
(nccl_trace_rank_<R>.json), the DES's Chrome trace to trace.json, and diagnoses those files as
`nicksim hang diagnose` would. A scenario whose communicator never comes up (`init_failure`)
never reaches the DES: its ranks print the bootstrap's failure instead.
"""
from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, replace
from pathlib import Path

from ..calls import COLLECTIVE_TABLE, Call
from ..forensics.evidence import Diagnosis
from ..forensics.diagnose import diagnose
from ..forensics.read import read_evidence
from ..job import JobSpec, load_job
from ..formats.joblog import call_lines, init_lines
from ..formats.logs import DebugConfig, Identity, debug_config, format_line, line_kind
from ..params import read_params
from ..formats.trace import chrome_trace
from .library import Op, Scenario

__all__ = ["Standing", "Replay", "replay", "TorchSettings", "flight_recorder_json", "FLIGHT_RECORDER_VERSION"]

# The dump format PyTorch's FlightRecorder.hpp writes (version_val "2.10": thread ids and names, the
# communication library's version, pg_config with each group's ranks; torch 2.7+).
FLIGHT_RECORDER_VERSION = "2.10"



@dataclass(frozen=True)
class Standing:
    """Where a rank stands when the watchdog fires: `state` "started" (in call `index` of its
    own, launched), "scheduled" (enqueued, never launched), "behind" (not yet at it) or "done"."""

    rank: int
    state: str
    index: int


@dataclass(frozen=True)
class Replay:
    """A replayed scenario: where each rank stood, the DES's hang report lines, the files written
    and the diagnosis of them."""

    scenario: Scenario
    standing: tuple[Standing, ...]
    hang_lines: tuple[str, ...]
    files: tuple[str, ...]
    diagnosis: Diagnosis
    blocked: tuple = ()  # the DES's blocked streams (model.engine.Blocked) when the watchdog fired


def _numels(op: Op, nranks: int) -> tuple[int, int]:
    """PyTorch's NumelIn and NumelOut for the op: its send and receive buffers."""
    info = COLLECTIVE_TABLE[op.collective]
    return op.count * (nranks if info.send_per_rank else 1), op.count * (nranks if info.recv_per_rank else 1)


def _call(op: Op, nranks: int) -> Call:
    info = COLLECTIVE_TABLE[op.collective]
    return Call(op.collective, op.count, op.dtype, "sum" if info.reduces else "none", op.root if info.rooted else -1,
                nranks)


def _standings(scenario: Scenario, run, delays: dict[int, float]) -> list[Standing]:
    blocked: dict[int, int] = {}
    for b in (run.hang.blocked if run.hang else ()):
        blocked[b.rank] = min(blocked.get(b.rank, b.call_index), b.call_index)
    hang_us = run.hang.time_us if run.hang else run.time_us
    out = []
    for rank in range(scenario.nranks):
        if rank in scenario.unlaunched:
            out.append(Standing(rank, "scheduled", 0))
        elif delays.get(rank, 0.0) >= hang_us:
            out.append(Standing(rank, "behind", 0))
        elif rank in blocked:
            out.append(Standing(rank, "started", blocked[rank]))
        else:
            out.append(Standing(rank, "done", len(scenario.calls_of(rank))))
    return out


class _Writer:
    """The lines and dump one rank leaves behind; its NCCL lines are those `config` selects."""

    def __init__(self, scenario: Scenario, rank: int, gpus_per_node: int, config: DebugConfig):
        self.s, self.rank, self.config = scenario, rank, config
        self.node, self.dev = divmod(rank, gpus_per_node)
        self.host, self.pid = f"node-{self.node:02d}", 4100 + rank
        self.lines: list[str] = []

    def nccl(self, text: str, tid: int | None = None, where: str = "", subsys: str = "INIT") -> None:
        level, _, rest = text.partition(" ")
        if not self.config.wants(level, subsys):
            return
        who = Identity(self.host, self.pid, tid or self.pid, self.dev)
        # torchrun --tee prefixes every line of a rank's output with its rank
        self.lines.append(f"[rank{self.rank}]:" + format_line(who, level, rest, where.strip()))

    def job_lines(self, lines) -> None:
        """joblog's lines for this rank (the communicator, its channels, Init COMPLETE)."""
        for level, subsys, text in lines:
            self.nccl(f"{level} {text}", subsys=subsys)

    def address(self) -> tuple[str, str]:
        """The interface and address this rank's bootstrap uses (NCCL_SOCKET_IFNAME's, else eth0)."""
        iface = self.s.env_of(self.rank).get("NCCL_SOCKET_IFNAME", "eth0")
        return iface, "172.17.0.1" if iface == "docker0" else f"10.1.{self.node}.1"

    def init(self, nranks: int, version: str, failed: str | None, root_address: str) -> None:
        iface, address = self.address()
        self.nccl(f"INFO Bootstrap : Using {iface}:{address}<0>", subsys="BOOTSTRAP")
        if self.rank == 0:
            self.nccl(f"INFO NCCL version {version}+cuda12.4", subsys="ALL")
        for name, value in sorted(self.s.env_of(self.rank).items()):
            self.nccl(f"INFO {name} set by environment to {value}", subsys="ENV")
        if failed == "nvls-mig":
            # transport/nvls.cc ncclNvlsInit (2.19+): several ranks on one NVML device and NCCL_NVLS_ENABLE=1
            self.nccl('WARN NCCL_NVLS_ENABLE has been set to "1" and communicator has multiple ranks using the same '
                      'NVML device. This is not compatible with NCCL_NVLS_ENABLE=1.', None, "transport/nvls.cc:254 ")
            self.nccl("INFO init.cc:1552 -> 5")
            self.lines.append(f"[rank{self.rank}]: torch.distributed.DistBackendError: NCCL error in: "
                              f"ProcessGroupNCCL.cpp:1970, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL "
                              f"version {version}")
            self.lines.append(f"[rank{self.rank}]: ncclInvalidUsage: This usually reflects invalid usage of NCCL "
                              "library.")
        elif failed == "shm":
            self._shm_failure(version)
        elif failed == "transport":
            self._transport_failure()
        elif failed == "duplicate-gpu":
            self._duplicate_gpu(version)
        elif failed and self.rank != 0:
            self.nccl(f"WARN socketStartConnect: Connect to {root_address}<39615> failed : Connection timed out",
                      self.pid + 1, "misc/socket.cc:484 ")
            self.nccl("INFO misc/socket.cc:565 -> 6", self.pid + 1)
            self.nccl("INFO bootstrap.cc:136 -> 6", self.pid + 1)
            self.lines.append(f"[rank{self.rank}]: torch.distributed.DistBackendError: NCCL error in: "
                              "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
                              f"details), NCCL version {version}")
            self.lines.append(f"[rank{self.rank}]: ncclSystemError: System call (e.g. socket, malloc) or external "
                              f"library call failed or device error. Last error: socketStartConnect: Connect to "
                              f"{root_address}<39615> failed : Connection timed out")

    def _system_error(self, version: str, last: str) -> None:
        """PyTorch's exception for an NCCL set-up that failed with ncclSystemError."""
        self.lines.append(f"[rank{self.rank}]: torch.distributed.DistBackendError: NCCL error in: "
                          "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
                          f"details), NCCL version {version}")
        self.lines.append(f"[rank{self.rank}]: ncclSystemError: System call (e.g. socket, malloc) or external "
                          f"library call failed or device error. Last error: {last}")

    def _shm_failure(self, version: str) -> None:
        """shmutils.cc (2.12+): the SHM transport's segment does not fit the container's /dev/shm. The
        words, and the size NCCL's default buffers take, are those of a real report (tests/hang_corpus:
        ci-infra-490, NCCL 2.2x)."""
        segment = f"/dev/shm/nccl-{'aBcDeF'[self.rank % 6]}{self.rank:05d}"
        full = "error: No space left on device (28)"
        self.nccl(f"WARN Error: failed to extend {segment} to 9637892 bytes, {full}", self.pid + 3,
                  "misc/shmutils.cc:88 ")
        self.nccl(f"WARN Error while creating shared memory segment {segment} (size 9637888), {full}",
                  self.pid + 3, "misc/shmutils.cc:132 ")
        self.nccl("INFO transport/shm.cc:114 -> 2", self.pid + 3)
        self.nccl("INFO transport.cc:165 -> 2", self.pid + 3)
        self._system_error(version, f"Error while creating shared memory segment {segment} (size 9637888)")

    def _transport_failure(self) -> None:
        """One node on IB, the other on sockets (NCCL_IB_DISABLE=1 there): the IB side's handshake
        socket (ncclSocketTypeNetIb = 4, misc/socket.h) reaches a NET/Socket listener (type 3)."""
        ib = self.s.env_of(self.rank).get("NCCL_IB_DISABLE") != "1"
        if ib:
            self.nccl("INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:" + self.address()[1] + "<0>", subsys="NET")
            self.nccl("INFO Using network IB", subsys="INIT")
        else:
            self.nccl(f"INFO NET/Socket : Using [0]eth0:{self.address()[1]}<0>", subsys="NET")
            self.nccl("INFO Using network Socket", subsys="INIT")
            self.nccl("WARN socketFinalizeAccept: wrong type 4 != 3", self.pid + 2, "misc/socket.cc:441 ")
            self.nccl("INFO misc/socket.cc:561 -> 3", self.pid + 2)
            self.nccl("INFO transport/net_socket.cc:378 -> 3", self.pid + 2)

    def _duplicate_gpu(self, version: str) -> None:
        """init.cc: two ranks of the communicator on one GPU (the same busId); each of them says so."""
        other = 1 - self.rank if self.rank in (0, 1) else None
        if other is None:
            return
        self.nccl(f"WARN Duplicate GPU detected : rank {self.rank} and rank {other} both on CUDA device 18000", None,
                  "init.cc:723 ")
        self.nccl("INFO init.cc:1377 -> 5")
        self.lines.append(f"[rank{self.rank}]: torch.distributed.DistBackendError: NCCL error in: "
                          "ProcessGroupNCCL.cpp:1970, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL "
                          f"version {version}")
        self.lines.append(f"[rank{self.rank}]: ncclInvalidUsage: This usually reflects invalid usage of NCCL "
                          "library.")

    def fabric_error(self, peer: int) -> None:
        self.nccl(f"WARN NET/IB : Got completion from peer 10.1.{peer // self.s.gpus_per_node}.1<51{peer:03d}> with "
                  "status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.1.0.1 hca mlx5_0",
                  self.pid + 2, "transport/net_ib.cc:1697 ")
        self.nccl("INFO transport/net.cc:1300 -> 6", self.pid + 2)

    def _tag(self) -> str:
        return f"[rank{self.rank}]:[E1201 03:14:{15 + self.rank % 40:02d}.{418265 + self.rank:09d} "

    def _who(self, op: Op) -> str:
        """ProcessGroupNCCL's log prefix (2.4+): the PG ID this process counts, the group's GUID and its
        description, and this rank's place in it."""
        pg_id, _, desc = op.pg.partition(" ")
        return f"[PG ID {pg_id} PG GUID {pg_id}{desc.replace(' ', '')} Rank {self.rank}]"

    def watchdog(self, op: Op, seq: int, enqueued: int, completed: int, ran_ms: int, torch: "TorchSettings",
                 desync: tuple[str, ...] = ()) -> None:
        """PyTorch's lines when the call times out, as its 2.4+ releases print them (the line numbers of
        ProcessGroupNCCL.cpp a torch 2.6 log shows): the watchdog's (or, with TORCH_NCCL_BLOCKING_WAIT=1,
        wait()'s own exception), the desync report, the progress line, the dump, and what
        TORCH_NCCL_ASYNC_ERROR_HANDLING then does."""
        optype = COLLECTIVE_TABLE[op.collective].torch_ops[0]
        numel_in, numel_out = _numels(op, self.s.nranks)
        tag, who = self._tag(), self._who(op)
        work = (f"WorkNCCL(SeqNum={seq}, OpType={optype}, NumelIn={numel_in}, NumelOut={numel_out}, "
                f"Timeout(ms)={self.s.timeout_ms}) ran for {ran_ms} milliseconds before timing out.")
        if torch.blocking_wait:  # ProcessGroupNCCL::WorkNCCL::synchronize raises in the caller's thread
            self.lines.append(f"[rank{self.rank}]: torch.distributed.DistBackendError: {who} Work {work}")
            return
        self.lines.append(f"{tag}ProcessGroupNCCL.cpp:632] [Rank {self.rank}] Watchdog caught collective operation "
                          f"timeout: {work}")
        if torch.desync_debug:  # TraceUtils.h retrieveDesyncReport, from what every rank put in the store
            self.lines.append(f"{tag}ProcessGroupNCCL.cpp:1558] {who} Timeout at collective: {optype}, #{seq}")
            self.lines += [f"[rank{self.rank}]:\t{line}" for line in desync]
        self.lines.append(f"{tag}ProcessGroupNCCL.cpp:2271] {who}  failure detected by watchdog at work sequence id: "
                          f"{seq} PG status: last enqueued work: {enqueued}, last completed work: {completed}")
        if not torch.trace_buffer:
            self.lines.append(f"{tag}ProcessGroupNCCL.cpp:670] Stack trace of the failed collective not found, "
                              "potentially because FlightRecorder is disabled. You can enable it by setting "
                              "TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.")
        if torch.dump_on_timeout:
            self.lines.append(f"{tag}ProcessGroupNCCL.cpp:2106] {who} First PG on this rank to signal dumping.")
            self.dump_signal(op, "this local rank", enqueued, completed)
        if torch.async_error_handling in (1, 3):
            self.lines.append(f"{tag}ProcessGroupNCCL.cpp:630] [Rank {self.rank}] Some NCCL operations have failed or "
                              "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations "
                              "might run on corrupted/incomplete data.")
            self.lines.append(f"{tag}ProcessGroupNCCL.cpp:636] [Rank {self.rank}] To avoid data inconsistency, we are "
                              "taking the entire process down.")
        elif torch.async_error_handling == 2:
            self.lines.append(f"{tag}ProcessGroupNCCL.cpp:1700] {who} Aborting the communicators; the process "
                              "goes on (TORCH_NCCL_ASYNC_ERROR_HANDLING=2).")

    def dump_signal(self, op: Op, source: str, enqueued: int, completed: int) -> None:
        """What a rank prints when it dumps for a timeout, its own or (told through the store)
        another rank's: its own last enqueued and completed work."""
        self.lines.append(f"{self._tag()}ProcessGroupNCCL.cpp:1746] {self._who(op)} Received a dump signal due to a "
                          f"collective timeout from {source} and we will try our best to dump the debug info. Last "
                          f"enqueued NCCL work: {enqueued}, last completed NCCL work: {completed}.This is most "
                          "likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the "
                          "order of collectives is not same for all ranks or the scheduled collective, for some "
                          "reason, didn't "
                          "run. Additionally, this can be caused by GIL deadlock or other reasons such as network "
                          "errors or bugs in the communications library (e.g. NCCL), etc.")

    def flight_recorder(self, standing: Standing, seqs: list[tuple[Op, int]], comm_lib_version: str) -> dict:
        """PyTorch's dump of this rank's calls (FlightRecorder's dump_dict, format 2.10: the `before`
        calls completed, then its own as far as it got), as its pickle holds it: no rank (the file
        name has it), each group's members in pg_config, times the watchdog never saw as None."""
        entries, status, config = [], {}, {}
        first_own = len(seqs) - len(self.s.calls_of(self.rank))  # the calls before the scenario come first
        created_ns = 1733022855 * 10**9
        for record, (op, seq) in enumerate(seqs):
            own = record - first_own  # the call's place in the rank's own sequence
            if own < 0 or standing.state == "done" or own < standing.index:
                state = "completed"
            elif own == standing.index and standing.state in ("started", "scheduled"):
                state = standing.state
            else:
                break
            numel_in, numel_out = _numels(op, self.s.nranks)
            pg_id, _, desc = op.pg.partition(" ")
            desc = desc.strip("()") or "undefined"
            members = sorted(r for r in range(self.s.nranks) if any(o.pg == op.pg for o in self.s.calls_of(r))) \
                or list(range(self.s.nranks))
            config[pg_id] = {"name": pg_id, "desc": desc, "ranks": "[" + ", ".join(str(r) for r in members) + "]"}
            created = created_ns + record * 10**6
            entries.append({
                "frames": [], "record_id": record, "pg_id": int(pg_id), "process_group": (pg_id, desc),
                "thread_name": "pt_main_thread", "thread_id": str(140000000000000 + self.rank),
                "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
                "profiling_name": COLLECTIVE_TABLE[op.collective].torch_profiling, "time_created_ns": created,
                "input_sizes": [[numel_in]], "input_dtypes": ["Float"], "output_sizes": [[numel_out]],
                "output_dtypes": ["Float"], "state": state,
                "time_discovered_started_ns": created + 10**5 if state != "scheduled" else None,
                "time_discovered_completed_ns": created + 10**6 if state == "completed" else None,
                "retired": state == "completed", "timeout_ms": self.s.timeout_ms, "is_p2p": False})
            last = status.setdefault(pg_id, {"last_enqueued_collective": -1, "last_started_collective": -1,
                                             "last_completed_collective": -1})
            last["last_enqueued_collective"] = seq
            if state != "scheduled":
                last["last_started_collective"] = seq
            if state == "completed":
                last["last_completed_collective"] = seq
        return {"version": FLIGHT_RECORDER_VERSION, "comm_lib_version": comm_lib_version, "pg_config": config,
                "pg_status": status, "entries": entries}


def flight_recorder_json(dump: dict) -> dict:
    """The same dump as PyTorch's dump_json writes it: pg_config and pg_status values as strings, the
    times the watchdog never saw as 0, process groups as lists, `entries` left out when there are none."""
    out = {"version": dump["version"], "comm_lib_version": dump["comm_lib_version"],
           "pg_config": {k: {f: str(v) for f, v in info.items()} for k, info in dump["pg_config"].items()},
           "pg_status": {k: {f: str(v) for f, v in st.items()} for k, st in dump["pg_status"].items()}}
    entries = [{k: (list(v) if isinstance(v, tuple) else 0 if v is None and k.startswith("time_") else v)
                for k, v in e.items() if k != "frames"} for e in dump["entries"]]
    if entries:
        out["entries"] = entries
    return out


_TRACE_BUFFER = 16  # the earlier calls the scenarios list before their own (a dump keeps the last of them)


@dataclass(frozen=True)
class TorchSettings:
    """PyTorch ProcessGroupNCCL's knobs a replay honours (nicksim env lists them)."""

    async_error_handling: int = 3
    blocking_wait: bool = False
    desync_debug: bool = False
    trace_buffer: int = 2000
    dump_on_timeout: bool = True
    pg_timeout_s: float | None = None  # None: the scenario's

    @classmethod
    def from_params(cls, params) -> "TorchSettings":
        if params is None:
            return cls()
        timeout = params.get("NICKSIM_PG_TIMEOUT") if params.is_set("NICKSIM_PG_TIMEOUT") else None
        return cls(int(params.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")), params.get("TORCH_NCCL_BLOCKING_WAIT") == 1,
                   params.get("TORCH_NCCL_DESYNC_DEBUG") == 1, max(0, int(params.get("TORCH_NCCL_TRACE_BUFFER_SIZE"))),
                   params.get("TORCH_NCCL_DUMP_ON_TIMEOUT") != 0, float(timeout) if timeout else None)


def _sequence(scenario: Scenario, rank: int) -> list[tuple[Op, int]]:
    """The rank's calls with their SeqNums, after the `before` calls every process group of the
    scenario completed first (each group counts its own; the last _TRACE_BUFFER of those listed)."""
    ops = scenario.calls_of(rank)
    firsts: dict[str, Op] = {}
    for op in scenario.calls + ops:
        firsts.setdefault(op.pg, op)
    history = [(op, seq) for seq in range(1, scenario.before + 1) for op in firsts.values()][-_TRACE_BUFFER:]
    counters = {pg: scenario.before for pg in firsts}
    out = list(history)
    for op in ops:
        counters[op.pg] += 1
        out.append((op, counters[op.pg]))
    return out


def _nccl_tests(scenario: Scenario, job, version: str) -> tuple[list[str], tuple[str, ...]]:
    """An nccl-tests run of the scenario's one call, timed by the DES, with its torn LL128 lines
    counted as nccl-tests counts wrong elements; the command line and table as rank 0 prints them.
    Refused where NCCL's own rules would enable LL128 here (nothing would be unsupported)."""
    from ..errors import UsageError
    from ..model.engine import des_setup, simulate
    from ..formats.report import ResultRow, format_row, measurement, table_footer, table_header
    own = load_job(job.spec, read_params({k: v for k, v in scenario.shared_env().items() if k != "NCCL_PROTO"}))
    if own.comm.table.bw("AllReduce", "Ring", "LL128") > 0:
        raise UsageError(f"{scenario.name}: NCCL enables LL128 on {scenario.system} by itself", "scenario",
                         "a path where NCCL's rules keep LL128 off")
    op = scenario.calls[0]
    call = _call(op, scenario.nranks)
    run = simulate(des_setup(job), call)
    elems_per_line = 120 // call.elem_nbytes  # an LL128 line: 120 data bytes, one 8-byte flag
    wrong = scenario.torn_lines * elems_per_line
    row = ResultRow(call.nbytes, call.count, call.dtype, call.redop, call.root,
                    measurement(call.collective, call.nranks, call.nbytes, run.time_us, wrong),
                    measurement(call.collective, call.nranks, call.nbytes, run.time_us, 0),
                    {"algorithm": run.plan.algorithm, "protocol": run.plan.protocol})
    env = " ".join(f"-x {k}={v}" for k, v in sorted(scenario.env_of(0).items()))
    lines = [f"mpirun --allow-run-as-root -np {scenario.nranks} -npernode {scenario.gpus_per_node} -x NCCL_DEBUG=WARN "
             f"{env} all_reduce_perf -b {call.nbytes} -e {call.nbytes} -c 1 -n 1 -w 0", f"NCCL version {version}",
             *table_header(), format_row(row), *table_footer(call.collective, [row])]
    return lines, (f"the DES ran the all_reduce as {run.plan.algorithm}/{run.plan.protocol} in {run.time_us:.1f} us",)


# The lines joblog writes that the writer's own init already has, per rank (with its interface).
_OWN_KINDS = ("bootstrap", "version", "setting")


def replay(scenario: Scenario, out_dir: str | Path, debug: DebugConfig | None = None,
           torch: TorchSettings | None = None) -> Replay:
    """Run `scenario` (see the module docstring), writing its files under `out_dir`. The ranks'
    NCCL lines are those `debug` selects (NCCL_DEBUG*; default INFO with NCCL's default subsystems,
    as the scenario's job ran); `torch` holds PyTorch's watchdog settings (its defaults if None):
    the process group's timeout, blocking wait, the Flight Recorder's size and whether it dumps."""
    torch = torch or TorchSettings()
    if torch.pg_timeout_s is not None:
        scenario = replace(scenario, timeout_ms=int(torch.pg_timeout_s * 1000))
    from ..model.engine import des_setup, simulate_sequences
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    params = read_params(scenario.shared_env())  # the one job the DES runs: what every rank sets
    job = load_job(JobSpec(system=scenario.system, nodes=scenario.nodes, gpus_per_node=scenario.gpus_per_node,
                           nccl_version=scenario.nccl_version, fabric=scenario.fabric), params)
    version = f"{scenario.nccl_version}.7" if scenario.nccl_version.count(".") == 1 else scenario.nccl_version
    if debug is None or not debug.enabled:
        debug = debug_config(read_params({"NCCL_DEBUG": "INFO"}), job.system.rules.version.minor)
    writers = [_Writer(scenario, r, scenario.gpus_per_node, debug) for r in range(scenario.nranks)]
    files: list[str] = []
    if scenario.torn_lines:
        lines, hang_lines = _nccl_tests(scenario, job, version)
        _write(out / "all_reduce_perf.out", "\n".join(lines) + "\n")
        files.append(str(out / "all_reduce_perf.out"))
        standing = [Standing(r, "done", 1) for r in range(scenario.nranks)]
        return Replay(scenario, tuple(standing), hang_lines, tuple(files), diagnose(read_evidence(files)))
    if scenario.init_failure:
        for w in writers:
            w.init(scenario.nranks, version, scenario.init_failure, writers[0].address()[1])
        standing, hang_lines = [Standing(r, "behind", 0) for r in range(scenario.nranks)], ()
    else:
        for w in writers:
            w.init(scenario.nranks, version, None, "")
            w.job_lines(line for line in init_lines(job, w.rank) if line_kind(line[2]) not in _OWN_KINDS)
            for count, op in enumerate(scenario.calls_of(w.rank)):
                w.job_lines(call_lines(_call(op, scenario.nranks), count, w.rank, comm=int(op.pg.split()[0])))
        calls = {r: [_call(op, scenario.nranks) for op in scenario.calls_of(r)]
                 for r in range(scenario.nranks) if r not in scenario.unlaunched}
        setup = des_setup(job, faults=scenario.faults, stragglers=scenario.stragglers,
                          timeout_us=scenario.timeout_ms * 1e3, trace=True)
        comms = {r: [int(op.pg.split()[0]) for op in scenario.calls_of(r)] for r in calls}
        run = simulate_sequences(setup, calls, comms)
        standing = _standings(scenario, run, dict(setup.stragglers))
        hang_lines = tuple(run.hang.lines()) if run.hang else ()
        for stall in (run.hang.stalls if run.hang else ()):
            if not stall.link.startswith("nic("):  # a NIC's error, where the network failed
                continue
            for end, peer in ((stall.src, stall.dst[0]), *((d, stall.src) for d in stall.dst)):
                if not any("status=12" in line for line in writers[end].lines):
                    writers[end].fabric_error(peer)
        _write(out / "trace.json", json.dumps(chrome_trace(run)))
        files.append(str(out / "trace.json"))
        places = {w.rank: _place(scenario, w.rank, stand) for w, stand in zip(writers, standing)}
        desync = _desync_report(places)
        first_out = min((r for r, (_, _, out) in places.items() if out), default=None)
        for w, stand in zip(writers, standing):
            seqs = _sequence(scenario, w.rank)
            op, seq, timed_out = places[w.rank]
            if timed_out:
                w.watchdog(op, seq, seq, seq - 1, scenario.timeout_ms + 26 + w.rank, torch, desync)
            elif first_out is not None and torch.dump_on_timeout and not torch.blocking_wait and op is not None:
                w.dump_signal(op, f"rank {first_out}", seq, seq)  # told through the store: it dumps too
            # The Flight Recorder keeps the last TORCH_NCCL_TRACE_BUFFER_SIZE calls and dumps them on a
            # timeout where TORCH_NCCL_DUMP_ON_TIMEOUT is on (0 entries: it records nothing).
            if torch.trace_buffer and torch.dump_on_timeout and not torch.blocking_wait:
                kept = seqs[-torch.trace_buffer:]
                # PyTorch writes the pickle to TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank (/tmp/nccl_trace_rank_R);
                # the JSON form is what its dump_json (and the HTTP handler) return
                dump = w.flight_recorder(stand, kept, version.split("+")[0])
                (out / f"nccl_trace_rank_{w.rank}").write_bytes(pickle.dumps(dump, protocol=2))
                _write(out / f"nccl_trace_rank_{w.rank}.json", json.dumps(flight_recorder_json(dump), indent=1))
                files += [str(out / f"nccl_trace_rank_{w.rank}"), str(out / f"nccl_trace_rank_{w.rank}.json")]
    for w in writers:
        _write(out / f"rank{w.rank}.log", "\n".join(w.lines) + "\n")
        files.append(str(out / f"rank{w.rank}.log"))
    logs = [f for f in files if not f.endswith("trace.json")]
    return Replay(scenario, tuple(standing), hang_lines, tuple(files), diagnose(read_evidence(logs)),
                  run.hang.blocked if not scenario.init_failure and run.hang else ())


def _place(scenario: Scenario, rank: int, stand: Standing) -> tuple[Op | None, int, bool]:
    """Where the rank is in its process group's sequence: the call it timed out in (and True), else
    its last completed call (the one before the call it had not reached, or its last)."""
    seqs = _sequence(scenario, rank)
    own = len(seqs) - len(scenario.calls_of(rank))
    if stand.state in ("started", "scheduled"):
        op, seq = seqs[own + stand.index]
        return op, seq, True
    done = own + stand.index - 1 if stand.state == "behind" else len(seqs) - 1
    return (seqs[done][0], seqs[done][1], False) if done >= 0 else (None, 0, False)


def _desync_report(places: dict) -> tuple[str, ...]:
    """PyTorch's desync report (TraceUtils.h retrieveDesyncReport) from every rank's place: the ranks at
    the lowest SeqNum any is at, in it (joined, not finished) or done with it (not joined the next)."""
    if not places:
        return ()
    low = min(seq for _, seq, _ in places.values())
    inside = sorted(r for r, (_, seq, out) in places.items() if seq == low and out)
    done = sorted(r for r, (_, seq, out) in places.items() if seq == low and not out)
    lines = ["- To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:"]
    if inside:
        lines.append(f"  - [{', '.join(map(str, inside))}] joined but didn't finish collective #{low} (count from 1)")
    if done:
        lines.append(f"    [{', '.join(map(str, done))}] finished collective #{low}, but didn't join collective "
                     f"#{low + 1} (count from 1)")
    return tuple(lines)


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
