"""NCCL_DEBUG lines: which ones a setting asks for, how NCCL writes them, and reading them back.

`debug_config(params)` turns NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE into a frozen
DebugConfig with NCCL's grammar (debug.cc): a level of VERSION, WARN, INFO, ABORT or TRACE; a
comma-separated list of subsystems, `^` first inverting it, ALL naming every one; a file name in
which `%h` becomes the host name and `%p` the pid. `LogSink` writes a rank's lines with NCCL's
prefix (`host:pid:tid [dev] NCCL INFO ...`, WARN lines with the source `file:line` before NCCL),
to stdout as NCCL does unless NCCL_DEBUG_FILE names a file, and only the lines the level and
subsystems select. `parse_line` reads any such line back (also behind a launcher's `[1,3]<stdout>:`
or `[rank3]:` prefix) and `read_job_log` recovers what a log says about a job: each rank's
communicator line, rings, trees, the settings read and the collective calls.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import IO, Iterable

from ..constants.rules import rules_for_minor

__all__ = ["LEVELS", "SUBSYSTEMS", "DEFAULT_SUBSYS", "DebugConfig", "Identity", "LogLine", "LogSink", "JobLog", "default_subsys",
           "debug_config", "format_line", "parse_line", "parse_call", "read_job_log", "expand_debug_file", "line_kind", "VERSION_LINE"]

# debug.cc ncclDebugInit: the levels NCCL_DEBUG names, in NCCL's order (NCCL_LOG_NONE is 0).
LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")
_LEVEL_RANK = {name: i + 1 for i, name in enumerate(LEVELS)}

# debug.cc: the NCCL_DEBUG_SUBSYS names of the newest release (ReleaseRules.debug_subsystems has
# each release's; ALL is every bit) and its default with NCCL_DEBUG_SUBSYS unset (INIT and ENV to
# 2.22, INIT, BOOTSTRAP and ENV from 2.23).
SUBSYSTEMS: tuple[str, ...] = rules_for_minor(None).debug_subsystems
DEFAULT_SUBSYS = rules_for_minor(None).debug_subsys_default


def default_subsys(version_minor: int | None) -> str:
    return rules_for_minor(version_minor).debug_subsys_default


@dataclass(frozen=True)
class DebugConfig:
    """What NCCL_DEBUG* select: `level` (0 = nothing, else 1 + the index in LEVELS), the chosen
    subsystems, the NCCL_DEBUG_FILE template (None: stdout), the release line whose rules apply
    (None: the newest) and nicksim's notes about values NCCL would take silently."""

    level: int = 0
    subsystems: frozenset[str] = frozenset()
    file_template: str | None = None
    warnings: tuple[str, ...] = ()
    version_minor: int | None = None

    def wants(self, level: str, subsys: str = "INIT") -> bool:
        """Whether a line of `level` (VERSION, WARN, INFO, TRACE) with flags `subsys` ("INIT|NET": any
        of them; "ALL": every one) is written."""
        # debug.cc ncclDebugLog: a line passes if the level reaches it and its flags meet the mask;
        # VERSION and WARN lines carry every flag (NCCL_ALL), so only an empty mask stops them.
        if self.level < _LEVEL_RANK[level] or not self.subsystems:
            return False
        if level in ("VERSION", "WARN") or subsys == "ALL":
            return True
        return any(name in self.subsystems for name in subsys.split("|"))

    @property
    def enabled(self) -> bool:
        return self.level > 0

    @property
    def info_version(self) -> bool:
        """init.cc showVersion from 2.22: at INFO and above the version is an INFO line of every rank."""
        return self.level >= _LEVEL_RANK["INFO"] and rules_for_minor(self.version_minor).version_info_line


def _subsystems(text: str, version_minor: int | None) -> tuple[frozenset[str], tuple[str, ...]]:
    """debug.cc's mask: `^` starts from every bit and clears the names; unknown names are skipped
    (to 2.29; a mask of none hides even WARN lines) or void the whole value for the default (2.30)."""
    release = rules_for_minor(version_minor)
    known = set(release.debug_subsystems)
    invert = text.startswith("^")
    names = [n.strip().upper() for n in text.lstrip("^").split(",") if n.strip()]
    unknown = [n for n in names if n != "ALL" and n not in known]
    if unknown:
        valid = f"valid: {', '.join(sorted(known))}, ALL; ^ inverts"
        if release.debug_subsys_unknown_voids:
            fallback, _ = _subsystems(default_subsys(version_minor), version_minor)
            return fallback, (f"NCCL_DEBUG_SUBSYS={text}: {', '.join(unknown)} not a subsystem; NCCL uses its "
                              f"default {default_subsys(version_minor)} ({valid})",)
        warning = f"NCCL_DEBUG_SUBSYS={text}: {', '.join(unknown)} not a subsystem, ignored ({valid})"
    else:
        warning = None
    chosen: set[str] = set()
    for name in names:
        if name == "ALL":
            chosen |= known
        elif name in known:
            chosen.add(name)
    if invert:
        chosen = known - chosen
    return frozenset(chosen), (warning,) if warning else ()


