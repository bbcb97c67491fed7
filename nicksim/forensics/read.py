"""Reading the files people have after a hang: logs, RAS output and Flight Recorder dumps.

`read_evidence(paths)` streams each file a line at a time (a line is cut at 8 KiB and the rest of
it skipped, bytes that are not UTF-8 replaced, so binary garbage and 200 MB logs read in bounded
memory) and keeps what bears on a diagnosis, whatever launcher prefix a line carries ("[rank3]:",
Open MPI's "[1,3]<stderr>:", a pid in brackets): PyTorch's watchdog timeouts (rank, process
group, SeqNum, OpType, NumelIn, NumelOut, Timeout) and its "last enqueued / last completed NCCL
work" lines, NCCL's WARN lines and the INFO lines of init and errors, the NCCL_* settings a log
shows, nccl-tests' verdict on the data ("Out of bounds values", #wrong), NCCL's RAS status (text
or JSON: operation counts per group of ranks, missing and dead ranks) and PyTorch's Flight
Recorder dumps (its pickle, read as plain data only, or the JSON form). Files may come
from all ranks or some, in any order; a file of several excerpts in markdown code blocks is read
as separate incidents, and the ranks' watchdog state is taken from the first that has any.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import UsageError
from ..files import open_input
from ..formats.logs import parse_line
from .evidence import Event, Evidence
from .flight_recorder import rank_in_name, read_flight_recorder

__all__ = ["read_evidence"]

_MAX_LINE = 8192
_KEEP_PER_KIND = 64  # evidence lines kept of each kind; the counts go on

# PyTorch's WorkNCCL, with NumelIn/NumelOut from 2.1 (1.x and 2.0 print none).
_WATCHDOG = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)(?:, NumelIn=(-?\d+), NumelOut=(-?\d+))?, "
                       r"Timeout\(ms\)=(\d+)\)(?: ran for (\d+) milliseconds)?")
# The watchdog's progress line, as successive PyTorch releases word it: "... detected by watchdog at
# work: N, last enqueued NCCL work: E, last completed NCCL work: C", "Timeout at NCCL work: N, ...",
# "failure detected by watchdog at work sequence id: N PG status: last enqueue: E, last completed: C".
_WORK = re.compile(r"(?:at work|at NCCL work|at work sequence id):? (-?\d+),?(?: PG status:)? "
                   r"last enqueue(?:d NCCL work)?: (-?\d+), last completed(?: NCCL work)?: (-?\d+)")
_PG_RANK = re.compile(r"\[PG (.*?) ?Rank (\d+)\]")
_RANK_TAG = re.compile(r"\[Rank (\d+)\]|\[rank(\d+)\]:|\[\d+,(\d+)\]<std(?:out|err)>:")
_COMM = re.compile(r"comm (0x[0-9a-fA-F]+) rank (\d+) nranks (\d+)")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
# param.cc ends an integer's line with a period ("... set by environment to 8388608."), not part of it
_SETTING = re.compile(r"\b(NCCL_[A-Z0-9_]+)(?: set by environment to |=)([^\s,;'\"()]+?)\.?(?=[\s,;'\"()]|$)")
_SET_BY_ENV = " set by environment to "
# NCCL's RAS status (ncclras, 2.24+: docs/userguide troubleshooting/ras.rst)
_RAS_GROUP = re.compile(r"^\s*(\d+) ranks? ha(?:ve|s) launched up to operation (\d+)")
_RAS_MEMBER = re.compile(r"^\s*Rank (\d+) -- GPU (\d+) managed by process (\d+) on node (\S+)")
_RAS_MISSING = re.compile(r"The missing ranks?: ([\d, ]+)")
# TORCH_DISTRIBUTED_DEBUG=DETAIL's check before each collective (ProcessGroupWrapper): "Detected
# mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(...),
# but Rank 1 is running collective: CollectiveFingerPrint(...)".
_FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\((?:SequenceNumber=(\d+), )?"
                          r"OpType=(\w+)")
_BOOTSTRAP_IFACE = re.compile(r"Bootstrap ?: Using (\S+?):([0-9a-fA-F.:]+)<")
_OUT_OF_BOUNDS = re.compile(r"Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")
_FABRIC = re.compile(r"status=12|error 12\b|retry exceeded|RETRY_EXC|transport retry counter|ibv_poll_cq|"
                     r"local catastrophic|remote process exited or there was a network error|ncclRemoteError|"
                     r"NET/IB.*(?:error|Error)|NVLink.*(?:error|down)|Xid.{0,20}\b(?:74|79)\b|port.*DOWN", re.I)
_BOOTSTRAP = re.compile(r"bootstrap|Call to connect|Connection timed out|Connection refused|"
                        r"no socket interface found|No usable listening interface|socketStartConnect|"
                        r"Connect to .* failed", re.I)
_CONFIG = re.compile(r"Duplicate GPU detected|invalid usage|ncclInvalidUsage|ncclInvalidArgument|not compatible|"
                     r"shared memory segment|/dev/shm|"
                     r"NVLS.*(?:not supported|fail)|MIG|version mismatch|different NCCL version", re.I)
_TRIGGER = re.compile(r"NCCL|watchdog|Out of bounds|WARN|INFO|bootstrap|Xid|NVLink|Connection|comm 0x|launched up to|"
                      r"-- GPU|missing rank|considered dead|CollectiveFingerPrint", re.I)


_BLOCK = 1 << 20
# Lines worth a closer look, found in whole blocks at once: the rest of a 200 MB NCCL_DEBUG=INFO
# log (channel and ring lines by the million) is never decoded.
_INTERESTING = re.compile(b"|".join(re.escape(word) for word in (
    b"WorkNCCL", b"atchdog", b"last enqueued", b"Out of bounds", b"WARN", b"comm 0x", b"Init COMPLETE",
    b"NCCL version", b"NCCL_", b"rror", b"ERROR", b"retry", b"Xid", b"NVLink", b"ootstrap", b"onnect ", b"onnection",
    b"socket interface", b"listening interface", b"Duplicate GPU", b"NVLS", b"MIG", b"status=12", b"catastrophic",
    b"DOWN", b"mismatch", b"```", b"launched up to operation", b" -- GPU ", b"missing rank", b"considered dead",
    b"CollectiveFingerPrint")))  # plain words: one pass of the regex engine over a block, no backtracking


def _lines(stream) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of the lines of a binary stream that _INTERESTING finds, each cut at
    _MAX_LINE bytes (the rest of a longer line is dropped, also one that spans blocks), bytes
    that are not UTF-8 replaced; read in blocks, so memory stays bounded whatever the file. The
    last item is (the number of lines, None)."""
    base, carry, cut = 0, b"", False
    while True:
        block = stream.read(_BLOCK)
        if not block:
            if carry:
                yield from _matches(carry + b"\n", base)
                base += 1
            yield base, None
            return
        last = block.rfind(b"\n")
        if last < 0:
            if not cut:
                carry += block
                if len(carry) > _MAX_LINE:
                    carry, cut = carry[:_MAX_LINE], True
            continue
        rest = block.find(b"\n") if cut else 0  # a cut line's remainder is dropped
        buf = carry + (b"\n" if cut else b"") + block[rest + 1 if cut else 0:last + 1]
        yield from _matches(buf, base)
        base += buf.count(b"\n")
        carry, cut = block[last + 1:], False
        if len(carry) > _MAX_LINE:
            carry, cut = carry[:_MAX_LINE], True


