"""Where each blocked rank waits, by the plan recomputed on a known system.

`with_waits(diagnosis, evidence, job)` runs the calls the logs show again on the DES and adds, per
blocked rank, the channel, primitive and peer it waits on.
"""
from __future__ import annotations

from .diagnose import ranks_text
from .evidence import Diagnosis, Evidence

__all__ = ["with_waits"]


def with_waits(d: Diagnosis, ev: Evidence, job) -> Diagnosis:
    """`d` with `waits`: the evidence's calls run again on `job` (the DES, every rank its call, the
    culprits of a rank that never joined none) to name, per blocked rank, the channel, primitive
    and peer it waits on. Unchanged where there is no collective to run, or it cannot be run."""
    from dataclasses import replace
    from ..calls import Call, torch_collective
    from ..model.engine import des_setup, simulate_sequences
    if not ev.timeouts:
        return d
    if max(ev.timeouts) >= job.nranks:
        return replace(d, waits=(f"the logs name rank {max(ev.timeouts)}; the system given has {job.nranks} ranks: "
                                 "give its --nodes and --gpus-per-node",))
    calls = {}
    for rank, event in sorted(ev.timeouts.items()):
        known = torch_collective(str(event.get("op")))
        count = event.get("numel_in") if known and known.torch_count == "in" else event.get("numel_out")
        if not known or known.p2p or not count:
            return replace(d, waits=(f"{event.get('op')} is not a collective the plans cover",))
        call = Call(known.name, int(count), "float", "sum" if known.reduces else "none", 0 if known.rooted else -1,
                    job.nranks)
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
            line = f"not in the call (the logs show no such call on them): rank(s) {ranks_text(absent)}"
        lines.append(line)
    return replace(d, waits=tuple(lines))


