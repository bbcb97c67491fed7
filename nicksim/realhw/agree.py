"""Every rank must run the same plan: a digest of each rank's, compared across the job.

Each rank builds its System, searches and plans on its own, as NCCL's ranks do; a rank whose
environment differs (another NCCL_PROTO, NCCL_ALGO or NCCL_BUFFSIZE), or that was asked for another
call (another reduction or root), would build another plan, and the job would hang or corrupt data. `plan_fingerprint(plan)` is what a rank tells the others: the
plan's decisions and a digest of its whole per-channel split; `check_same_plan(fingerprints)` raises
PlanMismatchError naming the ranks that differ from rank 0 and the decisions the first of them
differs in.
"""
from __future__ import annotations

import hashlib
import json

from ..errors import NickSimError
from ..plan.chunking import Plan

__all__ = ["PlanMismatchError", "plan_fingerprint", "check_same_plan"]

# What a difference is reported by: the call, the release and NCCL's choice first; what follows
# from them (channels, threads, buffer steps) only where those agree.
CALL = ("collective", "count", "dtype", "redop", "root")
DECISIONS = (*CALL, "nccl_version", "algorithm", "protocol")
DERIVED = ("n_channels", "n_threads", "step_nbytes", "chunk_steps", "slice_steps")


class PlanMismatchError(NickSimError):
    """Ranks built different plans for the same call."""

    kind = "plan-mismatch"


def plan_fingerprint(plan: Plan) -> dict:
    """The plan's decisions, and a digest of them with every channel's part and chunk."""
    decisions = {"collective": plan.call.collective, "count": plan.call.count, "dtype": plan.call.dtype,
                 "redop": plan.call.redop, "root": plan.call.root, "algorithm": plan.algorithm, "protocol": plan.protocol, "n_channels": plan.n_channels,
                 "n_threads": plan.n_threads, "step_nbytes": plan.step_nbytes, "chunk_steps": plan.chunk_steps,
                 "slice_steps": plan.slice_steps, "nccl_version": f"2.{plan.version_minor}"}
    parts = [[p.channel, p.offset, p.count, p.chunk_nbytes] for p in plan.parts]
    text = json.dumps([decisions, parts, plan.striped], separators=(",", ":"))
    return {"decisions": decisions, "digest": hashlib.sha256(text.encode()).hexdigest()}


def check_same_plan(fingerprints: list[dict]) -> None:
    """Raise PlanMismatchError unless every rank's fingerprint is rank 0's."""
    mine = fingerprints[0]
    odd = [rank for rank, fp in enumerate(fingerprints) if fp["digest"] != mine["digest"]]
    if not odd:
        return
    first = odd[0]
    theirs = fingerprints[first]["decisions"]
    fields = [k for k in DECISIONS if theirs.get(k) != mine["decisions"].get(k)]
    fields = fields or [k for k in DERIVED if theirs.get(k) != mine["decisions"].get(k)]
    ranks = ", ".join(str(r) for r in odd[:8]) + (f" and {len(odd) - 8} more" if len(odd) > 8 else "")
    subject = "rank" if len(odd) == 1 else "ranks"
    what = "; ".join(f"{k} {theirs.get(k)} on rank {first}, {mine['decisions'].get(k)} on rank 0" for k in fields)
    what = what or "the same decisions but another split of the call over channels"
    valid = "the same call on every rank (collective, -b/-e, -d, -o, -r)" if set(fields) & set(CALL) \
        else "the same NCCL_* settings on every rank"
    raise PlanMismatchError(f"{subject} {ranks} built another plan than rank 0: {what}", "plan", valid)