def debug_config(params, version_minor: int | None = None) -> DebugConfig:
    """NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE of `params`, parsed as debug.cc of release
    2.`version_minor` does (None: the newest)."""
    level_text = (params.get("NCCL_DEBUG") or "").strip()
    warnings: list[str] = []
    level = 0
    if level_text:
        level = _LEVEL_RANK.get(level_text.upper(), 0)
        if level == 0:  # debug.cc: an unknown level logs nothing
            warnings.append(f"NCCL_DEBUG={level_text} is not a level; NCCL logs nothing (valid: "
                            f"{', '.join(LEVELS)})")
    subsys, bad = _subsystems(params.get("NCCL_DEBUG_SUBSYS") or default_subsys(version_minor), version_minor)
    if params.get("NCCL_DEBUG_SUBSYS") and not subsys and level:
        bad += ("NCCL_DEBUG_SUBSYS selects no subsystem: NCCL then logs nothing, not even WARN lines",)
    # debug.cc opens NCCL_DEBUG_FILE only above VERSION
    file_template = params.get("NCCL_DEBUG_FILE") if level > _LEVEL_RANK["VERSION"] else None
    return DebugConfig(level, subsys, file_template or None, tuple(warnings) + bad, version_minor)


def expand_debug_file(template: str, host: str, pid: int) -> str:
    """NCCL_DEBUG_FILE with `%h` as the host name and `%p` as the pid (debug.cc; `%%` is a `%`)."""
    out, i = [], 0
    while i < len(template):
        ch = template[i]
        if ch == "%" and i + 1 < len(template):
            nxt = template[i + 1]
            if nxt in "hp%":
                out.append(host if nxt == "h" else str(pid) if nxt == "p" else "%")
                i += 2
                continue
        out.append(ch)
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class Identity:
    """How one process is named in its lines: host (up to its first dot, as NCCL cuts it), pid,
    thread id and CUDA device."""

    host: str
    pid: int
    tid: int
    dev: int

    def on_thread(self, tid: int) -> "Identity":
        return Identity(self.host, self.pid, tid, self.dev)


def format_line(who: Identity, level: str, text: str, where: str = "") -> str:
    """One line as NCCL prints it: `host:pid:tid [dev] NCCL INFO text`; WARN carries `file:line `."""
    if level == "VERSION":
        return f"NCCL version {text}" if not text.startswith("NCCL version") else text
    prefix = f"{who.host.split('.')[0]}:{who.pid}:{who.tid} [{who.dev}]"
    if level == "WARN" and where:
        return f"{prefix} {where} NCCL WARN {text}"
    return f"{prefix} NCCL {level} {text}"


class LogSink:
    """Writes the lines a DebugConfig selects, each rank's to stdout (NCCL's default stream) or to
    the file NCCL_DEBUG_FILE names for that rank's host and pid. Files are written whole on `close`
    (a simulated job's ranks share one process, so one file may gather several ranks' lines)."""

    def __init__(self, config: DebugConfig, stream: IO[str] | None = None, flush: bool = False):
        self.config = config
        self.stream = stream
        self.flush = flush  # one write per line, so that processes sharing a stdout never cut lines
        self.files: dict[str, list[str]] = {}

    def wants(self, level: str, subsys: str = "INIT") -> bool:
        return self.config.enabled and self.config.wants(level, subsys)

    def emit(self, who: Identity, level: str, subsys: str, text: str, where: str = "") -> None:
        if not self.wants(level, subsys):
            return
        if level == "VERSION" and self.config.info_version:
            level = "INFO"  # init.cc showVersion: a bare line at VERSION and WARN, an INFO line above
        line = format_line(who, level, text, where)
        if self.config.file_template:
            name = expand_debug_file(self.config.file_template, who.host.split(".")[0], who.pid)
            self.files.setdefault(name, []).append(line)
        else:
            print(line, file=self.stream or sys.stdout, flush=self.flush)

    def info(self, who: Identity, subsys: str, text: str) -> None:
        self.emit(who, "INFO", subsys, text)

    def warn(self, who: Identity, text: str, where: str = "") -> None:
        self.emit(who, "WARN", "INIT", text, where)

    def close(self) -> list[str]:
        """Write the files NCCL_DEBUG_FILE named; their names."""
        from ..errors import UsageError
        for name, lines in self.files.items():
            try:
                Path(name).write_text("\n".join(lines) + "\n", encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"cannot write: {exc.strerror}", f"NCCL_DEBUG_FILE ({name})",
                                 "a writable path; %h is the host, %p the pid") from None
        names = list(self.files)
        self.files = {}
        return names


