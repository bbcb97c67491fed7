"""The one place NCCL_* and NICKSIM_* settings are read.

`read_params(environ, overrides)` takes the process environment (like NCCL, which reads
getenv) and the command line's repeatable `--env KEY=VALUE` (which win), parses every knob
it knows with NCCL's grammar, and returns a frozen Params. A value NCCL would reject is
reported with NCCL's own wording in `Params.warnings` and the default is kept; nothing in
here raises for a bad value, only for a malformed `--env` argument.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from .constants.topo_rules import P2P_NET_CHUNK_DEFAULT, P2P_PER_CHANNEL_NET_BW
from .errors import UsageError

__all__ = [
    "Knob",
    "KNOBS",
    "Params",
    "ListSetting",
    "read_params",
    "parse_nccl_int",
    "LEVEL_NAMES",
    "OLD_LEVELS",
    "ALGO_NAMES",
    "PROTO_NAMES",
    "FUNC_NAMES",
]

# Every path-level name any modelled version accepts for NCCL_P2P_LEVEL / NCCL_NET_GDR_LEVEL
# (paths.cc ncclGetLevel compares with topoPathTypeStr up to PATH_SYS).
LEVEL_NAMES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
# paths.cc levelsOldToNew: the integer levels of NCCL < 2.4, clamped at 5.
OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")

# tuning.cc ncclAlgoStr / ncclProtoStr / ncclFuncStr (parseList compares case-insensitively).
ALGO_NAMES = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTO_NAMES = ("LL", "LL128", "Simple")
FUNC_NAMES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce",
              "SendRecv", "Send", "Recv", "AllToAll")


@dataclass(frozen=True)
class ListSetting:
    """A parsed NCCL_ALGO / NCCL_PROTO value: per prefix (None = all functions), on/off per element."""

    text: str
    entries: tuple[tuple[str | None, bool, tuple[str, ...]], ...]  # (prefix, negated, elements)

    def enabled(self, func: str, names: Sequence[str]) -> dict[str, bool]:
        """Which of `names` this setting leaves enabled for function `func`, as parseList does."""
        state = {n: True for n in names}
        for prefix, negated, elems in self.entries:
            if prefix is not None and prefix.lower() != func.lower():
                continue
            chosen = {e.lower() for e in elems}
            for n in names:
                state[n] = (n.lower() not in chosen) if negated else (n.lower() in chosen)
        return state


@dataclass(frozen=True)
class Knob:
    """One setting: its name, NCCL's default, how its value is parsed, and since when it exists."""

    name: str
    default: Any
    kind: str  # int | level | list-algo | list-proto | str
    doc: str
    since: str = "2.18"
    until: str | None = None


def _k(name, default, kind, doc, since="2.18", until=None):
    return Knob(name, default, kind, doc, since, until)


