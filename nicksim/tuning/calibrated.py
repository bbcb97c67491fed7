"""NCCL's time model with calibrated constants: what a call NCCL chose really costs on a measured system.

NCCL picks the algorithm and protocol with its own constants (choose.py), and a real run takes
that pick whatever its time turns out to be; calibration changes the price, not the pick. A
`TimeCalibration` holds what a fit found: a per-call cost NCCL's model leaves out (`launch_us`,
the host's enqueue and kernel launch beyond baseLat), and per algorithm and protocol a factor on
NCCL's latency (baseLat + hwLat terms) and one on its bandwidth. `calibrated_time_us(comm, call,
algorithm, protocol, cal)` promises ncclTopoGetAlgoTime's time for the pair with those applied
(NCCL's own time where `cal` is empty). Names as calibration files and `--set` spell them:
`launch_us`, `lat.ALGO/PROTO`, `bw.ALGO/PROTO` (e.g. `bw.Ring/Simple`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from ..calls import Call
from ..constants.tuning_tables import ALGORITHMS, PROTOCOLS
from ..errors import UsageError
from .choose import CommState
from .cost import algo_terms

__all__ = ["TimeCalibration", "time_calibration", "calibrated_time_us", "model_constant_names", "check_model_value",
           "LAUNCH_US", "LAT_BOUNDS", "BW_BOUNDS"]

LAUNCH_US = "launch_us"
# What a factor may be and still describe hardware: NCCL's constants are within 20x of what a
# system does, and no pair moves more than 4x the bandwidth NCCL's model gives it.
LAT_BOUNDS = (0.05, 20.0)
BW_BOUNDS = (0.05, 4.0)
LAUNCH_BOUNDS_US = (0.0, 10000.0)
_VALID_NAMES = (f"{LAUNCH_US}, lat.ALGO/PROTO or bw.ALGO/PROTO (ALGO one of {', '.join(ALGORITHMS)}; PROTO one of "
                f"{', '.join(PROTOCOLS)})")


@dataclass(frozen=True)
class TimeCalibration:
    """Calibrated constants of NCCL's time model (see the module docstring); empty is NCCL's own."""

    launch_us: float = 0.0
    lat_scale: tuple[tuple[tuple[str, str], float], ...] = ()
    bw_scale: tuple[tuple[tuple[str, str], float], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.launch_us or self.lat_scale or self.bw_scale)


def model_constant_names(algorithms: tuple[str, ...]) -> tuple[str, ...]:
    """Every name a calibration of NCCL's time model may set, for `algorithms`."""
    pairs = [f"{a}/{p}" for a in algorithms for p in PROTOCOLS]
    return (LAUNCH_US, *(f"lat.{pair}" for pair in pairs), *(f"bw.{pair}" for pair in pairs))


def _pair(name: str, where: str) -> tuple[str, str]:
    _, _, pair = name.partition(".")
    algorithm, _, protocol = pair.partition("/")
    if algorithm not in ALGORITHMS or protocol not in PROTOCOLS:
        raise UsageError(f"unknown time-model constant '{name}'", where, _VALID_NAMES)
    return algorithm, protocol


def check_model_value(name: str, value: float, where: str) -> None:
    """A UsageError unless `name` is a time-model constant and `value` within its physical range."""
    if name == LAUNCH_US:
        low, high = LAUNCH_BOUNDS_US
    elif name.startswith("lat."):
        _pair(name, where)
        low, high = LAT_BOUNDS
    elif name.startswith("bw."):
        _pair(name, where)
        low, high = BW_BOUNDS
    else:
        raise UsageError(f"unknown time-model constant '{name}'", where, _VALID_NAMES)
    if not (math.isfinite(value) and low <= value <= high):
        raise UsageError(f"{name} = {value:g}", where, f"a number from {low:g} to {high:g}")


def time_calibration(values: Mapping[str, float], where: str = "calibration") -> TimeCalibration:
    """The calibration `values` (names as in the module docstring) stand for, checked."""
    launch, lat, bw = 0.0, {}, {}
    for name, value in values.items():
        check_model_value(name, float(value), where)
        if name == LAUNCH_US:
            launch = float(value)
        elif name.startswith("lat."):
            lat[_pair(name, where)] = float(value)
        else:
            bw[_pair(name, where)] = float(value)
    return TimeCalibration(launch, tuple(sorted(lat.items())), tuple(sorted(bw.items())))


def calibrated_time_us(comm: CommState, call: Call, algorithm: str, protocol: str, cal: TimeCalibration) -> float:
    """ncclTopoGetAlgoTime for `call` run as `algorithm`/`protocol`, with `cal`'s constants; -1
    where NCCL would not run the pair."""
    terms = algo_terms(comm.table, comm.inputs, call.func, algorithm, protocol, call.nbytes, comm.n_channels)
    if terms.bw_gbps == 0.0:
        return -1.0
    pair = (algorithm, protocol)
    lat = terms.lat_us * dict(cal.lat_scale).get(pair, 1.0)
    bw = terms.bw_gbps * dict(cal.bw_scale).get(pair, 1.0)
    return cal.launch_us + lat + call.nbytes / (1000 * bw)
