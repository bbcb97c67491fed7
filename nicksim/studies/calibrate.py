"""Calibration: the DES's free parameters fitted to measured runs, with the error it leaves on runs it never saw.

The DES starts from the figures NCCL states (hwparams.py); some of them are tuning values rather than
measurements. `step_lat.scale`, above all, multiplies NCCL's per-step hardware latency (hwLat), which NCCL
fits to its small-message latency and which undercounts what a step costs while a pipeline is loaded.
`fit(cases, name, values)` promises, for validation cases (validate.py: a system and its measured
nccl-tests rows), the DES answered at each candidate value of one parameter, the value whose median
absolute busbw error over sizes >= 1 MiB is lowest across all cases (ties go to the value nearest NCCL's
own, 1), and the honest figure beside it: leaving out each source (the cases that read one measured
file), the value fitted on the others and the error it gives on the source left out. A value is worth
using on a system nobody measured only if that held-out error is low too.

`calibration_text(fit)` is the calibration file (`[set]`, as `--set` names them; `nicksim validate
--calibration` and `nicksim perf --calibration` read it), with the figures as comments.
"""
from __future__ import annotations

import math
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .validate import SCORED_MIN_NBYTES, Case, CaseResult, run_case

__all__ = ["Fit", "HeldOut", "FIT_NAMES", "DEFAULT_VALUES", "fit", "source_of", "calibration_text", "format_fit"]

# Parameters that stand for NCCL tuning figures rather than for the fabric, and NCCL's value for them
# (the proxy's post cost: 1 us, its figure for Intel hosts).
FIT_NAMES = {"step_lat.scale": 1.0, "launch.scale": 1.0, "proxy.overhead_us": 1.0}
DEFAULT_VALUES = (0.5, 0.7, 1.0, 1.4, 2.0, 2.8, 4.0, 5.6, 8.0)  # about sqrt(2) apart around NCCL's own


@dataclass(frozen=True)
class HeldOut:
    """One source left out of the fit: the value fitted on the other sources, and the median error
    (%) that value gives on this source's sizes."""

    source: str
    cases: tuple[str, ...]
    value: float
    median_pct: float


@dataclass(frozen=True)
class Fit:
    """A parameter fitted over cases: the median |busbw error| (%) at each candidate value, the value
    chosen, and the leave-one-source-out figures (`held_out`, and their median over every held-out
    size). `skipped` names the cases the DES could not run, with why."""

    name: str
    cases: tuple[str, ...]
    medians: tuple[tuple[float, float], ...]
    value: float
    held_out: tuple[HeldOut, ...]
    held_out_median_pct: float | None
    skipped: tuple[tuple[str, str], ...] = ()

    def median_at(self, value: float) -> float:
        return dict(self.medians)[value]


def source_of(case: Case) -> str:
    """Where a case's rows come from: the address its `source` starts with (a repository or site),
    else the measured file it reads, else the case alone. Cases that share one are one source (one
    cluster, one author)."""
    first = case.source.split()[0] if case.source.strip() else ""
    if "/" in first or "." in first:
        return first
    return Path(case.measured).name if case.measured else case.name


def _errors(result: CaseResult) -> list[float]:
    return [abs(p.error_pct) for p in result.points if p.nbytes >= SCORED_MIN_NBYTES]


def _run(args: tuple[Case, str, float]) -> CaseResult:
    case, name, value = args
    return run_case(case, "des", {name: value})


def _evaluate(cases: list[Case], name: str, values: tuple[float, ...], jobs: int) -> dict[tuple[str, float], CaseResult]:
    work = [(case, name, value) for value in values for case in cases]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_run, work, chunksize=1))
    else:
        results = [_run(w) for w in work]
    return {(case.name, value): result for (case, _, value), result in zip(work, results)}