KNOBS: Mapping[str, Knob] = MappingProxyType({k.name: k for k in (
    _k("NCCL_P2P_LEVEL", None, "level", "farthest path type that still uses P2P"),
    _k("NCCL_P2P_DISABLE", 0, "int", "1 disables P2P (same as NCCL_P2P_LEVEL=LOC)"),
    _k("NCCL_SHM_DISABLE", 0, "int", "1 disables the shared-memory transport"),
    _k("NCCL_IB_DISABLE", 0, "int", "1 disables IB/RoCE verbs: NET falls back to sockets"),
    _k("NCCL_NET_GDR_LEVEL", None, "level", "farthest GPU-NIC path type that still uses GPUDirect RDMA"),
    _k("NCCL_NET_GDR_READ", -2, "int", "GPUDirect RDMA for sends (-2: on from SM80)"),
    _k("NCCL_NET_GDR_C2C", None, "int", "GDR for NICs reached over C2C (default 0 in 2.26, 1 from 2.27)", "2.26"),
    _k("NCCL_PXN_DISABLE", 0, "int", "1 disables PXN (NIC access through an NVLink peer)"),
    _k("NCCL_P2P_PXN_LEVEL", 2, "int", "PXN for send/recv: 0 never, 1 when needed, 2 always"),
    _k("NCCL_PXN_C2C", None, "int", "allow PXN through a peer reaching the NIC over C2C (default 0 in 2.27, 1 from 2.28)", "2.27"),
    _k("NCCL_NVB_DISABLE", 0, "int", "1 forbids NVLink paths through an intermediate GPU"),
    _k("NCCL_IGNORE_DISABLED_P2P", 0, "int", "1 ignores the driver's P2P status"),
    _k("NCCL_NET_DISABLE_INTRA", 0, "int", "1 never uses the network inside a node"),
    _k("NCCL_CROSS_NIC", 2, "int", "rings/trees may use different NICs on each end: 0 no, 1 yes, 2 if needed"),
    _k("NCCL_ALGO", None, "list-algo", "algorithms allowed, NCCL list grammar"),
    _k("NCCL_PROTO", None, "list-proto", "protocols allowed, NCCL list grammar"),
    _k("NCCL_BUFFSIZE", 4194304, "int", "Simple protocol buffer per connection, bytes"),
    _k("NCCL_P2P_NET_CHUNKSIZE", P2P_NET_CHUNK_DEFAULT, "int", "send/recv chunk over NET, bytes"),
    _k("NCCL_P2P_NVL_CHUNKSIZE", 524288, "int", "send/recv chunk when every GPU pair is on NVLink, bytes"),
    _k("NCCL_P2P_PCI_CHUNKSIZE", 131072, "int", "send/recv chunk over PCI, bytes"),
    _k("NCCL_P2P_SCHEDULE_GROUP_SIZE", 8, "int", "ranks per group of the send/recv schedule across nodes (2.28+)"),
    _k("NCCL_MIN_NCHANNELS", 0, "int", "minimum channels (deprecated: NCCL_MIN_CTAS)"),
    _k("NCCL_MAX_NCHANNELS", 0, "int", "maximum channels (deprecated: NCCL_MAX_CTAS)"),
    _k("NCCL_MIN_CTAS", 0, "int", "minimum CTAs (channels) per collective"),
    _k("NCCL_MAX_CTAS", 0, "int", "maximum CTAs (channels) per collective"),
    _k("NCCL_NVLS_ENABLE", 2, "int", "NVLink SHARP: 0 off, 1 on, 2 auto"),
    _k("NCCL_NVLS_NCHANNELS", None, "int", "NVLS channels (default 16 on SM90; 24/32 on SM100 from 2.27)"),
    _k("NCCL_NVLS_CHUNKSIZE", 131072, "int", "NVLS chunk, bytes", "2.21"),
    _k("NCCL_NVLSTREE_MAX_CHUNKSIZE", -2, "int", "largest NVLSTree chunk (-2: 64 KiB from 4 nodes, else the NVLS chunk)",
       "2.20"),
    _k("NCCL_MIN_P2P_NCHANNELS", 1, "int", "fewest point-to-point channels"),
    _k("NCCL_MAX_P2P_NCHANNELS", 64, "int", "most point-to-point channels"),
    _k("NCCL_NCHANNELS_PER_NET_PEER", None, "int", "point-to-point channels per peer on another node"),
    _k("NCCL_P2P_PER_CHANNEL_NET_BW", int(P2P_PER_CHANNEL_NET_BW), "int", "GB/s one point-to-point channel drives over NET (2.29+)"),
    _k("NCCL_COLLNET_ENABLE", 0, "int", "CollNet (SHARP) algorithms"),
    _k("NCCL_COLLNET_NODE_THRESHOLD", 2, "int", "fewest nodes for which CollNet stays on"),
    _k("NCCL_SHARP_DISABLE_ALLGATHER", 0, "int", "SHARP plugin: 1 withdraws its iallgather (no CollNet AllGather)"),
    _k("NCCL_SHARP_DISABLE_REDUCE_SCATTER", 0, "int", "SHARP plugin: 1 withdraws its ireducescatter"),
    _k("NCCL_CUMEM_ENABLE", 1, "int", "cuMem-based P2P buffers (P2P/CUMEM)"),
    _k("NCCL_TOPO_FILE", None, "str", "NCCL topology XML to load instead of detecting"),
    _k("NCCL_TOPO_DUMP_FILE", None, "str", "where to write the detected topology XML"),
    _k("NCCL_GRAPH_DUMP_FILE", None, "str", "where to write the searched graphs (XML)"),
    _k("NCCL_GRAPH_FILE", None, "str", "graph XML to use instead of searching (NCCL_GRAPH_DUMP_FILE form)"),
    _k("NCCL_SOCKET_IFNAME", None, "str", "interfaces for bootstrap and socket transport"),
    _k("NCCL_SOCKET_NTHREADS", -2, "int", "helper threads per socket connection (-2: by the NIC's vendor, else 0)"),
    _k("NCCL_NSOCKS_PERTHREAD", -2, "int", "sockets per helper thread (-2: by the NIC's vendor, else 1)"),
    _k("NCCL_HOSTID", None, "str", "this host's identity, instead of its hostname and boot id (ranks with the "
       "same one share a node)"),
    _k("NCCL_IB_HCA", None, "str", "IB devices to use"),
    _k("NCCL_DEBUG", None, "str", "log level: VERSION WARN INFO TRACE"),
    _k("NCCL_DEBUG_SUBSYS", None, "str", "log subsystems"),
    _k("NCCL_NTHREADS", -2, "int", "threads per CTA for LL and Simple (multiple of 32, 64-512)"),
    _k("NCCL_LL128_NTHREADS", -2, "int", "threads per CTA for LL128 (multiple of 32, 160-640)"),
    _k("NCCL_PAT_ENABLE", 2, "int", "PAT algorithm for AllGather/ReduceScatter: 0 off, 1 on, 2 auto (1 GPU per node)", "2.23"),
    _k("NCCL_LL128_C2C", 1, "int", "LL128 by default up to PXN paths on SM90+ (0: only up to PXB)", "2.27"),
    _k("NCCL_THREAD_THRESHOLDS", None, "str", "Tree and Ring thread thresholds: 'LL LL128 Simple LL LL128 Simple'"),
    _k("NICKSIM_COMM_ID", None, "str", "the real backend's bootstrap root, host:port (as NCCL_COMM_ID)"),
    _k("NICKSIM_TIMEOUT", 60, "int", "seconds the real backend waits on a peer before it gives up"),
    _k("NICKSIM_DEVICE", "cpu", "str", "where the real backend's ranks run: cpu (shared memory, numpy) or gpu "
                                       "(CUDA IPC, CuPy kernels; one host)"),
    _k("NCCL_NET_OVERHEAD", None, "int", "per-step network overhead in ns (tuning)"),
)})


