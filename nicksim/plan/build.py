"""The one builder every engine uses: a call's plan on a job, and every rank's programs for it.

`call_plan(job, call)` is NCCL's plan of any call: the scheduler's Plan for a collective
(chunking.plan_call on the job's communicator), the point-to-point record for sendrecv and
alltoall (p2p.P2pSetup.plan_record). `job_programs(job, plan, ranks)` is every rank's programs (or
those of `ranks`): the one place where a job's rings, trees, NVLS heads and CollNet heads meet a
plan. The DES and the real backend both take their programs from here, so what one engine runs is
what the other runs. `job` is a nicksim.job.Job (read, never imported: the job sits above the plan).
"""
from __future__ import annotations

from typing import Iterable

from ..calls import Call
from .chunking import Plan, plan_call
from .p2p import p2p_setup
from .programs import ChannelProgram, rank_programs

__all__ = ["call_plan", "job_programs"]


def call_plan(job, call: Call) -> Plan:
    """NCCL's plan of `call` on `job`: a point-to-point record (algorithm "P2P") for sendrecv and
    alltoall, the scheduler's Plan for the collectives."""
    if call.info.p2p:
        setup = p2p_setup(job)
        return setup.plan_record(call, setup.programs(call, 0))
    return plan_call(job.comm, call)


def job_programs(job, plan: Plan, ranks: Iterable[int] | None = None, chunks_per_prim: int = 1
                 ) -> dict[int, tuple[ChannelProgram, ...]]:
    """rank -> its programs for `plan` (every rank of the job, or `ranks`). A point-to-point plan's
    primitives may each cover `chunks_per_prim` consecutive chunks (the DES's coarse chunks)."""
    ranks = range(job.nranks) if ranks is None else ranks
    if plan.algorithm == "P2P":
        setup = p2p_setup(job)
        return {r: setup.programs(plan.call, r, chunks_per_prim) for r in ranks}
    algorithm = plan.algorithm
    trees = job.tree_links() if algorithm == "Tree" else {}
    collnet = job.collnet_layout() if algorithm.startswith("CollNet") else None
    nvls = job.nvls_layout() if algorithm in ("NVLS", "NVLSTree") else None
    return {r: rank_programs(plan, job.channels.rings, trees, r, nvls, collnet) for r in ranks}
