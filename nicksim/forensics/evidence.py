"""What a diagnosis is made of and what it says: Event (one line or dump entry that bears on it),
Evidence (everything the files held, as read.py keeps it) and Diagnosis (the verdict).
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CATEGORIES", "Event", "Evidence", "Diagnosis", "is_entry"]

# What went wrong, as the people who fix it tell the causes apart (each with its own next steps).
CATEGORIES = ("rank-divergence", "mixed-communicators", "stuck-peer", "straggler", "bootstrap", "interface-selection",
              "transport-mismatch", "fabric", "p2p-blocked", "resource-exhaustion", "config-mismatch", "invalid-usage",
              "data-corruption", "unknown")


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
    last_calls: tuple = ()  # NCCL's COLL lines: each process's last call per communicator (Event kind "call")
    socket_ifaces: dict = field(default_factory=dict)  # rank (else process) -> NET/Socket's ((interface, address), ...)
    networks: dict = field(default_factory=dict)  # process -> the network NCCL runs ("IB", "Socket", a plugin's)
    test_devices: tuple = ()  # nccl-tests' "Using devices" list: (rank, host, device, GPU name)
    test_results: int = 0  # nccl-tests runs that printed their summary (finished)
    hosts: tuple[str, ...] = ()  # the hosts NCCL's lines come from
    members: dict = field(default_factory=dict)  # process group -> its ranks (Flight Recorder's pg_config)
    dumped: tuple[int, ...] = ()  # ranks whose Flight Recorder dump was read

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
                "evidence": [{"file": e.file, ("entry" if is_entry(e) else "line"): e.line, "text": e.text}
                             for e in self.evidence],
                "next_steps": list(self.next_steps)}


def is_entry(event: Event) -> bool:
    """Whether the event is a Flight Recorder entry (numbered by entry, not by line)."""
    return event.kind == "flight_recorder" or bool(event.get("entry"))