# --- reading -------------------------------------------------------------------------------------

_LAUNCHER = r"(?:\[\d+,\d+\]<std(?:out|err)>:|\[rank\d+\]:|\[\d+\]\s*)?"
_PREFIX = re.compile(_LAUNCHER + r"(?P<host>[A-Za-z0-9_\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>-?\d+)\] "
                     r"(?:(?P<where>\S+:\d+)(?: \([^)]*\))? )?NCCL (?P<level>INFO|WARN|TRACE|ABORT) ?(?P<text>.*)$")


@dataclass(frozen=True)
class LogLine:
    """One NCCL_DEBUG line, read back."""

    who: Identity
    level: str
    text: str
    where: str = ""


def parse_line(line: str) -> LogLine | None:
    """A line NCCL (or nicksim) wrote at INFO, WARN or TRACE, else None."""
    m = _PREFIX.search(line.rstrip("\n"))
    if m is None:
        return None
    who = Identity(m["host"], int(m["pid"]), int(m["tid"]), int(m["dev"]))
    return LogLine(who, m["level"], m["text"], m["where"] or "")


# The kinds of line the C01-style comparison counts, in NCCL's words (a regex on the text).
_KINDS = (
    ("bootstrap", r"^Bootstrap ?: Using "),
    ("version", r"^NCCL version "),
    ("net", r"^NET/(?:IB|Socket) : Using |^Using network "),
    ("plugin", r"^NET/(?:OFI|Plugin)|^TUNER/Plugin|^DMA-BUF|^cudaDriverVersion"),
    ("init-start", r"^(?:\[Rank \d+\] )?(?:ncclCommInitRank(?:Config)? )?comm .* Init START"),
    ("setting", r"^NCCL_[A-Z0-9_]+ set by environment to "),
    ("affinity", r"^Setting affinity for GPU |^ncclTopoGetCpuAffinity: Affinity for GPU "),
    ("nvls-support", r"^NVLS multicast support is"),
    ("comm", r"^comm 0x[0-9a-f]+ rank \d+ nRanks \d+ nNodes \d+ localRanks"),
    ("graph", r"^Pattern \d+, crossNic|^ +\d+ : "),
    ("nvls-head", r"^NVLS Head +\d+:"),
    ("ring", r"^Channel \d+/\d+ :(?: +\d+)+$"),
    ("trees", r"^Trees "),
    ("p2p-chunk", r"^P2P Chunksize set to "),
    ("thresholds", r"^threadThresholds "),
    ("channel-counts", r"^\d+ coll channels, "),
    ("cc", r"^CC (?:On|Off), "),
    ("tuning", r"^ *(?:Algorithm|Protocol|Max NThreads|Broadcast|Reduce|AllGather|ReduceScatter|AllReduce)\s*\|"),
    ("init-complete", r"^(?:ncclCommInitRank(?:Config)? )?comm .* Init COMPLETE"),
    ("init-timings", r"^Init timings"),
    ("nvls-comm", r"^NVLS comm 0x"),
    ("connection", r"^Channel \d+(?:/\d+)? : \d+\[\d+\] -> \d+\[\d+\]"),
    ("connected", r"^Connected (?:all rings|all trees|NVLS tree|binomial trees|collnet)"),
    ("call", r"^[A-Za-z]+: opCount [0-9a-f]+ "),
    ("decision", r"^\d+ Bytes -> Algo \d+ proto \d+ time "),
    ("destroy", r"Destroy COMPLETE$"),
)


@lru_cache(maxsize=None)
def _kind_patterns() -> tuple[tuple[str, re.Pattern], ...]:
    """_KINDS compiled, when a line is first read (a run that only writes logs never needs them)."""
    return tuple((name, re.compile(pattern)) for name, pattern in _KINDS)


