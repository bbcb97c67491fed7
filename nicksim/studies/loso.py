"""Leave one source out: whether an engine value chosen on some publishers' runs carries over to
another publisher's.

A value that only helps the cases it was chosen on is fitted, not modelled. `leave_one_source_out`
runs every case at each value of one DES parameter (and at the engine's own value), then, for each
source in turn, picks the value with the lowest median over the *other* sources' cases (each case
counted once, by its median |error| over sizes >= 1 MiB) and reports the held-out source's median
at the engine's own value and at that pick. `source_of(case)` says who published a case: the
repository, issue or site its `source` names, so that runs from one publisher, who shares a cluster,
a harness and habits, count as one source.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from ..model.hwparams import SET_NAMES, check_override
from ..errors import UsageError
from .validate import Case, CaseResult, run_case

__all__ = ["SourceHoldout", "SourceStudy", "source_of", "check_study", "leave_one_source_out", "format_loso"]

# github.com/OWNER/REPO, with /issues/N or /pull/N where a thread is the source
_GITHUB = re.compile(r"github\.com/([^/\s]+)/([^/\s]+?)(?:\.git)?(?:/(issues|pull)/(\d+))?(?=[/\s]|$)")
_SITE = re.compile(r"(?:https?://)?([A-Za-z0-9.-]+\.[A-Za-z]{2,})(/[^/\s]*)?")


def source_of(case: Case) -> str:
    """Who published `case`: `github.com/OWNER/REPO` (with `#N` for an issue or pull request), else
    the site and its first path segment, else the source text's first words."""
    text = case.source.strip()
    match = _GITHUB.search(text)
    if match:
        owner, repo, _, number = match.groups()
        return f"github.com/{owner}/{repo}" + (f"#{number}" if number else "")
    match = _SITE.match(text)
    if match:
        return match.group(1) + (match.group(2) or "")
    return " ".join(text.split()[:4]) or case.name


@dataclass(frozen=True)
class SourceHoldout:
    """One source held out: its cases, the value the other sources' cases pick, and the held-out
    cases' median |error| (%) at the engine's own value and at that pick."""

    source: str
    n_cases: int
    picked: float | None
    own_pct: float
    held_out_pct: float


@dataclass(frozen=True)
class SourceStudy:
    """A leave-one-source-out study of one parameter: the values tried (None: the engine's own),
    each value's median over every case, the value every source together picks, and one row per
    source."""

    name: str
    values: tuple[float | None, ...]
    overall_pct: tuple[float, ...]
    picked: float | None
    rows: tuple[SourceHoldout, ...]


def _median_over(results: Sequence[CaseResult]) -> float:
    medians = [statistics.median(r.scored()) for r in results if r.error is None and r.scored()]
    return statistics.median(medians) if medians else float("nan")


def _pick(values: Sequence[float | None], scores: Sequence[float]) -> int:
    """The value with the lowest score; on a tie the engine's own (listed first), then the smaller."""
    return min(range(len(values)), key=lambda i: (scores[i], i))


def check_study(name: str, values: Sequence[float]) -> None:
    """A UsageError unless `name` is a DES parameter and `values` are values it may take."""
    if name not in SET_NAMES:
        raise UsageError(f"unknown engine parameter '{name}'", "--loso", ", ".join(SET_NAMES))
    if not values:
        raise UsageError(f"no values for {name}", "--loso", "NAME=V1,V2,...")
    for value in values:
        check_override(name, value, "--loso")


def leave_one_source_out(cases: Sequence[Case], name: str, values: Sequence[float],
                         run: Callable[[Case, dict], CaseResult] | None = None,
                         on_run: Callable[[int, int], None] | None = None) -> SourceStudy:
    """The study of DES parameter `name` over `values` on `cases` (`run(case, overrides)` answers one
    case: the DES by default); `on_run(done, total)` hears of each run."""
    check_study(name, values)
    run = run or (lambda case, overrides: run_case(case, "des", overrides or None))
    tried: tuple[float | None, ...] = (None, *dict.fromkeys(float(v) for v in values))
    total, done = len(tried) * len(cases), 0
    results: list[list[CaseResult]] = []
    for value in tried:
        row = []
        for case in cases:
            row.append(run(case, {} if value is None else {name: value}))
            done += 1
            if on_run is not None:
                on_run(done, total)
        results.append(row)
    sources = [source_of(c) for c in cases]
    rows = []
    for source in dict.fromkeys(sources):
        inside = [i for i, s in enumerate(sources) if s == source]
        others = [i for i, s in enumerate(sources) if s != source]
        scores = [_median_over([results[v][i] for i in others]) for v in range(len(tried))]
        best = _pick(tried, scores)
        rows.append(SourceHoldout(source, len(inside), tried[best], _median_over([results[0][i] for i in inside]),
                                  _median_over([results[best][i] for i in inside])))
    overall = tuple(_median_over(r) for r in results)
    return SourceStudy(name, tried, overall, tried[_pick(tried, overall)], tuple(rows))


def _value(value: float | None) -> str:
    return "own" if value is None else f"{value:g}"


def format_loso(study: SourceStudy) -> list[str]:
    """The study as the report prints it: each value's median over cases, then a row per source."""
    lines = [f"# leave one source out: {study.name} (own: the engine's value; median over cases of each case's "
             "median |error| at sizes >= 1 MiB)",
             "# " + "  ".join(f"{_value(v)}: {p:.1f}%" for v, p in zip(study.values, study.overall_pct))
             + f"  -> every source picks {_value(study.picked)}",
             f"# {'source':<48} {'cases':>5} {'picked':>7} {'own%':>6} {'held-out%':>9}"]
    for r in study.rows:
        lines.append(f"  {r.source:<48} {r.n_cases:>5} {_value(r.picked):>7} {r.own_pct:>6.1f} {r.held_out_pct:>9.1f}")
    worse = [r for r in study.rows if r.held_out_pct > r.own_pct + 0.05]
    better = [r for r in study.rows if r.held_out_pct < r.own_pct - 0.05]
    lines.append(f"# held out, the others' pick does better on {len(better)} source(s), worse on {len(worse)}, "
                 f"the same on {len(study.rows) - len(better) - len(worse)}")
    return lines