@dataclass(frozen=True)
class Params:
    """The parsed settings of one run; `get` answers NCCL's default for a knob nobody set."""

    values: Mapping[str, Any]
    raw: Mapping[str, str]
    sources: Mapping[str, str]
    warnings: tuple[str, ...] = ()
    info: tuple[str, ...] = field(default=())

    def get(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        knob = KNOBS.get(name)
        return knob.default if knob else None

    def is_set(self, name: str) -> bool:
        return name in self.values

    def with_defaults(self, texts: Mapping[str, str], source: str) -> "Params":
        """A copy where each unset knob of `texts` takes that value, as a library's setenv(..., 0)
        does before NCCL reads it (e.g. a network plugin's NCCL_NVLS_CHUNKSIZE)."""
        merged = dict(self.values)
        sources = dict(self.sources)
        for key, text in texts.items():
            knob = KNOBS.get(key)
            if knob is None or key in merged or self.raw.get(key, "") != "":
                continue
            value, warning = _parse_value(knob, text)
            if warning is None:
                merged[key] = value
                sources[key] = source
        return Params(MappingProxyType(merged), self.raw, MappingProxyType(sources), self.warnings, self.info)

    def with_overrides(self, **values: Any) -> "Params":
        """A copy with knobs set programmatically (tests, what-if); source 'api'."""
        merged = dict(self.values)
        sources = dict(self.sources)
        for key, value in values.items():
            merged[key] = value
            sources[key] = "api"
        return Params(MappingProxyType(merged), self.raw, MappingProxyType(sources), self.warnings, self.info)


_INT_RE = re.compile(r"^\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def parse_nccl_int(text: str) -> int | None:
    """strtoll(text, NULL, 0) as NCCL calls it: sign, 0x hex, 0 octal, decimal; trailing text ignored.

    Returns None where strtoll would find no number at all (NCCL silently reads 0 there;
    nicksim reports it instead).
    """
    match = _INT_RE.match(text)
    if not match:
        return None
    sign, digits = match.groups()
    if digits.lower().startswith("0x"):
        value = int(digits, 16)
    elif digits.startswith("0") and len(digits) > 1:
        value = int(digits, 8)
    else:
        value = int(digits, 10)
    return -value if sign == "-" else value


def _parse_level(text: str) -> str | None:
    name = text.strip()
    if name in LEVEL_NAMES:
        return name
    if name[:1].isdigit():
        number = parse_nccl_int(name)
        if number is not None:
            return OLD_LEVELS[min(number, len(OLD_LEVELS) - 1)]
    return None


def _parse_list(text: str, elems: Sequence[str]) -> tuple[ListSetting | None, str | None]:
    """tuning.cc parseList grammar: 'a,b;func:^c'. Returns (setting, NCCL's WARN text)."""
    entries = []
    for position, token in enumerate(t for t in text.split(";") if t):
        prefix, sep, elem_list = token.partition(":")
        if not sep:
            if position != 0:
                return None, f'All entries except the first must have a prefix: "{text}"'
            prefix, elem_list = None, token
        negated = elem_list.startswith("^")
        names = tuple(e for e in elem_list.lstrip("^").split(",") if e)
        if prefix is not None and prefix.lower() not in {f.lower() for f in FUNC_NAMES}:
            return None, f'Unrecognized prefix token "{prefix}" when parsing "{text}"'
        for name in names:
            if name.lower() not in {e.lower() for e in elems}:
                return None, f'Unrecognized element token "{name}" when parsing "{text}"'
        entries.append((prefix, negated, names))
    return ListSetting(text, tuple(entries)), None


def _parse_value(knob: Knob, text: str) -> tuple[Any, str | None]:
    """(value, warning) — value None means 'keep the default'."""
    if knob.kind == "int":
        value = parse_nccl_int(text)
        if value is None:
            return None, f"NCCL INFO Invalid value {text} for {knob.name}, using default {knob.default}."
        return value, None
    if knob.kind == "level":
        value = _parse_level(text)
        if value is None:
            return None, (f"NCCL WARN Invalid value {text} for {knob.name}, ignoring it "
                          f"(valid: {', '.join(LEVEL_NAMES)} or 0-5)")
        return value, None
    if knob.kind in ("list-algo", "list-proto"):
        names = ALGO_NAMES if knob.kind == "list-algo" else PROTO_NAMES
        setting, warning = _parse_list(text, names)
        if setting is None:
            return None, f"NCCL WARN {warning}; {knob.name} ignored (valid: {', '.join(names)})"
        return setting, None
    return text, None


_CONTROLLED = ("NCCL_", "NICKSIM_")


def _merge_sources(environ: Mapping[str, str], overrides: Sequence[str]) -> tuple[dict, dict]:
    raw: dict[str, str] = {}
    sources: dict[str, str] = {}
    for key, value in environ.items():
        if key.startswith(_CONTROLLED):
            raw[key], sources[key] = value, "environment"
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise UsageError(f"'{item}' is not KEY=VALUE", "--env", "e.g. --env NCCL_P2P_LEVEL=NVL")
        raw[key], sources[key] = value, "--env"
    return raw, sources


def read_params(environ: Mapping[str, str], overrides: Sequence[str] = ()) -> Params:
    """Parse the NCCL_*/NICKSIM_* settings of `environ`, then of `--env` overrides (which win)."""
    raw, sources = _merge_sources(environ, overrides)
    values: dict[str, Any] = {}
    warnings: list[str] = []
    info: list[str] = []
    for key in sorted(raw):
        text = raw[key]
        knob = KNOBS.get(key)
        if knob is None or text == "":
            continue  # NCCL ignores unset-looking and unknown variables
        value, warning = _parse_value(knob, text)
        if warning:
            warnings.append(warning)
            continue
        values[key] = value
        info.append(f"NCCL INFO {key} set by environment to {text}.")
    return Params(MappingProxyType(values), MappingProxyType(raw), MappingProxyType(sources),
                  tuple(warnings), tuple(info))
