"""Weighing the evidence into a Diagnosis.

`diagnose(evidence)` weighs them, most specific first, into a Diagnosis: a `category` (one of
evidence.CATEGORIES, or `unknown` with the reason), the culprit ranks,
the collective, the evidence lines (file and line), a confidence and the next steps: the knobs
and commands that would confirm or fix it.

`format_diagnosis` writes it for people.
"""
from __future__ import annotations

import re
from dataclasses import replace

from .evidence import Diagnosis, Event, Evidence, is_entry

__all__ = ["diagnose", "format_diagnosis", "ranks_text"]


def _collective(event: Event) -> dict:
    return {"op": event.get("op"), "seq": event.get("seq"), "numel_in": event.get("numel_in"),
            "numel_out": event.get("numel_out"), "communicator": event.get("pg"),
            "timeout_ms": event.get("timeout_ms")}


def _first_collective(ev: Evidence) -> dict | None:
    """The collective of the first timeout read, where there is one."""
    return _collective(next(iter(ev.timeouts.values()))) if ev.timeouts else None


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
        seq = event.get("seq")  # before PyTorch 1.10 the watchdog names none: -1
        by_seq = groups.setdefault(event.get("pg"), {})
        by_seq.setdefault(-1 if seq is None else seq, {}).setdefault(key, set()).add(rank)
    return groups


def _fingerprint_mismatch(ev: Evidence) -> Diagnosis | None:
    """PyTorch's own desync check named the collectives ranks were about to run."""
    if not ev.fingerprints:
        return None
    by_op: dict[str, list[int]] = {}
    for rank, (op, _) in ev.fingerprints.items():
        by_op.setdefault(op, []).append(rank)
    verdicts = [e for e in ev.of("fingerprint") if "Detected mismatch between collectives" in e.text]
    if len(by_op) < 2 and verdicts:  # the same collective, other sizes or types: PyTorch's check said so
        return Diagnosis("rank-divergence", "PyTorch's collective check (TORCH_DISTRIBUTED_DEBUG=DETAIL) found the "
                         f"ranks' collectives differ: {verdicts[0].text[:300]}", (), None, tuple(verdicts[:4]),
                         "high", _DIVERGENCE_STEPS)
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


def _no_dump(ev: Evidence, pg) -> list[int]:
    """Members of the group (a Flight Recorder's pg_config) that wrote no dump, where others did."""
    members = ev.members.get(pg) or (next(iter(ev.members.values())) if len(ev.members) == 1 else ())
    return sorted(set(members) - set(ev.dumped) - set(ev.timeouts)) if ev.dumped else []


