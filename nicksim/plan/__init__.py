"""Plans: how one call is cut over channels and chunks (chunking), what each rank runs on each channel
(programs, with point-to-point calls in p2p, PAT in pat, CollNet and NVLS across nodes in collnet), and
the builder every engine takes them from (build), and the symbolic check that the programs produce every output byte exactly once (check).
"""
from .build import call_plan, job_programs
from .check import PlanCheckError, check_programs
from .pat import PAT_MAX_ROUND
from .chunking import NCCL_STEPS, ChannelPart, Plan, collnet_scheduled, plan_call, proto_grain_nbytes
from .programs import NVLS_SWITCH, ChannelProgram, Prim, Stream, nvls_tree_links, rank_programs

__all__ = ["NCCL_STEPS", "ChannelPart", "Plan", "plan_call", "proto_grain_nbytes", "collnet_scheduled", "Prim", "Stream",
           "ChannelProgram", "NVLS_SWITCH", "rank_programs", "nvls_tree_links", "PlanCheckError", "check_programs",
           "PAT_MAX_ROUND", "call_plan", "job_programs"]
