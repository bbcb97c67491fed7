"""NCCL's time model (src/graph/tuning.cc), one phase after channels are connected.

This module promises the decisions ncclTopoTuneModel makes from the tuning tables of the
release being modelled. So far: the per-algorithm, per-protocol thread thresholds and their
`threadThresholds ...` INFO line, including NCCL_THREAD_THRESHOLDS overrides.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .constants.tuning_tables import TuningTables
from .params import Params

__all__ = ["ThreadThresholds", "thread_thresholds", "format_thread_thresholds"]


@dataclass(frozen=True)
class ThreadThresholds:
    """Bytes per thread below which NCCL shrinks the thread count, per algorithm and protocol.

    `tree` and `ring` are (LL, LL128, Simple); CollNet Direct and Chain only run Simple.
    """

    tree: tuple[int, int, int]
    ring: tuple[int, int, int]
    collnet_direct_simple: int
    collnet_chain_simple: int


def _env_thresholds(text: str) -> list[int]:
    """The leading integers of NCCL_THREAD_THRESHOLDS, read the way sscanf("%ld ...") reads them."""
    values = []
    for token in text.split()[:6]:
        match = re.match(r"^[+-]?\d+", token)
        if not match:
            break
        values.append(int(match.group()))
        if match.end() != len(token):
            break  # sscanf stops at the first character that is not part of a number
    return values


def thread_thresholds(tables: TuningTables, n_ranks: int, params: Params) -> ThreadThresholds:
    """NCCL's defaults (Ring LL scaled by the rank count), then NCCL_THREAD_THRESHOLDS.

    The variable holds up to six integers, Tree then Ring, LL/LL128/Simple each; a negative
    value keeps the default, as in tuning.cc.
    """
    base = [tables.ll_thread_threshold, tables.ll128_thread_threshold, tables.simple_thread_threshold]
    tree, ring = list(base), list(base)
    ring[0] *= n_ranks
    text = params.get("NCCL_THREAD_THRESHOLDS")
    if text:
        for index, value in enumerate(_env_thresholds(text)):
            if value >= 0:
                (tree if index < 3 else ring)[index % 3] = value
    return ThreadThresholds(
        tree=tuple(tree), ring=tuple(ring),
        collnet_direct_simple=tables.collnet_thread_threshold,
        collnet_chain_simple=tables.collnet_thread_threshold,
    )


def format_thread_thresholds(thresholds: ThreadThresholds) -> str:
    """NCCL's INFO line: `threadThresholds 8/8/64 | 128/8/64 | 512 | 512`."""
    tree = "/".join(str(v) for v in thresholds.tree)
    ring = "/".join(str(v) for v in thresholds.ring)
    return (f"threadThresholds {tree} | {ring} | {thresholds.collnet_direct_simple} | "
            f"{thresholds.collnet_chain_simple}")