def _matches(buf: bytes, base: int) -> Iterator[tuple[int, str]]:
    """The interesting lines of `buf` (whole lines, ending in a newline), numbered from base + 1."""
    previous, number = -1, base
    counted_to = 0
    for match in _INTERESTING.finditer(buf):
        start = buf.rfind(b"\n", 0, match.start()) + 1
        if start == previous:
            continue
        number += buf.count(b"\n", counted_to, start)
        counted_to, previous = start, start
        end = buf.find(b"\n", match.end())
        line = buf[start:min(end, start + _MAX_LINE)]
        yield number + 1, line.decode("utf-8", errors="replace").rstrip("\r")


def _pg(text) -> str | None:
    """A process group as "ID (description)", whichever way PyTorch wrote it ("0 (default_pg)",
    "ID 0 PG GUID 0(default_pg)", a Flight Recorder's ["0", "default_pg"])."""
    if text is None:
        return None
    text = " ".join(str(t) for t in text) if isinstance(text, (list, tuple)) else str(text)
    number = re.search(r"\d+", text)
    if number is None:
        return text
    desc = re.search(r"\(([^)]*)\)", text) or re.match(r"\s*\d+\s+(\S+)\s*$", text)
    return f"{number.group()} ({desc.group(1)})" if desc else number.group()


