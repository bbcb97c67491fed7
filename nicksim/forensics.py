"""Diagnosing a hang, or a wrong result, from the logs people have after one.

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

`diagnose(evidence)` weighs them, most specific first, into a Diagnosis: a `category`
(`data-corruption`, `rank-divergence`, `mixed-communicators`, `fabric`, `bootstrap`,
`config-mismatch`, `straggler`, `stuck-peer`, or `unknown` with the reason), the culprit ranks,
the collective, the evidence lines (file and line), a confidence and the next steps: the knobs
and commands that would confirm or fix it.
"""
from __future__ import annotations

import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from .errors import UsageError
from .logs import parse_line

__all__ = ["Event", "Evidence", "Diagnosis", "CATEGORIES", "read_evidence", "diagnose", "format_diagnosis",
           "with_waits"]

CATEGORIES = ("rank-divergence", "mixed-communicators", "stuck-peer", "straggler", "bootstrap", "fabric",
              "config-mismatch", "data-corruption", "unknown")

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


@dataclass(frozen=True)
class Event:
    """One line that bears on the diagnosis: its kind, file, line number, text and rank (None
    where the line does not say), and what was read from it."""

    kind: str
    file: str
    line: int
    text: str
    rank: int | None = None
    fields: tuple = ()

    def get(self, key: str, default=None):
        return dict(self.fields).get(key, default)


@dataclass(frozen=True)
class Evidence:
    """What the files held: kept events by kind (at most _KEEP_PER_KIND each), how many of each
    kind there were, each rank's last watchdog timeout and work line, the NCCL settings and
    versions seen per source, the ranks whose NCCL init completed, and the world sizes named."""

    files: tuple[str, ...]
    lines_read: int
    events: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    timeouts: dict = field(default_factory=dict)  # rank -> Event
    work: dict = field(default_factory=dict)  # rank -> Event
    settings: dict = field(default_factory=dict)  # NCCL process -> {name: value it says it read}
    versions: dict = field(default_factory=dict)  # source -> version
    nranks: tuple[int, ...] = ()
    init_complete: int = 0
    ifaces: dict = field(default_factory=dict)  # rank (else process) -> (interface, address) of its bootstrap
    ras_groups: tuple = ()  # NCCL RAS: (launched up to, ranks, listed ranks, event) per operation-count group
    ras_missing: tuple[int, ...] = ()  # NCCL RAS: ranks missing from the communicators' data (dead, unresponsive)
    fingerprints: dict = field(default_factory=dict)  # rank -> (OpType, SequenceNumber) from a desync check

    def of(self, kind: str) -> list[Event]:
        return self.events.get(kind, [])


@dataclass(frozen=True)
class Diagnosis:
    """The verdict: category, culprit ranks, the collective, why, the evidence lines, confidence
    (high, medium, low) and the next steps."""

    category: str
    why: str
    culprit_ranks: tuple[int, ...] = ()
    collective: dict | None = None
    evidence: tuple[Event, ...] = ()
    confidence: str = "low"
    next_steps: tuple[str, ...] = ()
    waits: tuple[str, ...] = ()  # where each blocked rank waits, by the plan recomputed on a known system

    def to_json(self) -> dict:
        return {"category": self.category, "why": self.why, "culprit_ranks": list(self.culprit_ranks),
                "collective": self.collective, "confidence": self.confidence, "waits": list(self.waits),
                "evidence": [{"file": e.file, ("entry" if _is_entry(e) else "line"): e.line, "text": e.text}
                             for e in self.evidence],
                "next_steps": list(self.next_steps)}


