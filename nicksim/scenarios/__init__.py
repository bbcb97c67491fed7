"""Replayable hang scenarios: `nicksim hang list` and `nicksim hang replay NAME`.

`library.py` defines the classic hangs, each a small Scenario; `replay.py` runs one on the DES and
writes what its people would have seen (NCCL_DEBUG lines, PyTorch watchdog lines, Flight Recorder
dumps, a Chrome trace), then diagnoses those files as `nicksim hang diagnose` does.
"""
from .library import SCENARIOS, Op, Scenario, scenario_named
from .replay import Replay, Standing, replay

__all__ = ["SCENARIOS", "Op", "Scenario", "scenario_named", "Replay", "Standing", "replay"]
