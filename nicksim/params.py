"""The one place NCCL_* and NICKSIM_* settings are read.

`read_params(environ, overrides)` takes the process environment (like NCCL, which reads
getenv) and the command line's repeatable `--env KEY=VALUE` (which win), parses every knob
it knows with NCCL's grammar, and returns a frozen Params. A value NCCL would reject is
reported with NCCL's own wording in `Params.warnings` and the default is kept; nothing in
here raises for a bad value, only for a malformed `--env` argument.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from .constants.device import THREAD_BOUNDS, WARP_SIZE
from .constants.knobs import KNOB_TABLE, Knob
from .constants.rules import rules_for_minor
from .errors import UsageError

__all__ = [
    "Knob",
    "KNOBS",
    "Params",
    "ListSetting",
    "read_params",
    "parse_nccl_int",
    "debug_ranks",
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


# Every knob, with its default, grammar, releases and effects per engine (constants/knobs.py).
KNOBS: Mapping[str, Knob] = KNOB_TABLE


@dataclass(frozen=True)
class Params:
    """The parsed settings of one run; `get` answers NCCL's default for a knob nobody set."""

    values: Mapping[str, Any]
    raw: Mapping[str, str]
    sources: Mapping[str, str]
    warnings: tuple[str, ...] = ()
    info: tuple[str, ...] = field(default=())
    version_minor: int | None = None  # the release whose defaults apply (for_version), None: the newest
    notes: tuple[str, ...] = ()  # what for_version said about knobs that release does not read
    cache_home: str | None = None  # the user's cache folder for nicksim, as the environment names it

    def get(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        knob = KNOBS.get(name)
        return knob.default_for(self.version_minor) if knob else None

    def for_version(self, minor: int) -> "Params":
        """These settings as NCCL 2.`minor` reads them: its defaults, and without the knobs it does
        not read (each named in `notes`)."""
        values = dict(self.values)
        notes = []
        for name in sorted(self.values):
            knob = KNOBS.get(name)
            if knob is None or knob.read_by(minor):
                continue
            del values[name]
            if knob.removed_by(minor):
                notes.append(f"{name} is ignored: NCCL read it from {knob.since} until {knob.until} (removed), not "
                             f"in 2.{minor}")
            else:
                notes.append(f"{name} is ignored: NCCL reads it from {knob.since} on, not in 2.{minor}")
        for name in ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"):
            if name in values and rules_for_minor(minor).nchannels_knobs_deprecated:  # env.rst (2.30): since 2.17
                ctas = name.replace("NCHANNELS", "CTAS")
                notes.append(f"{name} is deprecated since NCCL 2.17 in favour of {ctas}; NCCL still honours it "
                             f"(with {ctas} set too, the more restrictive of the two applies)")
        return replace(self, values=MappingProxyType(values), version_minor=minor, notes=tuple(notes))

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
        return replace(self, values=MappingProxyType(merged), sources=MappingProxyType(sources))

    def with_overrides(self, **values: Any) -> "Params":
        """A copy with knobs set programmatically (tests, what-if); source 'api'."""
        merged = dict(self.values)
        sources = dict(self.sources)
        for key, value in values.items():
            merged[key] = value
            sources[key] = "api"
        return replace(self, values=MappingProxyType(merged), sources=MappingProxyType(sources))


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


_INT64 = 1 << 63
_IFLIST_ENTRY = re.compile(r"^[^:\s]+(?::(\d*)(?::\d*){0,2})?$")


def _parse_iflist(knob: Knob, text: str) -> str | None:
    """NCCL_IB_HCA / NCCL_SOCKET_IFNAME (misc/utils.cc parseStringList): '^' then '=' before a
    comma list of name[:port]; None where NCCL could match nothing by it."""
    body = text[1:] if text.startswith("^") else text
    body = body[1:] if body.startswith("=") else body
    entries = [e for e in body.split(",") if e]
    if not entries or not all(_IFLIST_ENTRY.match(e) for e in entries):
        return None
    return text


def _parse_int(knob: Knob, text: str) -> tuple[Any, str | None]:
    value = parse_nccl_int(text)
    if value is None or not -_INT64 <= value < _INT64:
        # param.cc: strtoll's ERANGE gives NCCL's own words; text without digits, which NCCL
        # would silently read as 0, is reported the same way here.
        return None, f"NCCL INFO Invalid value {text} for {knob.name}, using default {knob.default}."
    if knob.least is not None and value < knob.least and value not in knob.keep:
        also = "".join(f" or {k} (the default)" for k in knob.keep)
        read = f" (read as {value}: no units)" if _INT_RE.match(text).end() < len(text.rstrip()) else ""
        raise UsageError(f"{knob.name}={text}{read} cannot run", knob.name, f"at least {knob.least}{also}")
    warning = _ignored_tail(knob, text, value) or _thread_warning(knob, value)
    if value in knob.keep:  # NCCL's "use the default" (e.g. NCCL_BUFFSIZE=-2: init.cc computeBuffSizes)
        return knob.default, warning
    return value, warning


def _ignored_tail(knob: Knob, text: str, value: int) -> str | None:
    """strtoll stops at the first character that is not part of the number, and NCCL never looks
    at the rest: '1.8e-162' is 1 and '4M' is 4. Said, since it is rarely what was meant."""
    tail = text[_INT_RE.match(text).end():].strip()
    if not tail:
        return None
    return (f"{knob.name}={text} is read as {value}, as NCCL's strtoll reads it ('{tail}' ignored; valid: an "
            "integer, decimal, 0x hex or 0 octal, with no unit)")


def _thread_warning(knob: Knob, value: int) -> str | None:
    """tuning.cc getNthreads: a thread count that is not a multiple of the warp size, or above the
    maximum, becomes the maximum; below the minimum, the minimum; each with NCCL's WARN."""
    if knob.name not in THREAD_BOUNDS or value <= 0:
        return None
    low, high = THREAD_BOUNDS[knob.name]
    if value % WARP_SIZE != 0:
        return f"NCCL WARN Invalid {knob.name} {value} (must be a multiple of {WARP_SIZE}). NCCL uses {high} threads"
    if value > high:
        return f"NCCL WARN Invalid {knob.name} {value} (maximum {high}). NCCL uses {high} threads"
    if value < low:
        return f"NCCL WARN Invalid {knob.name} {value} (minimum {low}). NCCL uses {low} threads"
    return None


def _parse_value(knob: Knob, text: str) -> tuple[Any, str | None]:
    """(value, warning): a value of None means 'keep the default'; a warning with a value is said
    and the value still used, as NCCL does."""
    if knob.kind == "int":
        return _parse_int(knob, text)
    if knob.kind == "iflist":
        if _parse_iflist(knob, text) is None:
            return None, (f"{knob.name}={text} is not a device list; ignored (valid: names or prefixes "
                          f"with an optional :port, comma-separated, after an optional ^ (exclude) and = (exact), "
                          f"e.g. =mlx5_0:1,mlx5_1:1)")
        return text, None

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


_CONTROLLED = ("NCCL_", "NICKSIM_", "TORCH_NCCL_")


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
        if value is None:
            continue
        values[key] = value
        shown = parse_nccl_int(text) if knob.kind == "int" else text  # param.cc prints the number read (%lld)
        info.append(f"NCCL INFO {key} set by environment to {shown}.")
    return Params(MappingProxyType(values), MappingProxyType(raw), MappingProxyType(sources),
                  tuple(warnings), tuple(info), cache_home=_cache_home(environ))


def _cache_home(environ: Mapping[str, str]) -> str | None:
    """$XDG_CACHE_HOME/nicksim, else ~/.cache/nicksim; None where the environment names neither (an
    API caller that passes no environment gets no folder written behind its back)."""
    base = environ.get("XDG_CACHE_HOME") or (environ.get("HOME") and os.path.join(environ["HOME"], ".cache"))
    return os.path.join(base, "nicksim") if base else None


def debug_ranks(params: Params, nranks: int) -> tuple[int, ...]:
    """The ranks NICKSIM_DEBUG_RANKS names ("all", or "0,8-15"), within 0..nranks-1."""
    text = str(params.get("NICKSIM_DEBUG_RANKS") or "all").strip().lower()
    if text == "all":
        return tuple(range(nranks))
    ranks: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not (first.isdigit() and (not dash or last.isdigit())):
            raise UsageError(f"'{text}' is not a list of ranks", "NICKSIM_DEBUG_RANKS", "all, or e.g. 0,8-15")
        ranks.update(range(int(first), min(int(last if dash else first), nranks - 1) + 1))  # only the job's
    return tuple(sorted(ranks))
