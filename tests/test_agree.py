"""Every rank's plan compared: in process, and across real processes whose environments differ."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nicksim.calls import call_for_size
from nicksim.tuning.choose import forced_choice
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.plan.chunking import plan_call
from nicksim.realhw.agree import PlanMismatchError, check_same_plan, plan_fingerprint
from nicksim.realhw.runner import free_port
from test_bootstrap import GUARD_S


def fingerprint(protocol: str | None = None, nbytes: int = 1 << 20, env: dict | None = None):
    job = load_job(JobSpec(system="dgx-h100", nccl_version="2.30"), read_params(env or {}))
    call = call_for_size("all_reduce", nbytes, "float", "sum", 0, job.nranks)
    choice = forced_choice(job.comm, call, "Ring", protocol) if protocol else None
    return plan_fingerprint(plan_call(job.comm, call, choice))


def test_the_same_plan_on_every_rank_passes():
    check_same_plan([fingerprint("LL")] * 4)


def test_a_rank_with_another_protocol_is_named_with_the_difference():
    with pytest.raises(PlanMismatchError, match=r"ranks 2, 3 built another plan than rank 0: protocol LL128 on "
                                                r"rank 2, LL on rank 0 \(valid: the same NCCL_\* settings"):
        check_same_plan([fingerprint("LL")] * 2 + [fingerprint("LL128")] * 2)


def test_another_size_is_named_too():
    with pytest.raises(PlanMismatchError, match="rank 1 built another plan than rank 0: count 524288 on rank 1"):
        check_same_plan([fingerprint("LL"), fingerprint("LL", 2 << 20)])


def test_where_the_choice_agrees_what_follows_from_it_is_named():
    with pytest.raises(PlanMismatchError, match="rank 1 built another plan than rank 0: n_channels 8 on rank 1, "
                                                "24 on rank 0 "):
        check_same_plan([fingerprint("LL"), fingerprint("LL", env={"NCCL_MAX_CTAS": "8"})])


RANK_PROGRAM = r"""
import os, sys
from nicksim.calls import call_for_size
from nicksim.job import JobSpec, load_job
from nicksim.params import read_params
from nicksim.plan import plan_call
from nicksim.errors import NickSimError
from nicksim.realhw.agree import check_same_plan, plan_fingerprint
from nicksim.realhw.bootstrap import Bootstrap
rank, port = int(sys.argv[1]), int(sys.argv[2])
try:
    job = load_job(JobSpec(system="dgx-h100", nccl_version="2.30"), read_params(os.environ))
    plan = plan_call(job.comm, call_for_size("all_reduce", 1 << 20, "float", "sum", 0, job.nranks))
    with Bootstrap.join(rank, 2, ("127.0.0.1", port), 30) as boot:
        check_same_plan(boot.allgather(plan_fingerprint(plan)))
    print("same plan", flush=True)
except NickSimError as err:
    print("error: " + err.line(), flush=True)
    sys.exit(2)
"""


def test_ranks_with_different_nccl_proto_both_stop_naming_the_difference():
    port = free_port()
    envs = [dict(os.environ, NCCL_PROTO="LL"), dict(os.environ, NCCL_PROTO="LL128")]
    procs = [subprocess.Popen([sys.executable, "-c", RANK_PROGRAM, str(rank), str(port)], env=envs[rank],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outs = [p.communicate(timeout=GUARD_S)[0].splitlines() for p in procs]
    # NCCL_PROTO=LL128 also moves rank 1's choice of algorithm at 1 MiB (Tree, where LL goes with the ring).
    expected = ["error: plan: rank 1 built another plan than rank 0: algorithm Tree on rank 1, Ring on rank 0; "
                "protocol LL128 on rank 1, LL on rank 0 (valid: the same NCCL_* settings on every rank)"]
    assert [p.returncode for p in procs] == [2, 2] and outs == [expected, expected]