def _best(errors: dict[float, list[float]], neutral: float) -> float:
    """The value of least median error; of equal ones, the nearest (in ratio) to the neutral value."""
    scored = {v: statistics.median(e) for v, e in errors.items() if e}
    if not scored:
        raise UsageError("no case has a size >= 1 MiB the DES could run", "calibrate", "cases with measured sizes")
    return min(scored, key=lambda v: (round(scored[v], 6), abs(_log_ratio(v, neutral))))


def _log_ratio(a: float, b: float) -> float:
    return math.log(a / b)


def fit(cases: list[Case], name: str = "step_lat.scale", values: tuple[float, ...] = DEFAULT_VALUES,
        jobs: int = 1) -> Fit:
    """`name` fitted over `cases` among `values` (see the module docstring); `jobs` processes run the DES."""
    if name not in FIT_NAMES:
        raise UsageError(f"cannot fit '{name}'", "--fit", ", ".join(FIT_NAMES))
    values = tuple(sorted(set(float(v) for v in values)))
    if not values or any(not v > 0 for v in values):
        raise UsageError(f"values {values}", "--values", "numbers above 0")
    results = _evaluate(cases, name, values, max(1, jobs))
    ran = [c for c in cases if all(results[(c.name, v)].error is None for v in values)]
    skipped = tuple((c.name, next(results[(c.name, v)].error for v in values if results[(c.name, v)].error))
                    for c in cases if c not in ran)

    def errors_over(chosen: list[Case]) -> dict[float, list[float]]:
        return {v: [e for c in chosen for e in _errors(results[(c.name, v)])] for v in values}

    all_errors = errors_over(ran)
    neutral = FIT_NAMES[name]
    value = _best(all_errors, neutral)
    medians = tuple((v, statistics.median(e)) for v, e in all_errors.items() if e)
    held, held_sizes = [], []
    sources = sorted({source_of(c) for c in ran})
    for source in sources if len(sources) > 1 else ():
        inside = [c for c in ran if source_of(c) == source]
        rest = [c for c in ran if source_of(c) != source]
        chosen = _best(errors_over(rest), neutral)
        sizes = [e for c in inside for e in _errors(results[(c.name, chosen)])]
        if sizes:
            held.append(HeldOut(source, tuple(c.name for c in inside), chosen, statistics.median(sizes)))
            held_sizes += sizes
    return Fit(name, tuple(c.name for c in ran), medians, value, tuple(held),
               statistics.median(held_sizes) if held_sizes else None, skipped)


def format_fit(f: Fit) -> list[str]:
    """The fit as text: the median error at each value, the value chosen, the held-out figures."""
    neutral = FIT_NAMES[f.name]
    cases = f"{len(f.cases)} case" + ("" if len(f.cases) == 1 else "s")
    lines = [f"# nicksim calibrate: {f.name} over {cases}; median |busbw error| over sizes >= 1 MiB",
             f"# {'value':>6} {'median%':>8}"]
    for v, m in f.medians:
        mark = "  <- chosen" if v == f.value else ("  (NCCL's own)" if v == neutral else "")
        lines.append(f"  {v:6g} {m:8.1f}{mark}")
    if f.held_out:
        lines.append("# each source left out: the value fitted on the others, and its median error on the source")
        for h in f.held_out:
            lines.append(f"  {h.source:<24} {h.value:6g} {h.median_pct:8.1f}   ({', '.join(h.cases)})")
        lines.append(f"# held out, over every size of every source: median {f.held_out_median_pct:.1f}% "
                     f"(fitted on all: {f.median_at(f.value):.1f}%, NCCL's own value: "
                     f"{dict(f.medians).get(neutral, float('nan')):.1f}%)")
    for name, why in f.skipped:
        lines.append(f"# not used: {name}: {why}")
    return lines


def calibration_text(f: Fit) -> str:
    """The calibration file for `f`: its [set] table, and the figures that justify it as comments."""
    head = "\n".join(line if line.startswith("#") else "# " + line[2:] for line in format_fit(f))
    return f"{head}\n[set]\n\"{f.name}\" = {f.value:g}\n"


def default_jobs() -> int:
    return max(1, min(8, os.cpu_count() or 1))
