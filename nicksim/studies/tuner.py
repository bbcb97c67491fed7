"""The choice an engine would make, written for NCCL's example tuner plugin.

`tuner_rows(job, collective, sizes, engine)` runs every algorithm x protocol NCCL prices for the
collective on `job` (NCCL_ALGO/NCCL_PROTO forced to the pair, as a user would), keeps the fastest
pair per size by that engine's own times (the DES with a calibration, say), and merges runs of
sizes with the same pick into ranges. `tuner_csv(rows)` writes them in the format of NCCL's
plugins/tuner/example/nccl_tuner.conf (2.26+): collective_type,min_bytes,max_bytes,algorithm,
protocol,channels,nNodes,nRanks,numPipeOps,regBuff, channels -1 (NCCL's own count), numPipeOps and
regBuff -1 (any). Each range runs from one measured size to just below the next.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..calls import call_for_size
from ..engines import Des, Engine, NcclModel
from ..errors import UsageError
from ..job import Job, load_job
from ..params import read_params
from ..tuning.choose import priced

__all__ = ["tuner_rows", "tuner_csv", "calibrated_rows", "TUNER_HEADER", "TUNER_NAMES"]

# plugins/tuner/example/nccl_tuner.conf's header and names (NCCL 2.26-2.30).
TUNER_HEADER = "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff"
TUNER_NAMES = {
    "collective": {"broadcast": "broadcast", "reduce": "reduce", "all_gather": "allgather",
                   "reduce_scatter": "reducescatter", "all_reduce": "allreduce"},
    "algorithm": {"Tree": "tree", "Ring": "ring", "CollNetDirect": "collnet_direct", "CollNetChain": "collnet_chain",
                  "NVLS": "nvls", "NVLSTree": "nvls_tree", "PAT": "pat"},
    "protocol": {"LL": "ll", "LL128": "ll128", "Simple": "simple"},
}
_MAX_BYTES = (1 << 64) - 1  # the last range is open-ended (size_t)


def _pairs(job: Job, collective: str, sizes: Sequence[int]) -> list[tuple[str, str]]:
    found: dict[tuple[str, str], None] = {}
    for size in sizes:
        call = call_for_size(collective, size, "float", "sum", 0, job.nranks)
        for p in priced(job.comm, call):
            if p.time_us >= 0:
                found[(p.algorithm, p.protocol)] = None
    return list(found)


def tuner_rows(job: Job, collective: str, sizes: Sequence[int], engine: Engine,
               progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """A record per size range: the collective, the range, the pair `engine` found fastest in it,
    its time at the range's first size, and NCCL's own picks over the range for comparison."""
    if collective not in TUNER_NAMES["collective"]:
        raise UsageError(f"{collective} has no tuner entry", "collective", ", ".join(TUNER_NAMES["collective"]))
    sizes = sorted(set(sizes))
    if not sizes:
        raise UsageError("no sizes", "sizes", "one size or more")
    pairs = _pairs(job, collective, sizes)
    times: dict[int, dict[tuple[str, str], float]] = {s: {} for s in sizes}
    done = 0
    for algorithm, protocol in pairs:
        params = read_params(job.params.raw, [f"NCCL_ALGO={algorithm}", f"NCCL_PROTO={protocol}"])
        forced = load_job(job.spec, params)
        calls = [call_for_size(collective, s, "float", "sum", 0, job.nranks) for s in sizes]
        for result in engine.run_many(forced, calls):
            if (result.algorithm, result.protocol) == (algorithm, protocol) and result.time_us > 0:
                times[result.call.nbytes][(algorithm, protocol)] = result.time_us
        done += 1
        if progress is not None:
            progress(done, len(pairs))
    rows: list[dict] = []
    for k, size in enumerate(sizes):
        if not times[size]:
            continue
        best = min(times[size], key=lambda pair: (times[size][pair], pairs.index(pair)))
        nccl = next(p for p in priced(job.comm, call_for_size(collective, size, "float", "sum", 0, job.nranks))
                    if p.chosen)
        nccl_pick = f"{nccl.algorithm}/{nccl.protocol}"
        if rows and (rows[-1]["algorithm"], rows[-1]["protocol"]) == best:
            rows[-1]["max_bytes"] = sizes[k + 1] - 1 if k + 1 < len(sizes) else _MAX_BYTES
            if nccl_pick not in rows[-1]["nccl_choice"].split(", "):
                rows[-1]["nccl_choice"] += f", {nccl_pick}"
            continue
        rows.append({"collective": collective, "min_bytes": 0 if not rows else size,
                     "max_bytes": sizes[k + 1] - 1 if k + 1 < len(sizes) else _MAX_BYTES,
                     "algorithm": best[0], "protocol": best[1], "time_us": times[size][best],
                     "nccl_choice": nccl_pick, "nodes": job.nodes, "nranks": job.nranks})
    return rows


def tuner_csv(rows: Sequence[dict]) -> str:
    """The rows as the example tuner plugin's configuration file."""
    lines = ["# nccl_tuner.conf written by nicksim: the fastest algorithm/protocol per size range", TUNER_HEADER]
    for r in rows:
        lines.append(",".join(str(v) for v in (
            TUNER_NAMES["collective"][r["collective"]], r["min_bytes"], r["max_bytes"],
            TUNER_NAMES["algorithm"][r["algorithm"]], TUNER_NAMES["protocol"][r["protocol"]], -1, r["nodes"],
            r["nranks"], -1, -1)))
    return "\n".join(lines) + "\n"


def calibrated_rows(cal, progress: Callable[[int, int], None] | None = None) -> tuple[list[dict], list[str]]:
    """tuner_rows for each collective and system of a calibration (studies.fit.Calibration), at its
    measured sizes, by the calibrated engine: NCCL's time model where it was fitted, else the DES;
    and a line for each collective no tuner plugin chooses for."""
    fitted = cal.fit_of("nccl") or cal.fit_of("des")
    engine = NcclModel(calibration=fitted.values()) if fitted.engine == "nccl" else Des(overrides=fitted.values())
    rows: list[dict] = []
    skipped: list[str] = []
    done: set = set()
    for run, job in zip(cal.runs, cal.jobs):
        key = (run.collective, id(job))  # a table per collective and system measured
        if key in done:
            continue
        done.add(key)
        if run.collective not in TUNER_NAMES["collective"]:
            skipped.append(f"{run.collective}: NCCL's tuner plugins choose no algorithm for it")
            continue
        rows += tuner_rows(job, run.collective, [n for n, _ in run.points], engine, progress)
    return rows, skipped