def line_kind(text: str) -> str | None:
    """The kind of an INFO line's text (`comm`, `ring`, `connection`, ...), None for others."""
    for name, pattern in _kind_patterns():
        if pattern.search(text):
            return name
    return None


# init.cc's banner, "NCCL version 2.22.3+cuda12.2" (also in nccl-tests' header from 2.17)
VERSION_LINE = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
_COMM = re.compile(r"^comm (0x[0-9a-f]+) rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) localRank (\d+)")
_RING = re.compile(r"^Channel (\d+)/(\d+) :((?: +\d+)+)$")
_TREE = re.compile(r"\[(\d+)\] (-?\d+)/(-?\d+)/(-?\d+)->(\d+)->(-?\d+)")
_SETTING = re.compile(r"^(NCCL_[A-Z0-9_]+) set by environment to (.*?)\.?$")
_CALL = re.compile(r"^([A-Za-z]+): opCount ([0-9a-f]+) sendbuff \S+ recvbuff \S+ count (\d+) datatype (\d+) "
                   r"op (\d+) root (-?\d+) comm (0x[0-9a-f]+) \[nranks=(\d+)\]")


def parse_call(text: str) -> dict | None:
    """The call an INFO line's text records (NCCL_DEBUG_SUBSYS=COLL, enqueue.cc: "AllReduce: opCount 3f
    sendbuff ... count N datatype D op O root R comm 0x.. [nranks=N]"), else None."""
    call = _CALL.match(text)
    if call is None:
        return None
    name, op_count, count, dtype, op, root, comm, nranks = call.groups()
    return {"func": name, "op_count": int(op_count, 16), "count": int(count), "datatype": int(dtype), "op": int(op),
            "root": int(root), "comm": comm, "nranks": int(nranks)}


@dataclass
class JobLog:
    """What a log says about a job, per rank: communicator shape, rings (rank 0 prints them), tree
    links per channel, settings read, the calls in order, and the count of each line kind."""

    comms: dict[int, dict] = field(default_factory=dict)
    rings: dict[int, tuple[int, ...]] = field(default_factory=dict)
    trees: dict[int, dict[int, tuple[int, tuple[int, ...]]]] = field(default_factory=dict)
    settings: dict[int, dict[str, str]] = field(default_factory=dict)
    calls: dict[int, list[dict]] = field(default_factory=dict)
    kinds: dict[int, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def read_job_log(lines: Iterable[str]) -> JobLog:
    """Read NCCL_DEBUG lines (any order of processes) into a JobLog; a process's rank comes from its
    `comm ... rank R nRanks N` line, lines before it are kept under its pid until then."""
    out = JobLog()
    rank_of: dict[tuple[str, int], int] = {}
    pending: dict[tuple[str, int], list[LogLine]] = {}
    for raw in lines:
        parsed = parse_line(raw)
        if parsed is None:
            continue
        key = (parsed.who.host, parsed.who.pid)
        comm = _COMM.match(parsed.text)
        if comm:
            rank = int(comm.group(2))
            rank_of[key] = rank
            out.comms[rank] = {"comm": comm.group(1), "nranks": int(comm.group(3)), "nnodes": int(comm.group(4)),
                               "local_ranks": int(comm.group(5)), "local_rank": int(comm.group(6))}
            for earlier in pending.pop(key, []):
                _absorb(out, rank, earlier)
        if key in rank_of:
            _absorb(out, rank_of[key], parsed)
        else:
            pending.setdefault(key, []).append(parsed)
    return out


def _absorb(out: JobLog, rank: int, line: LogLine) -> None:
    if line.level == "WARN":
        out.warnings.append(line.text)
    kind = line_kind(line.text)
    if kind:
        out.kinds.setdefault(rank, []).append(kind)
    ring = _RING.match(line.text)
    if ring:
        out.rings[int(ring.group(1))] = tuple(int(r) for r in ring.group(3).split())
        return
    if line.text.startswith("Trees"):
        for c, d0, d1, d2, me, up in _TREE.findall(line.text):
            down = tuple(int(d) for d in (d0, d1, d2) if int(d) >= 0)
            out.trees.setdefault(int(c), {})[int(me)] = (int(up), down)
        return
    setting = _SETTING.match(line.text)
    if setting:
        out.settings.setdefault(rank, {})[setting.group(1)] = setting.group(2)
        return
    call = parse_call(line.text)
    if call:
        out.calls.setdefault(rank, []).append(call)