# ---------------------------------------------------------------------------------------------
# Reading


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
    try:
        total = 1
        for dim in sizes[0]:
            total *= int(dim)
        return total
    except (TypeError, ValueError, IndexError):
        return None


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
        for comm in doc.get("communicators") or []:
            if not isinstance(comm, dict):
                continue
            totals: dict[int, list[int]] = {}
            for rank in comm.get("ranks") or []:
                counts = rank.get("collective_counts") or {} if isinstance(rank, dict) else {}
                total = sum(v for v in counts.values() if isinstance(v, int))
                totals.setdefault(total, []).append(rank.get("rank"))
            for index, (total, ranks) in enumerate(sorted(totals.items())):
                event = Event("ras", name, index + 1, f"communicator {comm.get('hash')}: {len(ranks)} rank(s) launched "
                              f"{total} collective(s): {', '.join(str(r) for r in ranks[:16])}", None,
                              (("count", len(ranks)), ("launched", total)))
                self.keep(event)
                self.ras_groups.append([total, len(ranks), list(ranks), event])
            missing = [m.get("rank") for m in comm.get("missing_ranks") or [] if isinstance(m, dict)]
            if missing:
                self.ras_missing |= {m for m in missing if isinstance(m, int)}
                self.keep(Event("ras", name, 0, f"communicator {comm.get('hash')}: missing rank(s) "
                                f"{', '.join(str(m) for m in missing)}", None, (("missing", tuple(missing)),)))
        self.lines += 1

    def flight_recorder(self, name: str, dump: dict, rank_from_name: int | None) -> None:
        """A rank's Flight Recorder dump: per process group, the first collective not completed
        is where the rank stands ("scheduled": enqueued, never started on the GPU; "started":
        running); a rank whose collectives all completed stands after its last one."""
        rank = dump.get("rank", rank_from_name)
        if not isinstance(rank, int):
            self.keep(Event("flight_recorder", name, 0, "a Flight Recorder dump that names no rank"))
            return
        entries = [e for e in dump["entries"] if isinstance(e, dict) and not e.get("is_p2p")]
        self.lines += len(entries)
        standing = None
        for number, entry in enumerate(entries, 1):
            pg_name = _pg(entry.get("process_group") or entry.get("pg_id"))
            sizes = entry.get("input_sizes") or [[]]
            out_sizes = entry.get("output_sizes") or [[]]
            fields = (("seq", entry.get("collective_seq_id")), ("op", _op_name(entry.get("profiling_name"))),
                      ("numel_in", _numel(sizes)), ("numel_out", _numel(out_sizes)),
                      ("timeout_ms", entry.get("timeout_ms")), ("ran_ms", None), ("pg", pg_name),
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
        status = (dump.get("pg_status") or {}).get(str(entries[-1].get("pg_id")), {})
        if standing is not None and self.timed_section is None:
            self.timed_section = self.section
        if standing is not None:
            self.timeouts.setdefault(rank, standing)
        enqueued = status.get("last_enqueued_collective", last.get("seq"))
        completed = status.get("last_completed_collective", last.get("seq") if standing is None else -1)
        work = Event("work", name, last.line, f"{last.text}; last enqueued collective {enqueued}, last completed "
                     f"{completed}", rank, (("seq", (standing or last).get("seq")), ("enqueued", enqueued),
                                           ("completed", completed), ("pg", last.get("pg")), ("entry", True)))
        self.work.setdefault(rank, work)

    def freeze(self, files: tuple[str, ...]) -> Evidence:
        return Evidence(files, self.lines, self.events, self.counts, self.timeouts, self.work, self.settings,
                        self.versions, tuple(sorted(self.nranks)), self.init_complete, self.ifaces,
                        tuple((g[0], g[1], tuple(g[2]), g[3]) for g in self.ras_groups), tuple(sorted(self.ras_missing)),
                        self.fingerprints)


_FR_MAX_NBYTES = 64 << 20  # a Flight Recorder dump holds a few thousand entries: megabytes


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles plain data only (dicts, lists, tuples, strings, numbers): a dump from another
    machine must not run code here."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def _flight_recorder(stream, path: Path) -> dict | None:
    """The file's Flight Recorder dump (PyTorch's pickle, or its JSON form), or None where the
    file is something else (or a dump too damaged to read: its lines are read instead)."""
    head = stream.read(1)
    stream.seek(0)
    if head not in (b"\x80", b"{") or path.stat().st_size > _FR_MAX_NBYTES:
        return None
    try:  # a pickle is read from the stream as far as it makes sense; JSON whole (it is at most the cap)
        dump = _PlainUnpickler(stream).load() if head == b"\x80" else json.load(stream)
    except Exception:  # damaged, truncated or not a dump after all: read as text
        return None
    if isinstance(dump, dict) and (isinstance(dump.get("entries"), list) or isinstance(dump.get("communicators"), list)):
        return dump
    return None


def _rank_in_name(name: str) -> int | None:
    """PyTorch names a rank's dump by its prefix and the rank (TORCH_NCCL_DEBUG_INFO_TEMP_FILE, default
    /tmp/nccl_trace_rank_<rank>)."""
    match = re.search(r"(\d+)(?:\.\w+)?$", name)
    return int(match.group(1)) if match else None


def read_evidence(paths: Iterable[str | Path]) -> Evidence:
    """Every file's lines that bear on a diagnosis (see the module docstring); a file that cannot
    be read is a UsageError naming it."""
    collector = _Collector()
    names = []
    for path in paths:
        path = Path(path)
        names.append(path.name)
        try:
            with open(path, "rb") as stream:
                dump = _flight_recorder(stream, path)
                if dump is not None and "communicators" in dump:
                    collector.ras_json(path.name, dump)
                    continue
                if dump is not None:
                    collector.flight_recorder(path.name, dump, _rank_in_name(path.name))
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


# ---------------------------------------------------------------------------------------------
# Weighing


def _collective(event: Event) -> dict:
    return {"op": event.get("op"), "seq": event.get("seq"), "numel_in": event.get("numel_in"),
            "numel_out": event.get("numel_out"), "communicator": event.get("pg"),
            "timeout_ms": event.get("timeout_ms")}


def _ranks_text(ranks) -> str:
    ranks = sorted(ranks)
    return ", ".join(str(r) for r in ranks[:16]) + (f" and {len(ranks) - 16} more" if len(ranks) > 16 else "")


_DIVERGENCE_STEPS = (
    "TORCH_NCCL_DESYNC_DEBUG=1 (and TORCH_DISTRIBUTED_DEBUG=DETAIL): PyTorch names the ranks that called a "
    "different collective",
    "look for a data-dependent branch (an early exit, a skipped step, a rank-dependent condition) before this "
    "SeqNum on the culprit ranks",
    "TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1: the Flight Recorder dumps each rank's last "
    "collectives",
)
_STUCK_STEPS = (
    "collect the logs of every rank: a rank missing from the timeouts is the first suspect",
    "TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1: the Flight Recorder shows where each rank "
    "stopped",
    "py-spy dump --native --pid PID on each rank while it hangs: a rank outside NCCL is the culprit",
    "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,NET: which collective each rank launched, and over which "
    "transports",
)


def _watchdog_groups(ev: Evidence) -> dict:
    """Per process group, per SeqNum, per (OpType, NumelIn, NumelOut): the ranks that timed out there."""
    groups: dict = {}
    for rank, event in ev.timeouts.items():
        key = (event.get("op"), event.get("numel_in"), event.get("numel_out"))
        groups.setdefault(event.get("pg"), {}).setdefault(event.get("seq"), {}).setdefault(key, set()).add(rank)
    return groups


def _fingerprint_mismatch(ev: Evidence) -> Diagnosis | None:
    """PyTorch's own desync check named the collectives ranks were about to run."""
    if not ev.fingerprints:
        return None
    by_op: dict[str, list[int]] = {}
    for rank, (op, _) in ev.fingerprints.items():
        by_op.setdefault(op, []).append(rank)
    if len(by_op) < 2:
        return None
    ordered = sorted(by_op.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
    majority = set(ordered[0][1]) if len(ordered[0][1]) > len(ordered[1][1]) else set()
    culprits = tuple(sorted(r for _, ranks in ordered for r in ranks if r not in majority))
    seq = next((s for _, s in ev.fingerprints.values() if s is not None), None)
    described = "; ".join(f"{op} on rank(s) {_ranks_text(ranks)}" for op, ranks in ordered)
    return Diagnosis("rank-divergence", f"PyTorch's collective check (TORCH_DISTRIBUTED_DEBUG=DETAIL) found the ranks "
                     f"running different collectives{f' at SequenceNumber {seq}' if seq is not None else ''}: "
                     f"{described}", culprits, {"op": ev.fingerprints[culprits[0]][0], "seq": seq, "numel_in": None,
                                                "numel_out": None, "communicator": None, "timeout_ms": None},
                     tuple(ev.of("fingerprint")[:6]), "high" if majority else "medium", _DIVERGENCE_STEPS)


def _divergence(ev: Evidence) -> Diagnosis | None:
    for pg, by_seq in _watchdog_groups(ev).items():
        for seq, by_call in by_seq.items():
            if len(by_call) < 2:
                continue
            calls = sorted(by_call.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
            majority = calls[0][1] if len(calls[0][1]) > len(calls[1][1]) else set()
            culprits = sorted(set().union(*(ranks for _, ranks in calls)) - majority)
            described = "; ".join(f"{op} (NumelIn {numel}) on rank(s) {_ranks_text(ranks)}"
                                  for (op, numel, _), ranks in calls)
            first = ev.timeouts[culprits[0]]
            evidence = tuple(ev.timeouts[r] for r in sorted(set().union(*(ranks for _, ranks in calls))))[:8]
            where = f" in process group {pg}" if pg else ""
            return Diagnosis("rank-divergence", f"ranks at SeqNum {seq}{where} run different collectives: {described}",
                             tuple(culprits), _collective(first), evidence, "high" if majority else "medium",
                             _DIVERGENCE_STEPS)
    return None


def _mixed_communicators(ev: Evidence) -> Diagnosis | None:
    groups = _watchdog_groups(ev)
    named = {pg for pg in groups if pg is not None}
    if len(named) < 2:
        return None
    ranks_of = {pg: set().union(*(r for calls in groups[pg].values() for r in calls.values())) for pg in named}
    largest = max(named, key=lambda pg: (len(ranks_of[pg]), str(pg)))
    culprits = sorted(set().union(*(ranks_of[pg] for pg in named if pg != largest)))
    evidence = tuple(ev.timeouts[r] for r in sorted(set().union(*ranks_of.values())))[:8]
    parts = "; ".join(f"process group {pg} on rank(s) {_ranks_text(ranks_of[pg])}" for pg in sorted(named, key=str))
    return Diagnosis("mixed-communicators", f"ranks hang in different communicators: {parts} (each waits in one "
                     "while its peers wait in another, the order of calls differing between ranks)",
                     tuple(culprits), _collective(ev.timeouts[culprits[0]]) if culprits else None, evidence, "medium",
                     ("issue the collectives of every communicator in the same order on every rank, or from one "
                      "thread", "TORCH_NCCL_DESYNC_DEBUG=1 and the Flight Recorder (TORCH_NCCL_TRACE_BUFFER_SIZE) "
                      "show each rank's order", "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL on every rank: the order each rank issued "
                      "its collectives in, per communicator (commHash)"))


def _behind(ev: Evidence) -> Diagnosis | None:
    """Ranks that had not enqueued the collective the others hang in: behind, in their own work."""
    groups = _watchdog_groups(ev)
    for pg, by_seq in groups.items():
        if not by_seq:
            continue
        top = max(by_seq)
        behind = sorted(r for r, w in ev.work.items() if w.get("pg") == pg and w.get("enqueued") < top)
        behind += sorted(r for seq, calls in by_seq.items() if seq < top for rs in calls.values() for r in rs
                         if r not in behind)
        if behind:
            (call, ranks), = list(by_seq[top].items())[:1]
            waiting = ev.timeouts[min(ranks)]
            evidence = tuple([waiting] + [ev.work.get(r) or ev.timeouts[r] for r in behind])[:8]
            return Diagnosis("straggler", f"rank(s) {_ranks_text(behind)} had not reached SeqNum {top} ({call[0]}) "
                             f"that rank(s) {_ranks_text(ranks)} time out in: they were still working (or stuck) "
                             "before it", tuple(behind), _collective(waiting), evidence, "medium",
                             ("py-spy dump --pid PID on the culprit ranks: what they were doing instead",
                              "compare the step times per rank (a slow data loader, checkpoint or host)",
                              "TORCH_NCCL_TRACE_BUFFER_SIZE=2000: the Flight Recorder's last entries per rank"))
    return None


def _ras(ev: Evidence) -> Diagnosis | None:
    """NCCL's RAS status: ranks missing from a communicator's data (their process dead or
    unresponsive) are the stuck peers; ranks that launched fewer operations than the rest are behind."""
    steps = ("query RAS again (ncclras, or: echo verbose status | nc localhost 28028): counts that do not move "
             "mean the communicator is stuck", "py-spy dump --native on the culprit ranks' processes (RAS names "
             "node and pid)", "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL on the culprit ranks")
    events = tuple(ev.of("ras")[:8])
    if ev.ras_missing:
        return Diagnosis("stuck-peer", f"NCCL's RAS misses rank(s) {_ranks_text(ev.ras_missing)} from the "
                         "communicator's data: their process is dead or unresponsive, and the others wait for it",
                         ev.ras_missing, None, events, "high", steps)
    if len({g[0] for g in ev.ras_groups}) < 2:
        return None
    lowest = min(g[0] for g in ev.ras_groups)
    behind = tuple(sorted({r for g in ev.ras_groups if g[0] == lowest for r in g[2]}))
    counts = "; ".join(f"{g[1]} rank(s) up to operation {g[0]}" for g in sorted(ev.ras_groups, key=lambda g: -g[0]))
    return Diagnosis("straggler", f"NCCL's RAS: {counts}; the ranks at {lowest} have not launched what the others "
                     "have (if repeated queries show the same counts, they are stuck before it)", behind, None,
                     events, "medium" if behind else "low", steps)


def _not_launched(ev: Evidence) -> Diagnosis | None:
    """Ranks whose collective was enqueued but never started on the GPU (a Flight Recorder entry
    left "scheduled") where their peers' started: the launch itself never happened."""
    states = {rank: e.get("state") for rank, e in ev.timeouts.items()}
    if "started" not in states.values():
        return None
    culprits = sorted(r for r, state in states.items() if state == "scheduled")
    if not culprits:
        return None
    first = ev.timeouts[culprits[0]]
    started = sorted(r for r, state in states.items() if state == "started")
    return Diagnosis("stuck-peer", f"rank(s) {_ranks_text(culprits)} enqueued {first.get('op')} (SeqNum "
                     f"{first.get('seq')}) but never started it, while rank(s) {_ranks_text(started)} run it and "
                     "wait: the culprits' launch never happened (an ncclGroupStart without its ncclGroupEnd, or a "
                     "stream held by other work)", tuple(culprits), _collective(first),
                     tuple(ev.timeouts[r] for r in culprits[:4] + started[:4]), "high",
                     ("check that every ncclGroupStart on the culprit ranks reaches its ncclGroupEnd (an exception "
                      "or early return between them)", "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL: each rank's calls "
                      "as NCCL receives them", "py-spy dump --native on the culprit ranks") + _STUCK_STEPS[1:2])


def _stuck_peer(ev: Evidence) -> Diagnosis | None:
    if not ev.timeouts:
        return None
    groups = _watchdog_groups(ev)
    pg, by_seq = next(iter(groups.items()))
    seq = max(by_seq)
    (call, ranks), = list(by_seq[seq].items())[:1]
    world = max(ev.nranks) if ev.nranks else None
    if call[0] and "REDUCE_SCATTER" in call[0].upper() and call[2]:
        world = world or (call[1] // call[2] if call[1] % call[2] == 0 else None)
    missing = sorted(set(range(world)) - set(ev.timeouts)) if world and len(ev.timeouts) < world else []
    first = ev.timeouts[min(ranks)]
    seen = f"{len(ev.timeouts)} rank(s) ({_ranks_text(ev.timeouts)})"
    why = (f"every rank that reported ({seen}) times out in the same {call[0]} (SeqNum {seq}, NumelIn {call[1]}): "
           "they launched it alike, so no rank diverged; a peer that never joined or stopped moving holds them")
    if missing:
        why += f"; rank(s) {_ranks_text(missing)} of {world} did not report a timeout"
    return Diagnosis("stuck-peer", why, tuple(missing), _collective(first),
                     tuple(ev.timeouts[r] for r in sorted(ev.timeouts))[:6] + tuple(ev.of("work")[:2]),
                     "medium" if missing else "low", _STUCK_STEPS)


def _from_lines(ev: Evidence, kind: str, category: str, why: str, steps: tuple[str, ...],
                confidence: str = "medium") -> Diagnosis | None:
    events = ev.of(kind)
    if not events:
        return None
    ranks = tuple(sorted({e.rank for e in events if e.rank is not None}))
    collective = _collective(next(iter(ev.timeouts.values()))) if ev.timeouts else None
    return Diagnosis(category, why.format(n=ev.counts.get(kind, 0), first=events[0].text[:200]), ranks, collective,
                     tuple(events[:8]), confidence, steps)


def _data_corruption(ev: Evidence) -> Diagnosis | None:
    failed = [e for e in ev.of("out_of_bounds") if e.get("verdict") == "FAILED" and e.get("count")]
    if not failed:
        return None
    protos = {e.get("NCCL_PROTO") for e in ev.of("setting") if e.get("NCCL_PROTO")}
    steps = ["NCCL_PROTO=Simple (then LL, then LL128) to find the protocol that corrupts",
             "NCCL_ALGO=Ring and NCCL_ALGO=Tree in turn: which algorithm",
             "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING: the protocol, algorithm and transports chosen"]
    why = f"nccl-tests found {sum(e.get('count') for e in failed)} wrong value(s) ({failed[0].text.strip()})"
    if any("LL128" in p for p in protos):
        why += ("; NCCL_PROTO forces LL128, which is only correct where NCCL enables it itself (its 128-byte "
                "stores must arrive whole: NVLink and supported platforms)")
        steps.insert(0, "unset NCCL_PROTO, or NCCL_PROTO=^LL128: let NCCL enable LL128 only where it is safe")
    forced = [e for e in ev.of("setting") if e.get("NCCL_PROTO") or e.get("NCCL_ALGO")]
    return Diagnosis("data-corruption", why, (), None, tuple(failed[:4]) + tuple(forced[:2]) + tuple(ev.of("warn")[:4]),
                     "high", tuple(steps))


def _config_mismatch(ev: Evidence) -> Diagnosis | None:
    steps = ("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV on every rank: compare the settings",
             "set the same NCCL_* variables on every rank (the launcher's -x / --export)")
    if any("/dev/shm" in e.text or "shared memory segment" in e.text for e in ev.of("config")):
        steps = ("the container's /dev/shm is too small for NCCL's shared-memory transport: docker run "
                 "--shm-size=1g (or --ipc=host); NCCL_SHM_DISABLE=1 avoids it at a cost",) + steps
    found = _from_lines(ev, "config", "config-mismatch", "{n} line(s) say the configuration cannot work: {first}",
                        steps)
    if found:
        return found
    if len(ev.settings) < 2 and len(ev.versions) < 2:
        return None
    names = {name for values in ev.settings.values() for name in values}
    differing = {name: {src: values.get(name) for src, values in ev.settings.items()}
                 for name in names if len({values.get(name) for values in ev.settings.values()}) > 1}
    versions = set(ev.versions.values())
    if not differing and len(versions) <= 1:
        return None
    def who(src) -> str:
        return f"rank {src}" if isinstance(src, int) else str(src)

    parts, culprits = [], set()
    for name, by in sorted(differing.items()):
        groups: dict = {}
        for src, value in by.items():
            groups.setdefault(value, []).append(src)
        common = max(groups, key=lambda v: len(groups[v]))
        culprits |= {src for value, srcs in groups.items() if value != common for src in srcs if isinstance(src, int)}
        parts.append(f"{name}: " + "; ".join(f"{value or 'unset'} on {', '.join(who(x) for x in sorted(srcs, key=str))}"
                                           for value, srcs in sorted(groups.items(), key=lambda kv: str(kv[0]))))
    if len(versions) > 1:
        parts.append("NCCL versions " + ", ".join(sorted(versions)))
    evidence = tuple(e for e in ev.of("setting") if any(e.get(name) for name in differing))[:8]
    return Diagnosis("config-mismatch", "the ranks run with different settings: " + " | ".join(parts),
                     tuple(sorted(culprits)), _collective(next(iter(ev.timeouts.values()))) if ev.timeouts else None,
                     evidence, "medium" if culprits else "low",
                     ("set the same NCCL_* variables and the same NCCL on every rank (the launcher's -x / --export)",
                      "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV: what each rank read"))


_BOOTSTRAP_STEPS = (
    "NCCL_SOCKET_IFNAME=<the interface every host reaches the others on> (ip -br addr), the same on every rank",
    "check that the root's address and port (NCCL_COMM_ID, MASTER_ADDR:MASTER_PORT) are reachable from every "
    "host: nc -zv HOST PORT; a firewall drops bootstrap connections",
    "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,NET: the interfaces and addresses NCCL picked",
)


def _odd_interfaces(ev: Evidence) -> Diagnosis | None:
    """Ranks whose bootstrap uses another interface than most: the others cannot reach them."""
    by_iface: dict[str, list] = {}
    for who, (iface, _) in ev.ifaces.items():
        by_iface.setdefault(iface, []).append(who)
    if len(by_iface) < 2:
        return None
    common = max(by_iface, key=lambda i: len(by_iface[i]))
    odd = sorted((w for i, ws in by_iface.items() if i != common for w in ws), key=str)
    if len(odd) >= len(by_iface[common]):
        return None
    ranks = tuple(w for w in odd if isinstance(w, int))
    where = ", ".join(f"{'rank ' if isinstance(w, int) else ''}{w} on {ev.ifaces[w][0]} ({ev.ifaces[w][1]})"
                      for w in odd)
    return Diagnosis("bootstrap", f"NCCL could not set up the communicator ({ev.counts.get('bootstrap', 0)} bootstrap "
                     f"error line(s), no 'Init COMPLETE'): {where}, where the others use {common}, so their "
                     "connections cannot reach it", ranks, None, tuple(ev.of("bootstrap")[:6]), "high",
                     _BOOTSTRAP_STEPS)


def diagnose(ev: Evidence) -> Diagnosis:
    """The most specific diagnosis the evidence supports (see the module docstring)."""
    for rule in (_data_corruption, _fingerprint_mismatch, _divergence, _mixed_communicators):
        found = rule(ev)
        if found:
            return found
    fabric = _from_lines(ev, "fabric", "fabric", "{n} line(s) report a network or NVLink failure: {first}",
                         ("ibstat / ibv_devinfo on the hosts named: a port down or flapping",
                          "NCCL_IB_TIMEOUT=22 and NCCL_IB_RETRY_CNT=7 ride out a congested fabric; retry "
                          "errors that remain are a link or cable",
                          "dmesg | grep -i -e xid -e mlx: driver-level errors (Xid 74/79: NVLink, GPU off the bus)",
                          "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET: which NIC and peer each connection uses"), "high")
    if fabric:
        return fabric
    if ev.of("bootstrap") and ev.init_complete == 0:
        odd = _odd_interfaces(ev)
        if odd:
            return odd
        return _from_lines(ev, "bootstrap", "bootstrap", "NCCL could not set up the communicator: {first} ({n} "
                           "such line(s), and no rank logged 'Init COMPLETE')",
                           _BOOTSTRAP_STEPS, "high")
    for rule in (_config_mismatch, _ras, _not_launched, _behind, _stuck_peer):
        found = rule(ev)
        if found:
            return found
    if ev.of("warn"):
        return _from_lines(ev, "warn", "unknown", "NCCL warned ({first}), but nothing says why ranks would hang",
                           _STUCK_STEPS, "low")
    return Diagnosis("unknown", f"because no watchdog timeout, NCCL warning or nccl-tests verdict was found in "
                     f"{len(ev.files)} file(s) ({ev.lines_read} lines)", (), None, (), "low",
                     ("NCCL_DEBUG=INFO (NCCL_DEBUG_FILE=/tmp/nccl.%h.%p.log) on every rank",
                      "TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1: Flight Recorder dumps"))


# PyTorch's OpType -> (NCCL collective, which Numel is NCCL's count).
_COLLECTIVE_OF = {"ALLREDUCE": ("all_reduce", "in"), "BROADCAST": ("broadcast", "in"), "REDUCE": ("reduce", "in"),
                  "ALLGATHER": ("all_gather", "in"), "_ALLGATHER_BASE": ("all_gather", "in"),
                  "REDUCE_SCATTER": ("reduce_scatter", "out"), "_REDUCE_SCATTER_BASE": ("reduce_scatter", "out")}
_DTYPE_OF = {"Float": "float", "Half": "half", "BFloat16": "bfloat16", "Double": "double", "Int": "int32",
             "Long": "int64", "Char": "int8", "Byte": "uint8"}


def with_waits(d: Diagnosis, ev: Evidence, job) -> Diagnosis:
    """`d` with `waits`: the evidence's calls run again on `job` (the DES, every rank its call, the
    culprits of a rank that never joined none) to name, per blocked rank, the channel, primitive
    and peer it waits on. Unchanged where there is no collective to run, or it cannot be run."""
    from dataclasses import replace
    from .calls import Call
    from .model.engine import des_setup, simulate_sequences
    if not ev.timeouts:
        return d
    if max(ev.timeouts) >= job.nranks:
        return replace(d, waits=(f"the logs name rank {max(ev.timeouts)}; the system given has {job.nranks} ranks: "
                                 "give its --nodes and --gpus-per-node",))
    calls = {}
    for rank, event in sorted(ev.timeouts.items()):
        known = _COLLECTIVE_OF.get(str(event.get("op")))
        count = event.get("numel_in") if known and known[1] == "in" else event.get("numel_out")
        if not known or not count:
            return replace(d, waits=(f"{event.get('op')} is not a collective the plans cover",))
        call = Call(known[0], int(count), "float", "sum" if known[0] in ("all_reduce", "reduce", "reduce_scatter")
                    else "none", 0 if known[0] in ("broadcast", "reduce") else -1, job.nranks)
        calls[rank] = [call]
    tally: dict = {}
    for rank, (call,) in calls.items():
        tally.setdefault(call, []).append(rank)
    common = max(tally, key=lambda c: (len(tally[c]), -min(tally[c])))  # most ranks', then the lowest rank's
    absent = set(d.culprit_ranks) if d.category in ("straggler", "stuck-peer") else set()
    for rank in range(job.nranks):  # ranks that left no evidence run what the others run
        if rank not in calls and rank not in absent:
            calls[rank] = [common]
    run = simulate_sequences(des_setup(job, timeout_us=1e6), calls)
    if run.hang is None:
        return replace(d, waits=("on this system the calls the logs show complete: the hang is not in them",))
    lines = []
    for line in run.hang.lines()[1:]:
        line = line.strip()
        if line.startswith("done with all their calls:") and absent:
            line = f"not in the call (the logs show no such call on them): rank(s) {_ranks_text(absent)}"
        lines.append(line)
    return replace(d, waits=tuple(lines))


def _is_entry(event: Event) -> bool:
    """Whether the event is a Flight Recorder entry (numbered by entry, not by line)."""
    return event.kind == "flight_recorder" or bool(event.get("entry"))


def format_diagnosis(d: Diagnosis) -> list[str]:
    """The diagnosis for people: verdict, culprits, collective, why, evidence, next steps."""
    out = [f"category: {d.category} (confidence {d.confidence})",
           f"culprit ranks: {_ranks_text(d.culprit_ranks) if d.culprit_ranks else 'not named by the evidence'}"]
    if d.collective:
        c = d.collective
        pg = f" in process group {c['communicator']}" if c.get("communicator") else ""
        out.append(f"collective: {c['op']} SeqNum {c['seq']} NumelIn {c['numel_in']} NumelOut {c['numel_out']}{pg}")
    out.append(f"why: {d.why}")
    if d.evidence:
        out.append("evidence:")
        out += [f"  {e.file}{' entry ' if _is_entry(e) else ':'}{e.line}: {e.text[:300]}" for e in d.evidence]
    if d.waits:
        out.append("waits (the plan recomputed on the system given):")
        out += [f"  {line}" for line in d.waits]
    out.append("next steps:")
    out += [f"  - {step}" for step in d.next_steps]
    return out
