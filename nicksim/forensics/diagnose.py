"""Weighing the evidence into a Diagnosis.

`diagnose(evidence)` weighs them, most specific first, into a Diagnosis: a `category`
(`data-corruption`, `rank-divergence`, `mixed-communicators`, `fabric`, `bootstrap`,
`config-mismatch`, `straggler`, `stuck-peer`, or `unknown` with the reason), the culprit ranks,
the collective, the evidence lines (file and line), a confidence and the next steps: the knobs
and commands that would confirm or fix it.

`format_diagnosis` writes it for people.
"""
from __future__ import annotations

from .evidence import Diagnosis, Event, Evidence, is_entry

__all__ = ["diagnose", "format_diagnosis", "ranks_text"]


def _collective(event: Event) -> dict:
    return {"op": event.get("op"), "seq": event.get("seq"), "numel_in": event.get("numel_in"),
            "numel_out": event.get("numel_out"), "communicator": event.get("pg"),
            "timeout_ms": event.get("timeout_ms")}


def ranks_text(ranks) -> str:
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
    described = "; ".join(f"{op} on rank(s) {ranks_text(ranks)}" for op, ranks in ordered)
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
            described = "; ".join(f"{op} (NumelIn {numel}) on rank(s) {ranks_text(ranks)}"
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
    parts = "; ".join(f"process group {pg} on rank(s) {ranks_text(ranks_of[pg])}" for pg in sorted(named, key=str))
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
        behind = sorted(r for r, w in ev.work.items()
                        if w.get("pg") == pg and isinstance(w.get("enqueued"), int) and w.get("enqueued") < top)
        behind += sorted(r for seq, calls in by_seq.items() if seq < top for rs in calls.values() for r in rs
                         if r not in behind)
        if behind:
            (call, ranks), = list(by_seq[top].items())[:1]
            waiting = ev.timeouts[min(ranks)]
            evidence = tuple([waiting] + [ev.work.get(r) or ev.timeouts[r] for r in behind])[:8]
            return Diagnosis("straggler", f"rank(s) {ranks_text(behind)} had not reached SeqNum {top} ({call[0]}) "
                             f"that rank(s) {ranks_text(ranks)} time out in: they were still working (or stuck) "
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
        return Diagnosis("stuck-peer", f"NCCL's RAS misses rank(s) {ranks_text(ev.ras_missing)} from the "
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
    return Diagnosis("stuck-peer", f"rank(s) {ranks_text(culprits)} enqueued {first.get('op')} (SeqNum "
                     f"{first.get('seq')}) but never started it, while rank(s) {ranks_text(started)} run it and "
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
    seen = f"{len(ev.timeouts)} rank(s) ({ranks_text(ev.timeouts)})"
    why = (f"every rank that reported ({seen}) times out in the same {call[0]} (SeqNum {seq}, NumelIn {call[1]}): "
           "they launched it alike, so no rank diverged; a peer that never joined or stopped moving holds them")
    if missing:
        why += f"; rank(s) {ranks_text(missing)} of {world} did not report a timeout"
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


def format_diagnosis(d: Diagnosis) -> list[str]:
    """The diagnosis for people: verdict, culprits, collective, why, evidence, next steps."""
    out = [f"category: {d.category} (confidence {d.confidence})",
           f"culprit ranks: {ranks_text(d.culprit_ranks) if d.culprit_ranks else 'not named by the evidence'}"]
    if d.collective:
        c = d.collective
        pg = f" in process group {c['communicator']}" if c.get("communicator") else ""
        out.append(f"collective: {c['op']} SeqNum {c['seq']} NumelIn {c['numel_in']} NumelOut {c['numel_out']}{pg}")
    out.append(f"why: {d.why}")
    if d.evidence:
        out.append("evidence:")
        out += [f"  {e.file}{' entry ' if is_entry(e) else ':'}{e.line}: {e.text[:300]}" for e in d.evidence]
    if d.waits:
        out.append("waits (the plan recomputed on the system given):")
        out += [f"  {line}" for line in d.waits]
    out.append("next steps:")
    out += [f"  - {step}" for step in d.next_steps]
    return out