def _op_name(profiling_name) -> str:
    """The watchdog's OpType for a Flight Recorder profiling name ("nccl:all_reduce" -> ALLREDUCE)."""
    name = str(profiling_name or "?").split(":")[-1].upper()
    return name.replace("ALL_REDUCE", "ALLREDUCE").replace("ALL_GATHER", "ALLGATHER")


def _numel(sizes) -> int | None:
    """Elements of the first tensor of a Flight Recorder size list ([[3, 4]] -> 12)."""
    if not isinstance(sizes, list) or not sizes or not isinstance(sizes[0], list):
        return None
    total = 1
    for dim in sizes[0]:
        count = _whole(dim)
        if count is None:
            return None
        total *= count
    return total


def _whole(value) -> int | None:
    """A count or sequence number as a dump holds it (an int, or in PyTorch's JSON form a string of
    digits); None for anything else, so a damaged field is missing rather than wrong."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _table(value) -> dict:
    return value if isinstance(value, dict) else {}


def _items(value) -> list:
    return value if isinstance(value, list) else []


def _rank_of(text: str) -> int | None:
    match = _RANK_TAG.search(text)
    if match:
        return int(next(g for g in match.groups() if g is not None))
    return None


class _Collector:
    def __init__(self):
        self.events: dict[str, list[Event]] = {}
        self.counts: dict[str, int] = {}
        self.timeouts: dict[int, Event] = {}
        self.work: dict[int, Event] = {}
        self.settings: dict[str, dict[str, str]] = {}
        self.versions: dict[str, str] = {}
        self.nranks: set[int] = set()
        self.pid_rank: dict[tuple[str, str], int] = {}
        self.init_complete = 0
        self.lines = 0
        self.ifaces: dict[object, tuple[str, str]] = {}  # rank (else process) -> bootstrap interface, address
        self.ras_groups: list[list] = []  # [launched up to, count, listed ranks, event]
        self.ras_missing: set[int] = set()
        self.fingerprints: dict[int, tuple[str, int | None]] = {}  # rank -> (OpType, SequenceNumber)
        self.section = 0  # markdown code blocks: excerpts of separate incidents
        self.timed_section: int | None = None

    def keep(self, event: Event) -> None:
        self.counts[event.kind] = self.counts.get(event.kind, 0) + 1
        kept = self.events.setdefault(event.kind, [])
        if len(kept) < _KEEP_PER_KIND:
            kept.append(event)

    def line(self, name: str, number: int, text: str) -> None:
        if text.startswith("```"):
            self.section += 1
            return
        if not _TRIGGER.search(text):
            return
        rank = _rank_of(text)
        nccl = parse_line(text)
        source = name
        if nccl:
            source = f"{nccl.who.host}:{nccl.who.pid}"
            if rank is None:
                rank = self.pid_rank.get((nccl.who.host, nccl.who.pid))
        text = text.strip()[:1000]
        watchdog = _WATCHDOG.search(text)
        if watchdog:
            seq, op, numel_in, numel_out, timeout_ms, ran_ms = watchdog.groups()
            pg = _PG_RANK.search(text)
            if pg and rank is None:
                rank = int(pg.group(2))
            fields = (("seq", int(seq)), ("op", op), ("numel_in", int(numel_in) if numel_in else None),
                      ("numel_out", int(numel_out) if numel_out else None),
                      ("timeout_ms", int(timeout_ms)), ("ran_ms", int(ran_ms) if ran_ms else None),
                      ("pg", _pg(pg.group(1)) if pg else None))
            event = Event("watchdog", name, number, text, rank, fields)
            self.keep(event)
            if self.timed_section is None:
                self.timed_section = self.section
            if rank is not None and self.section == self.timed_section:
                previous = self.timeouts.get(rank)
                # A rank's first timeout is the one it hung in; later lines repeat or follow it.
                if previous is None or (previous.get("pg") is None and event.get("pg") is not None
                                        and previous.get("seq") == event.get("seq")):
                    self.timeouts[rank] = event
            return
        work = _WORK.search(text)
        if work:
            pg = _PG_RANK.search(text)
            if pg and rank is None:
                rank = int(pg.group(2))
            fields = (("seq", int(work.group(1))), ("enqueued", int(work.group(2))),
                      ("completed", int(work.group(3))), ("pg", _pg(pg.group(1)) if pg else None))
            event = Event("work", name, number, text, rank, fields)
            self.keep(event)
            if rank is not None and rank not in self.work and self.section == (self.timed_section or 0):
                self.work[rank] = event
            return
        if self._ras_line(name, number, text):
            return
        prints = _FINGERPRINT.findall(text)
        if prints:
            for who, seq, op in prints:
                self.fingerprints.setdefault(int(who), (op, int(seq) if seq else None))
            self.keep(Event("fingerprint", name, number, text, rank))
            return
        oob = _OUT_OF_BOUNDS.search(text)
        if oob:
            self.keep(Event("out_of_bounds", name, number, text, rank,
                            (("count", int(oob.group(1))), ("verdict", oob.group(2)))))
            return
        for setting in _SETTING.finditer(text):
            # What NCCL says it read is per process; a command line's NAME=VALUE is for every rank.
            if nccl and _SET_BY_ENV in text:
                self.settings.setdefault(rank if rank is not None else source, {})[setting.group(1)] = setting.group(2)
            self.keep(Event("setting", name, number, text, rank, ((setting.group(1), setting.group(2)),)))
        iface = _BOOTSTRAP_IFACE.search(text)
        if iface:
            self.ifaces[rank if rank is not None else source] = (iface.group(1), iface.group(2))
        version = _VERSION.search(text)
        if version:
            self.versions[source] = version.group(1)
        comm = _COMM.search(text)
        if comm:
            self.nranks.add(int(comm.group(3)))
            if nccl:
                self.pid_rank[(nccl.who.host, nccl.who.pid)] = int(comm.group(2))
                rank = int(comm.group(2))
        if "Init COMPLETE" in text:
            self.init_complete += 1
        warn = bool(re.search(r"\bWARN\b", text)) or "NCCL error" in text or "Error" in text
        if _FABRIC.search(text):
            self.keep(Event("fabric", name, number, text, rank))
        elif _CONFIG.search(text) and warn:
            self.keep(Event("config", name, number, text, rank))
        elif _BOOTSTRAP.search(text) and (warn or re.search(r"-> \d+", text)):
            self.keep(Event("bootstrap", name, number, text, rank))
        elif warn and nccl:
            self.keep(Event("warn", name, number, text, rank))

    def _ras_line(self, name: str, number: int, text: str) -> bool:
        """A line of NCCL's RAS status: operation-count groups, their listed ranks, missing ranks."""
        group = _RAS_GROUP.search(text)
        if group:
            event = Event("ras", name, number, text.strip(), None, (("count", int(group.group(1))),
                                                                  ("launched", int(group.group(2)))))
            self.keep(event)
            self.ras_groups.append([int(group.group(2)), int(group.group(1)), [], event])
            return True
        member = _RAS_MEMBER.search(text)
        if member and self.ras_groups:
            self.ras_groups[-1][2].append(int(member.group(1)))
            return True
        missing = _RAS_MISSING.search(text)
        if missing:
            ranks = {int(r) for r in re.findall(r"\d+", missing.group(1))}
            self.ras_missing |= ranks
            self.keep(Event("ras", name, number, text.strip(), None, (("missing", tuple(sorted(ranks))),)))
            return True
        if "considered dead" in text:
            self.keep(Event("ras", name, number, text.strip()))
            return True
        return False

    def ras_json(self, name: str, doc: dict) -> None:
        """ncclras -f json (2.28.7+): per communicator, each rank's collective counts and the ranks
        missing from it (unresponsive or dead)."""
        for comm in _items(doc.get("communicators")):
            if not isinstance(comm, dict):
                continue
            totals: dict[int, list[int]] = {}
            for rank in _items(comm.get("ranks")):
                number = _whole(_table(rank).get("rank"))
                if number is None:
                    continue  # a rank entry that names no rank says nothing about anyone
                counts = _table(rank.get("collective_counts"))
                total = sum(v for v in (_whole(c) for c in counts.values()) if v is not None)
                totals.setdefault(total, []).append(number)
            for index, (total, ranks) in enumerate(sorted(totals.items())):
                event = Event("ras", name, index + 1, f"communicator {comm.get('hash')}: {len(ranks)} rank(s) launched "
                              f"{total} collective(s): {', '.join(str(r) for r in ranks[:16])}", None,
                              (("count", len(ranks)), ("launched", total)))
                self.keep(event)
                self.ras_groups.append([total, len(ranks), list(ranks), event])
            missing = [m for m in (_whole(_table(m).get("rank")) for m in _items(comm.get("missing_ranks")))
                       if m is not None]
            if missing:
                self.ras_missing |= set(missing)
                self.keep(Event("ras", name, 0, f"communicator {comm.get('hash')}: missing rank(s) "
                                f"{', '.join(str(m) for m in missing)}", None, (("missing", tuple(missing)),)))
        self.lines += 1

    def flight_recorder(self, name: str, dump: dict, rank_from_name: int | None) -> None:
        """A rank's Flight Recorder dump: per process group, the first collective not completed
        is where the rank stands ("scheduled": enqueued, never started on the GPU; "started":
        running); a rank whose collectives all completed stands after its last one."""
        rank = _whole(dump.get("rank", rank_from_name))
        if rank is None:
            self.keep(Event("flight_recorder", name, 0, "a Flight Recorder dump that names no rank"))
            return
        # An entry without a whole sequence number cannot be placed against the others': left out.
        entries = [e for e in _items(dump.get("entries")) if isinstance(e, dict) and e.get("is_p2p") is not True
                   and _whole(e.get("collective_seq_id")) is not None]
        self.lines += len(entries)
        standing = None
        for number, entry in enumerate(entries, 1):
            pg_name = _pg(entry.get("process_group") or entry.get("pg_id"))
            sizes = entry.get("input_sizes") or [[]]
            out_sizes = entry.get("output_sizes") or [[]]
            fields = (("seq", _whole(entry.get("collective_seq_id"))), ("op", _op_name(entry.get("profiling_name"))),
                      ("numel_in", _numel(sizes)), ("numel_out", _numel(out_sizes)),
                      ("timeout_ms", _whole(entry.get("timeout_ms"))), ("ran_ms", None), ("pg", pg_name),
                      ("state", entry.get("state")))
            text = (f"{entry.get('profiling_name')} collective_seq_id {entry.get('collective_seq_id')} "
                    f"process_group {pg_name} input_sizes {sizes} state {entry.get('state')}")
            event = Event("flight_recorder", name, number, text, rank, fields)
            if entry.get("state") != "completed" and standing is None:
                standing = event
            last = event
        if not entries:
            return
        self.keep(standing or last)
        status = _table(_table(dump.get("pg_status")).get(str(entries[-1].get("pg_id"))))
        if standing is not None and self.timed_section is None:
            self.timed_section = self.section
        if standing is not None:
            self.timeouts.setdefault(rank, standing)
        enqueued = _whole(status.get("last_enqueued_collective", last.get("seq")))
        completed = _whole(status.get("last_completed_collective", last.get("seq") if standing is None else -1))
        work = Event("work", name, last.line, f"{last.text}; last enqueued collective {enqueued}, last completed "
                     f"{completed}", rank, (("seq", (standing or last).get("seq")), ("enqueued", enqueued),
                                           ("completed", completed), ("pg", last.get("pg")), ("entry", True)))
        self.work.setdefault(rank, work)

    def freeze(self, files: tuple[str, ...]) -> Evidence:
        return Evidence(files, self.lines, self.events, self.counts, self.timeouts, self.work, self.settings,
                        self.versions, tuple(sorted(self.nranks)), self.init_complete, self.ifaces,
                        tuple((g[0], g[1], tuple(g[2]), g[3]) for g in self.ras_groups), tuple(sorted(self.ras_missing)),
                        self.fingerprints)


def read_evidence(paths: Iterable[str | Path]) -> Evidence:
    """Every file's lines that bear on a diagnosis (see the module docstring); a file that cannot
    be read is a UsageError naming it."""
    collector = _Collector()
    names = []
    for path in paths:
        path = Path(path)
        names.append(path.name)
        try:
            with open_input(path, "log files (NCCL_DEBUG output, watchdog lines, nccl-tests output)") as stream:
                dump = read_flight_recorder(stream, path)
                if dump is not None and "communicators" in dump:
                    collector.ras_json(path.name, dump)
                    continue
                if dump is not None:
                    collector.flight_recorder(path.name, dump, rank_in_name(path.name))
                    continue
                stream.seek(0)
                for number, text in _lines(stream):
                    if text is None:
                        collector.lines += number
                    else:
                        collector.line(path.name, number, text)
        except IsADirectoryError:
            raise UsageError("is a folder", str(path), "log files (NCCL_DEBUG output, watchdog lines, "
                             "nccl-tests output)") from None
        except OSError as err:
            raise UsageError(f"cannot read: {err.strerror}", str(path), "a readable log file") from None
    return collector.freeze(tuple(names))