def _behind(ev: Evidence) -> Diagnosis | None:
    """Ranks that had not enqueued the collective the others hang in: behind, in their own work.
    Where Flight Recorder dumps were read, members of the group that wrote none are named with them."""
    groups = _watchdog_groups(ev)
    for pg, by_seq in groups.items():
        if not by_seq:
            continue
        top = max(by_seq)
        behind = sorted(r for r, w in ev.work.items()
                        if w.get("pg") == pg and isinstance(w.get("enqueued"), int) and w.get("enqueued") < top)
        if not behind:
            continue
        silent = _no_dump(ev, pg)
        (call, ranks), = list(by_seq[top].items())[:1]
        waiting = ev.timeouts[min(ranks)]
        evidence = tuple([waiting] + [ev.work.get(r) or ev.timeouts[r] for r in behind])[:8]
        why = (f"rank(s) {ranks_text(behind)} had not reached SeqNum {top} ({call[0]}) that rank(s) "
               f"{ranks_text(ranks)} time out in: they were still working (or stuck) before it")
        if silent:
            why += (f"; rank(s) {ranks_text(silent)} of the group wrote no Flight Recorder dump (the process died, "
                    "or hung where the watchdog could not dump)")
        return Diagnosis("straggler", why, tuple(sorted(set(behind) | set(silent))), _collective(waiting), evidence,
                         "medium", ("py-spy dump --pid PID on the culprit ranks: what they were doing instead",
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
    silent = _no_dump(ev, pg)
    missing = silent or missing
    first = ev.timeouts[min(ranks)]
    seen = f"{len(ev.timeouts)} rank(s) ({ranks_text(ev.timeouts)})"
    why = (f"every rank that reported ({seen}) times out in the same {call[0]} (SeqNum {seq}, NumelIn {call[1]}): "
           "they launched it alike, so no rank diverged; a peer that never joined or stopped moving holds them")
    if silent:
        why += (f"; rank(s) {ranks_text(silent)} of the group (its Flight Recorder pg_config) wrote no dump: the "
                "process died, or hung where the watchdog could not dump")
    elif missing:
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
    collective = _first_collective(ev)
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
                     tuple(sorted(culprits)), _first_collective(ev),
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
    failed = ev.counts.get("bootstrap", 0)
    return Diagnosis("interface-selection", f"NCCL could not set up the communicator ({failed} bootstrap "
                     f"error line(s), no 'Init COMPLETE'): {where}, where the others use {common}, so their "
                     "connections cannot reach it", ranks, None, tuple(ev.of("bootstrap")[:6]), "high",
                     _BOOTSTRAP_STEPS)


_USAGE_STEPS = (
    "one GPU per rank: torch.cuda.set_device(local_rank) (or init_process_group(device_id=...)) before the first "
    "collective; CUDA_VISIBLE_DEVICES must give each local rank its own GPU",
    "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT: each rank's cudaDev and busId",
    "ncclInvalidUsage otherwise names an API misuse: NCCL_DEBUG=WARN prints which",
)


def _invalid_usage(ev: Evidence) -> Diagnosis | None:
    """NCCL refused the call (ncclInvalidUsage, two ranks on one GPU), or nccl-tests' processes each
    ran alone (every one rank 0: built without MPI, or started without mpirun). Where a setting the
    system cannot serve explains the refusal (config lines), it is left to the configuration's rule."""
    if ev.of("config"):
        return None
    found = _from_lines(ev, "usage", "invalid-usage", "NCCL refused how it is used: {first} ({n} such line(s))",
                        _USAGE_STEPS, "high")
    if found:
        if any("Duplicate GPU" in e.text for e in ev.of("usage")):
            return replace(found, why=found.why + "; two ranks were given the same GPU, and NCCL needs one GPU "
                           "per rank")
        return found
    by_rank: dict[int, set[str]] = {}
    for rank, host, _, _ in ev.test_devices:
        by_rank.setdefault(rank, set()).add(host)
    alone = sorted(rank for rank, hosts in by_rank.items() if len(hosts) > 1)
    if alone:
        return Diagnosis("invalid-usage", f"nccl-tests lists rank {alone[0]} on {len(by_rank[alone[0]])} hosts "
                         f"({', '.join(sorted(by_rank[alone[0]]))}): each process ran on its own, not as one job",
                         (), None, (), "high",
                         ("build nccl-tests with MPI=1 (make MPI=1 MPI_HOME=...) and start it with mpirun, one "
                          "process per GPU (-g 1) or per node", "check that mpirun starts the same binary on every "
                          "host: a build without MPI prints 'nThread 1 nGpus 1' and rank 0 everywhere"))
    return None


# misc/socket.h ncclSocketType (2.12+): what each kind of socket says it is when it connects.
_SOCKET_TYPES = {1: "bootstrap", 2: "proxy", 3: "NET/Socket", 4: "NET/IB", 5: "RAS"}


def _transport_mismatch(ev: Evidence) -> Diagnosis | None:
    """A connection whose two ends run different transports: one rank on IB, its peer on sockets."""
    networks = {}
    for source, name in ev.networks.items():
        networks.setdefault(name, []).append(source)
    if not ev.of("transport") and len(networks) < 2:
        return None
    why = "the ranks do not run the same network transport"
    wrong = next((m for m in (re.search(r"wrong type (\d+) != (\d+)", e.text) for e in ev.of("transport")) if m),
                 None)
    if wrong:  # socket.cc: "wrong type <the peer's> != <this socket's>"; socket.h numbers the types
        theirs, ours = (_SOCKET_TYPES.get(int(t), f"type {t}") for t in wrong.groups())
        why += (f": {ev.of('transport')[0].text[:200]}: this side listens for {ours} connections and its peer "
                f"connected as {theirs}")
    if len(networks) > 1:
        why += "; " + "; ".join(f"{name} on {', '.join(sorted(srcs)[:4])}" for name, srcs in sorted(networks.items()))
    return Diagnosis("transport-mismatch", why, tuple(sorted({e.rank for e in ev.of("transport")
                                                               if e.rank is not None})), None,
                     tuple(ev.of("transport")[:6]), "high",
                     ("make InfiniBand/RoCE work on every node (ibv_devinfo; the same rdma-core and NCCL_IB_HCA), or "
                      "NCCL_IB_DISABLE=1 on every node: NCCL must pick the same network everywhere",
                      "the same NCCL_NET / NCCL_NET_PLUGIN (and plugin library) on every node",
                      "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET: 'Using network ...' on each rank"))


def _resource(ev: Evidence) -> Diagnosis | None:
    """A rank ran out of something NCCL needs: GPU or host memory, /dev/shm, registrable memory, files."""
    events = ev.of("resource")
    if not events:
        return None
    text = " ".join(e.text for e in events)
    steps = []
    if any(w in text for w in ("shared memory segment", "posix_fallocate", "/dev/shm", "shm_open", "shm)")):
        steps += ["/dev/shm is too small (a container's default is 64 MB) or not writable: docker run --shm-size=1g "
                  "(or --ipc=host), Kubernetes an emptyDir of medium Memory on /dev/shm; df -h /dev/shm",
                  "NCCL_SHM_DISABLE=1 avoids the shared-memory transport, at a cost"]
    if "out of memory" in text.lower() or "OutOfMemory" in text or "MemoryAllocation" in text:
        steps += ["the culprit rank ran out of GPU memory and stopped; its peers then wait or see their connections "
                  "close: nvidia-smi for other processes on its GPU, a smaller batch, "
                  "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                  "NCCL's own buffers: NCCL_BUFFSIZE and the channel count (NCCL_MAX_NCHANNELS) take GPU memory "
                  "per peer"]
    if "ibv_reg" in text or "Cannot allocate memory" in text or "MEMLOCK" in text.upper():
        steps += ["registering memory with the NIC failed: ulimit -l unlimited where the job starts (container "
                  "--ulimit memlock=-1, systemd LimitMEMLOCK=infinity)",
                  "an NCCL_BUFFSIZE larger than the default registers more memory per peer: unset it"]
    if "Too many open files" in text:
        steps += ["ulimit -n: NCCL's sockets and shared-memory files need a descriptor each"]
    steps.append("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,SHM,NET: which allocation failed, on which rank")
    culprits = tuple(sorted({e.rank for e in events if e.rank is not None}))
    return Diagnosis("resource-exhaustion", f"{ev.counts.get('resource', 0)} line(s) say a rank ran out of a resource "
                     f"NCCL needs: {events[0].text[:200]}", culprits,
                     _first_collective(ev),
                     tuple(events[:6]) + tuple(ev.of("peer_lost")[:2]), "high", tuple(steps))


_P2P_STEPS = (
    "run CUDA's p2pBandwidthLatencyTest: a GPU pair whose latency is milliseconds (not microseconds) has no "
    "working peer-to-peer path",
    "PCIe ACS redirects peer traffic through the root complex (and an IOMMU can drop it): disable ACS on the PCIe "
    "switches (setpci, or the BIOS) and boot with iommu=pt or intel_iommu=off / amd_iommu=off",
    "NCCL_P2P_DISABLE=1 confirms it (the hang goes away, slower, through shared memory); on virtual machines "
    "NCCL_P2P_LEVEL=SYS or the hypervisor's P2P setting",
    "for a NIC's RDMA into GPU memory (IB completion error 4), NCCL_NET_GDR_LEVEL=LOC confirms it (GPUDirect "
    "RDMA off, through host memory)",
    "nvidia-smi topo -p2p r: what the driver reports for each pair",
)
# CUDA's p2pBandwidthLatencyTest prints GPU-to-GPU latencies of 1-30 us over PCIe and NVLink; a pair
# at a millisecond and more has no working peer path (its writes time out and are retried).
_P2P_BROKEN_US = 1000.0


def _p2p_latency(ev: Evidence) -> Diagnosis | None:
    """CUDA refused peer access between GPUs, or p2pBandwidthLatencyTest measured milliseconds between them."""
    refused = ev.of("p2p")
    if refused:
        what = ("a NIC's RDMA into GPU memory fails with a local protection error (IB completion error 4): PCIe "
                "ACS or an IOMMU blocks GPUDirect RDMA" if "completion" in refused[0].text else
                "CUDA has no peer-to-peer path between the GPUs")
        return Diagnosis("p2p-blocked", f"{what}: {refused[0].text[:200]}",
                         tuple(sorted({e.rank for e in refused if e.rank is not None})), None, tuple(refused[:4]),
                         "high", _P2P_STEPS)
    broken = [e for e in ev.of("p2p_latency") if e.get("worst_us", 0) >= _P2P_BROKEN_US]
    if not broken:
        return None
    return Diagnosis("p2p-blocked", f"{broken[0].text}: GPU peer-to-peer takes milliseconds where PCIe takes "
                     "microseconds, so NCCL's P2P transport stalls", (), None, tuple(broken[:2]), "high", _P2P_STEPS)


def _first_call_hang(ev: Evidence) -> Diagnosis | None:
    """Every rank hangs in the first collective of its communicator, with no error on any: nothing ever
    moved, so the data path is what fails. On one host that is GPU peer-to-peer (ACS, IOMMU, a VM)."""
    if len(ev.hosts) > 1 or len({h for _, h, _, _ in ev.test_devices}) > 1:
        return None
    if ev.timeouts:
        first = all(e.get("seq") is not None and e.get("seq") <= 1 for e in ev.timeouts.values()) or \
            (ev.work and all(w.get("completed") == -1 for w in ev.work.values()))
        if not first:
            return None
        evidence = tuple(ev.timeouts.values())[:6]
        what = "the first collective of the communicator (SeqNum 1: nothing completed before it) hangs"
    elif len(ev.test_devices) >= 2 and not ev.test_results and ev.init_complete >= 0 and \
            not ev.timeouts and not ev.of("out_of_bounds"):
        evidence = ()
        what = (f"nccl-tests on {len(ev.test_devices)} GPUs of one host never printed a result: the first "
                "collective hangs")
    else:
        return None
    return Diagnosis("p2p-blocked", f"{what}, on one host, with no NCCL error anywhere: the data path between the "
                     "GPUs does not move, the usual cause being PCIe peer-to-peer blocked by ACS or an IOMMU",
                     (), _collective(evidence[0]) if evidence else None, evidence, "medium",
                     _P2P_STEPS + ("if instead a rank had not reached the call (rank 0 preprocessing while the others "
                                   "wait at a barrier), its log shows it busy: that is a straggler",))


_SPECIAL_IFACE = re.compile(r"^(?:docker|virbr|veth|br-|cni|flannel|cali|tun|tap|wg|tailscale|zt|ib)|^lo$")


def _special(iface: str, address: str) -> bool:
    """An interface NCCL should rarely bootstrap over: container bridges and veths, tunnels, IPoIB,
    loopback, or an address that is only link-local (169.254/16, fe80::/10)."""
    return bool(_SPECIAL_IFACE.match(iface)) or address.startswith("169.254.") or address.lower().startswith("fe80")


def _interface_choice(ev: Evidence, failed: bool) -> Diagnosis | None:
    """NCCL's sockets use an interface the other hosts cannot reach through: say which, and how to pick."""
    odd = _odd_interfaces(ev)
    if odd:
        return odd
    named = [(who, iface, addr) for who, (iface, addr) in ev.ifaces.items()] + \
        [(who, iface, addr) for who, listed in ev.socket_ifaces.items() for iface, addr in listed]
    hosts = len(ev.hosts)
    special = [(who, iface, addr) for who, iface, addr in named if _special(iface, addr) and
               (iface != "lo" or hosts > 1)]
    unset_ifname = ev.of("interface") + ev.of("loopback")
    if not special and not unset_ifname:
        return None
    if ev.of("loopback") and not special:
        why = ("the host's name resolved to loopback, so its peers are told to connect to 127.0.0.1: "
               f"{ev.of('loopback')[0].text[:200]}")
    elif special:
        who, iface, addr = special[0]
        why = (f"NCCL uses {iface} ({addr}) for its sockets, an interface the other hosts usually cannot reach "
               "(a container bridge or veth, a tunnel, IPoIB, loopback or a link-local address)")
    else:
        why = f"NCCL found no usable socket interface: {unset_ifname[0].text[:200]}"
    failures = ev.of("bootstrap") + ev.of("peer_lost")
    if failed and failures:
        why += f"; the connections then fail ({failures[0].text[:120]})"
    return Diagnosis("interface-selection", why, (), None,
                     tuple(unset_ifname[:2]) + tuple(ev.of("bootstrap")[:4]), "high" if failed else "medium",
                     ("NCCL_SOCKET_IFNAME=<the interface the hosts reach each other on> (ip -br addr; ^docker,lo "
                      "excludes), the same on every rank; it must exist on every host",
                      "NCCL_IB_HCA for the data path if the IB devices are the ones to avoid",
                      "each host's name must resolve to an address the others reach (hostname -i, /etc/hosts), "
                      "not loopback; GLOO_SOCKET_IFNAME likewise for PyTorch's Gloo groups",
                      "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,NET: 'Bootstrap : Using' and "
                      "'NET/Socket : Using' on every rank"))


def _peer_lost(ev: Evidence) -> Diagnosis | None:
    """Ranks whose connections were closed under them. Where a rank's process died (a signal, killed),
    that rank is the culprit and the others only saw it go; a connection closed from this very host
    is the host's own doing (a firewall or security software on local sockets); otherwise the network."""
    died, lost = ev.of("died"), ev.of("peer_lost")
    if not died and not lost:
        return None
    if died:
        culprits = tuple(sorted({e.rank for e in died if e.rank is not None}))
        then = "; the others then saw their connections to it close" if lost else ""
        return Diagnosis("stuck-peer", f"a process died ({died[0].text[:200]}){then}: the rank that died is the "
                         "cause, the ones that report closed connections only saw it go", culprits,
                         _first_collective(ev),
                         tuple(died[:4]) + tuple(lost[:4]), "high" if culprits else "medium",
                         ("the culprit's own log and exit code: a Python exception, the kernel's OOM killer "
                          "(dmesg | grep -i -e oom -e killed), a segfault (core dump)",
                          "torchrun's error summary names the first rank that failed (its 'root cause')") +
                         _STUCK_STEPS[1:2])
    local = [e for e in lost if re.search(r"localhost|127\.0\.0\.1|::1\b", e.text)]
    if local:
        return Diagnosis("bootstrap", f"a connection within this very host was closed ({local[0].text[:200]}): "
                         "no network and no other host is involved, so something on the host drops NCCL's local "
                         "sockets", (), None, tuple(local[:4]), "medium",
                         ("security or endpoint-protection software (web or network protection) and local firewall "
                          "rules can reset local TCP connections: stop them and try again",) + _BOOTSTRAP_STEPS[1:])
    closed = [e for e in lost if re.search(r"Connection closed by (?:remote )?peer", e.text)]
    if closed:  # socket.cc: recv returned 0, an orderly close (FIN), which a dying process's kernel sends
        peer = re.search(r"Connection closed by (?:remote )?peer (\S+?)(?:<|\s|$)", closed[0].text)
        return Diagnosis("stuck-peer", f"the peer closed its connections in order ({closed[0].text[:200]}): an "
                         "end of stream, not a reset or a timeout, is what a host sends when the process at that "
                         f"end exits, so the process on {peer.group(1) if peer else 'the peer'} stopped (killed, "
                         "crashed or exited) and the ranks that report it only saw it go", (),
                         _first_collective(ev), tuple(lost[:6]),
                         "medium", ("the log of the process on the host named, and its exit: dmesg | grep -i -e oom "
                                    "-e killed, the scheduler's record (OOM killer, preemption, a node drain)",
                                    "torchrun's error summary names the first rank that failed (its 'root cause')")
                         + _STUCK_STEPS[1:2])
    return Diagnosis("fabric", f"connections were closed or reset under the ranks ({lost[0].text[:200]}) and no "
                     "rank's log shows its process dying: the network dropped them, or a peer died without a word",
                     (), _first_collective(ev), tuple(lost[:6]),
                     "low", ("collect every rank's log: a rank that died (exception, OOM killer, signal) is the "
                             "cause if there is one",
                             "ibstat / ibv_devinfo and the switch's port counters on the hosts named: links down or "
                             "flapping",
                             "NCCL_IB_TIMEOUT=22 NCCL_IB_RETRY_CNT=7 ride out a congested fabric",
                             "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET: which peer each connection goes to"))


def _unsupported(ev: Evidence) -> Diagnosis | None:
    return _from_lines(ev, "unsupported", "config-mismatch", "this NCCL build does not support the GPU: {first} "
                       "(its kernels need more than the GPU offers; a release that predates the GPU)",
                       ("use an NCCL release that supports the GPU's architecture (the release notes list it), "
                        "e.g. pip install -U nvidia-nccl-cu12, or the one the framework's newest build ships",
                        "NCCL_DEBUG=INFO: 'NCCL version' and 'cudaDriverVersion' on every rank"), "high")


def _diverging_calls(ev: Evidence) -> Diagnosis | None:
    """NCCL's own COLL lines: at the same operation count, ranks of a communicator called different
    collectives or passed different counts or types (the sizes must agree, or the kernels never match)."""
    by_size: dict[tuple, list] = {}
    for call in ev.last_calls:
        by_size.setdefault((call.get("nranks"), call.get("opcount")), []).append(call)
    for (_, opcount), calls in sorted(by_size.items(), key=lambda kv: str(kv[0])):
        if len(calls) < 2:
            continue
        kinds: dict[tuple, list] = {}
        for call in calls:
            kinds.setdefault((call.get("op"), call.get("count"), call.get("datatype")), []).append(call)
        if len(kinds) < 2:
            continue
        ordered = sorted(kinds.items(), key=lambda kv: -len(kv[1]))
        odd = [c for _, cs in ordered[1:] for c in cs]
        described = "; ".join(f"{op} count {count} datatype {dt} on {len(cs)} rank(s) "
                              f"({', '.join(c.get('source') for c in cs[:3])})" for (op, count, dt), cs in ordered)
        return Diagnosis("rank-divergence", f"NCCL's COLL lines at opCount {opcount}: {described}. Every rank must "
                         "pass the same collective, count and datatype", tuple(sorted({c.rank for c in odd
                                                                                       if c.rank is not None})),
                         None, tuple(odd[:3]) + tuple(ordered[0][1][:3]), "high", _DIVERGENCE_STEPS)
    return None


def _seq_divergence(ev: Evidence) -> Diagnosis | None:
    """Ranks of one group timed out at different SeqNums: a collective completes on all or none of
    them, so the ranks at the lower SeqNum issued a different number of collectives."""
    for pg, by_seq in _watchdog_groups(ev).items():
        if len(by_seq) < 2 or -1 in by_seq:
            continue
        top = max(by_seq)
        low = sorted(r for seq, calls in by_seq.items() if seq < top for rs in calls.values() for r in rs)
        high = sorted(r for calls in by_seq[top].values() for r in calls)
        where = f" of process group {pg}" if pg else ""
        return Diagnosis("rank-divergence", f"ranks{where} time out at different SeqNums: rank(s) {ranks_text(low)} "
                         f"below SeqNum {top}, where rank(s) {ranks_text(high)} time out. A collective completes on "
                         "every rank of its group or on none, so these ranks issued different numbers of "
                         "collectives (one skipped one, or ran an extra)", tuple(low),
                         _collective(ev.timeouts[low[0]]), tuple(ev.timeouts[r] for r in (low + high)[:8]), "medium",
                         _DIVERGENCE_STEPS)
    return None


_WAIT_STEPS = (
    "a rank doing work the others do not (preprocessing or tokenising on the main process, evaluation or "
    "checkpoint saving on rank 0) keeps them waiting past the timeout: do it before init_process_group, on every "
    "rank, or inside main_process_first with a longer timeout",
    "raise the timeout where the work is known to be long: init_process_group(timeout=timedelta(hours=2)), "
    "TrainingArguments(ddp_timeout=...), deepspeed.init_distributed(timeout=...)",
    "py-spy dump --pid PID on the culprit rank: what it is doing while the others wait",
)


def _waiting_for_main(ev: Evidence) -> Diagnosis | None:
    """The others wait for one rank that has not come: at a barrier (PyTorch's is an all_reduce of one
    element), in a broadcast from rank 0 that rank 0 has not joined, or for the communicator's id the
    creating rank has not published. The rank they wait for is working (or stuck) outside NCCL."""
    waits = ev.of("uid_wait")
    if waits:
        culprits = tuple(sorted({e.get("waited_for") for e in waits}))
        ranks = {e.rank for e in waits if e.rank is not None}
        waiting = f"rank(s) {ranks_text(ranks)}" if ranks else "a rank"
        return Diagnosis("straggler", f"{waiting} waited for rank(s) {ranks_text(culprits)} to create the "
                         f"communicator and gave up: {waits[0].text[:200]}", culprits, None, tuple(waits[:4]),
                         "medium", _WAIT_STEPS)
    if not ev.timeouts or len({(e.get("op"), e.get("seq")) for e in ev.timeouts.values()}) != 1:
        return None
    first = next(iter(ev.timeouts.values()))
    op, numel = str(first.get("op")).upper(), first.get("numel_in")
    barrier = op == "ALLREDUCE" and numel == 1
    if not (barrier or op == "BROADCAST") or (op == "BROADCAST" and 0 in ev.timeouts):
        return None  # a broadcast whose root (rank 0) is there too does not wait for it
    world = max(ev.nranks) if ev.nranks else None
    missing = sorted(set(range(world)) - set(ev.timeouts)) if world else ([0] if 0 not in ev.timeouts else [])
    what = "a barrier (an all_reduce of one element)" if barrier else "a broadcast from rank 0"
    why = (f"rank(s) {ranks_text(ev.timeouts)} time out in {what}, and " +
           (f"rank(s) {ranks_text(missing)} never joined it: it was still working, or stuck, outside NCCL"
            if missing else "the ranks that did not report kept them waiting"))
    return Diagnosis("straggler", why, tuple(missing), _collective(first),
                     tuple(ev.timeouts[r] for r in sorted(ev.timeouts))[:6], "medium", _WAIT_STEPS)


def _calls_behind(ev: Evidence) -> Diagnosis | None:
    """NCCL's COLL lines: in a communicator (its rank count), a few ranks' last call came earlier than
    the rest's (a lower opCount): they never issued the calls the others are in."""
    by_size: dict = {}
    for call in ev.last_calls:
        by_size.setdefault(call.get("nranks"), []).append(call)
    for calls in by_size.values():
        top = max(c.get("opcount") for c in calls)
        behind = [c for c in calls if c.get("opcount") < top]
        if not behind or len(behind) * 2 >= len(calls):
            continue
        lowest = min(c.get("opcount") for c in behind)
        who = ", ".join(c.get("source") for c in behind[:4])
        return Diagnosis("straggler", f"NCCL's COLL lines: {len(calls) - len(behind)} rank(s) issued calls up to "
                         f"opCount {top:x}, while {len(behind)} ({who}) stopped at {lowest:x}: they never issued the "
                         "calls the others wait in (still working, or stuck, outside NCCL)",
                         tuple(sorted({c.rank for c in behind if c.rank is not None})), None,
                         tuple(behind[:4]) + tuple(c for c in calls if c.get("opcount") == top)[:2], "medium",
                         _WAIT_STEPS)
    return None


def _desync_report(ev: Evidence) -> Diagnosis | None:
    """PyTorch's own desync report (TORCH_NCCL_DESYNC_DEBUG=1) lists the ranks at the lowest SeqNum any
    rank is at: those that finished it and never joined the next are still working before it, those
    in it while others are ahead are stuck in it, and those that never joined any are gone. Where every
    rank is in the same collective, nobody is out of step and the report says nothing more."""
    lines = ev.of("desync")
    never = sorted({r for e in lines if e.get("role") == "never" for r in e.get("ranks")})
    if never:
        return Diagnosis("stuck-peer", f"PyTorch's desync report: rank(s) {ranks_text(never)} never joined any "
                         "collective (dead, or stuck before the first)", tuple(never), None, tuple(lines[:4]), "high",
                         _STUCK_STEPS)
    finished = sorted({r for e in lines if e.get("role") == "finished" for r in e.get("ranks")})
    joined = sorted({r for e in lines if e.get("role") == "joined" for r in e.get("ranks")})
    seq = next((e.get("seq") for e in lines if e.get("seq") is not None), None)
    if finished:
        return Diagnosis("straggler", f"PyTorch's desync report: rank(s) {ranks_text(finished)} finished collective "
                         f"#{seq} and never joined the next, which the others are in: they were still working (or "
                         "stuck) before it", tuple(finished), None, tuple(lines[:4]), "high", _WAIT_STEPS)
    others = (set(ev.timeouts) | set(ev.work)) - set(joined)
    if joined and others:
        return Diagnosis("stuck-peer", f"PyTorch's desync report: rank(s) {ranks_text(joined)} are still in "
                         f"collective #{seq}, which the others finished: the culprits are stuck in it (a lagging "
                         "GPU, a dead peer connection, or a mismatched call)", tuple(joined), None, tuple(lines[:4]),
                         "high", _STUCK_STEPS)
    return None


def diagnose(ev: Evidence) -> Diagnosis:
    """The most specific diagnosis the evidence supports (see the module docstring)."""
    for rule in (_data_corruption, _fingerprint_mismatch, _divergence, _seq_divergence, _diverging_calls,
                 _mixed_communicators, _desync_report, _invalid_usage, _transport_mismatch, _resource, _p2p_latency,
                 _unsupported):
        found = rule(ev)
        if found:
            return found
    fabric = _from_lines(ev, "fabric", "fabric", "{n} line(s) report a network or NVLink failure: {first}",
                         ("ibstat / ibv_devinfo on the hosts named: a port down or flapping",
                          "NCCL_IB_TIMEOUT=22 and NCCL_IB_RETRY_CNT=7 ride out a congested fabric; retry "
                          "errors that remain are a link or cable",
                          "on RoCE, the GID index must select the RoCE v2 address every host routes "
                          "(show_gids; NCCL_IB_GID_INDEX=3 is common), and the same MTU end to end",
                          "dmesg | grep -i -e xid -e mlx: driver-level errors (Xid 74/79: NVLink, GPU off the bus)",
                          "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET: which NIC and peer each connection uses"), "high")
    if fabric:
        return fabric
    if (ev.of("bootstrap") or ev.of("interface") or ev.of("loopback")) and ev.init_complete == 0:
        chosen = _interface_choice(ev, failed=True)
        if chosen:
            return chosen
        if not ev.of("died"):
            return _from_lines(ev, "bootstrap", "bootstrap", "NCCL could not set up the communicator: {first} ({n} "
                               "such line(s), and no rank logged 'Init COMPLETE')", _BOOTSTRAP_STEPS, "high")
    for rule in (_peer_lost, _config_mismatch, _ras, _not_launched, _behind, _first_call_hang, _waiting_for_main,
                 _stuck_peer, _calls_behind):
        found = rule(ev)
        if found:
            return found
    chosen = _interface_choice(ev, failed=False)
    if chosen:
        return chosen
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
