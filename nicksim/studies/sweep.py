"""Sweeps: a grid of what-ifs run point by point, on local processes or a Dask cluster.

`read_grid(text, where)` reads a GRID.toml — one `[sweep]` table whose keys are the system options
of `nicksim perf` and the call, each a value or a list of values, plus an optional `[sweep.env]`
table of NCCL_* settings and an optional `[sweep.set]` table of DES parameters and link bandwidths
(the names `perf --set` takes; each a number or a list) — and promises the grid points: the cartesian
product of every list, in file order. `run_point(point)` answers one point with one row per size;
`run_sweep(points, workers, dask)` runs them all (a process pool of `workers`, or the Dask
scheduler at `dask`), calls `progress(done, total)` as points finish, and returns every row in
grid order. A point that nicksim cannot answer (a plan it does not model, say) gives rows whose
`error` says why, so one bad corner does not sink a long sweep; a grid that cannot be read fails
before anything runs.

Example:

    [sweep]
    engine = "des"
    collective = "all_reduce"
    sizes = ["64M", "1G"]
    system = "dgx-h100"
    nodes = [2, 4]
    oversubscription = [1, 2]
    [sweep.env]
    NCCL_ALGO = ["Ring", "Tree"]
    [sweep.set]
    "nvlink.bw_gbps" = [370.8, 185.4]

`calibration` names calibration files (nicksim calibrate -o; a path relative to the grid's
folder), "" for none: each point's engine takes that file's values for it, `[sweep.set]` winning.
"""
from __future__ import annotations

import csv
import io
import itertools
from dataclasses import fields
from pathlib import Path
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable

from ..calls import call_for_size, collective_name
from ..engines import canonical_engine, engine_named
from ..errors import NickSimError, UsageError
from ..job import SPEC_FIELDS, JobSpec, load_job
from ..params import read_params
from .perf import parse_size
from .validate import read_calibration
from ..model.hwparams import check_override
from ..formats.report import measurement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["read_grid", "run_point", "run_sweep", "rows_csv", "GRID_KEYS", "ROW_FIELDS"]

# key -> (type, default); sizes take nccl-tests' grammar (8, 64K, 256M, 8G).
_CALL_KEYS: dict[str, tuple[type, object]] = {
    "engine": (str, "nccl"), "collective": (str, "all_reduce"), "sizes": (str, "1G"), "dtype": (str, "float"),
    "calibration": (str, "")}
# The system options take JobSpec's defaults, but for the system itself and the release (the newest).
_SPEC_DEFAULTS = {**{f.name: f.default for f in fields(JobSpec)}, "system": "dgx-h100", "nccl_version": None}
GRID_KEYS: dict[str, tuple[type, object]] = {
    **_CALL_KEYS, **{key: (kind, _SPEC_DEFAULTS[key]) for key, kind in SPEC_FIELDS.items()}}
ROW_FIELDS = ("point", *(k for k in GRID_KEYS if k != "sizes"), "env", "set", "nbytes", "time_us", "algbw_gbps", "busbw_gbps", "algorithm", "protocol",
              "nchannels", "hang", "error")


def _values(key: str, raw, kind: type, where: str) -> list:
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise UsageError(f"'{key}' is an empty list", where, "one value or a list of values")
    out = []
    for item in items:
        ok = isinstance(item, kind) or (kind is float and isinstance(item, int) and not isinstance(item, bool))
        if kind is str and key == "sizes" and isinstance(item, int):
            ok = True
        if not ok or (kind is int and isinstance(item, bool)):
            raise UsageError(f"'{key}' = {item!r} is not a {kind.__name__}", where,
                             f"a {kind.__name__} or a list of them")
        out.append(item)
    return out


def read_grid(text: str, where: str) -> list[dict]:
    """The grid points of a GRID.toml (see the module docstring)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"not TOML: {exc}", where, "a TOML file with a [sweep] table") from None
    table = doc.get("sweep")
    if not isinstance(table, dict) or set(doc) - {"sweep"}:
        raise UsageError("needs exactly one [sweep] table", where, "[sweep] with keys " + ", ".join(GRID_KEYS))
    env = table.get("env", {})
    if not isinstance(env, dict):
        raise UsageError("[sweep.env] must be a table", where, "NCCL_* = value or [values]")
    sets = table.get("set", {})
    if not isinstance(sets, dict):
        raise UsageError("[sweep.set] must be a table", where, '"name" = number or [numbers]')
    axes: list[tuple[str, list]] = []
    for key, raw in table.items():
        if key in ("env", "set"):
            continue
        if key not in GRID_KEYS:
            raise UsageError(f"unknown key '{key}'", where, ", ".join(GRID_KEYS))
        axes.append((key, _values(key, raw, GRID_KEYS[key][0], f"{where}: {key}")))
    for key, raw in env.items():
        items = raw if isinstance(raw, list) else [raw]
        if not items or any(isinstance(v, (dict, list)) for v in items):
            raise UsageError(f"'{key}' = {raw!r}", f"{where}: [sweep.env]", "a value or a list of values")
        axes.append((f"env.{key}", [str(v) for v in items]))
    for key, raw in sets.items():
        check_override(key, 1.0, f"{where}: [sweep.set]")  # the name first: a bad one is not a value error
        values = _values(key, raw, float, f"{where}: [sweep.set] {key}")
        for value in values:
            check_override(key, value, f"{where}: [sweep.set]")
        axes.append((f"set.{key}", values))
    if sets and {_grid_engine(v) for v in dict(axes).get("engine", [GRID_KEYS["engine"][1]])} != {"des"}:
        raise UsageError("[sweep.set] changes the DES only", where, 'engine = "des"')
    calibrations = {}
    for name in dict(axes).get("calibration", []):  # read now: a bad file fails before anything runs
        if name:
            path = Path(name) if Path(name).is_absolute() or not Path(where).is_file() else Path(where).parent / name
            calibrations[name] = {engine: read_calibration(path, engine) for engine in SWEPT_ENGINES}
    for key, values in axes:
        if key == "engine" and any(_grid_engine(v) not in SWEPT_ENGINES for v in values):
            raise UsageError(f"engine {values}", f"{where}: engine", ", ".join(SWEPT_ENGINES) + " (or model for nccl)")
        if key == "collective":
            for v in values:
                try:
                    collective_name(v)
                except NickSimError as exc:
                    raise UsageError(exc.what, f"{where}: collective", exc.valid) from None
    # Sizes are not an axis of points: every point runs all of them, as one nccl-tests sweep.
    size_texts = dict(axes).get("sizes", [GRID_KEYS["sizes"][1]])
    sizes = [parse_size(v, f"{where}: sizes") for v in size_texts]
    plain = [(k, v) for k, v in axes if k != "sizes"]
    points = []
    for combo in itertools.product(*(values for _, values in plain)):
        point = {key: default for key, (_, default) in GRID_KEYS.items()}
        point["env"], point["set"] = {}, {}
        for (key, _), value in zip(plain, combo):
            if key.startswith("env."):
                point["env"][key[4:]] = value
            elif key.startswith("set."):
                point["set"][key[4:]] = value
            else:
                point[key] = value
        point["sizes"] = sizes
        point["calibrated"] = calibrations.get(point["calibration"], {})
        point["point"] = len(points)
        points.append(point)
    return points


# The engines a grid may name (the real backend measures this host, not the grid's systems).
SWEPT_ENGINES = ("nccl", "des")


def _grid_engine(name) -> str | None:
    try:
        return canonical_engine(str(name))
    except NickSimError:
        return None


def run_point(point: dict) -> list[dict]:
    """One grid point's rows, one per size (an `error` row set where nicksim cannot answer)."""
    base = {key: point[key] for key in ("point", *GRID_KEYS) if key != "sizes"}
    base["env"] = " ".join(f"{k}={v}" for k, v in point["env"].items())
    base["set"] = " ".join(f"{k}={v:g}" for k, v in point.get("set", {}).items())
    try:
        spec = JobSpec(**{key: point[key] for key in SPEC_FIELDS if key != "nccl_version"},
                       nccl_version=point["nccl_version"] or JobSpec.nccl_version)
        job = load_job(spec, read_params({}, [f"{k}={v}" for k, v in point["env"].items()]))
        name = _grid_engine(point["engine"])
        calibrated = point.get("calibrated", {}).get(name, {})
        engine = engine_named(name, overrides={**calibrated, **point.get("set", {})}) if name == "des" else \
            engine_named(name, calibration=calibrated)
        prepared = engine.prepare(job)
    except NickSimError as exc:
        return [dict(base, nbytes=n, error=exc.line()) for n in point["sizes"]]
    rows = []
    collective = collective_name(point["collective"])
    for nbytes in point["sizes"]:
        row = dict(base, nbytes=nbytes)
        try:
            call = call_for_size(collective, nbytes, point["dtype"], "sum", 0, job.nranks)
            result = engine.answer(job, call, prepared)
            hang = result.hang is not None
            m = measurement(collective, job.nranks, call.nbytes, max(result.time_us, 1e-3))
            row.update(time_us=round(result.time_us, 3), algbw_gbps=round(m.algbw_gbps, 3),
                       busbw_gbps=round(m.busbw_gbps, 3), algorithm=result.algorithm, protocol=result.protocol,
                       nchannels=result.n_channels, hang=hang)
        except NickSimError as exc:
            row["error"] = exc.line()
        rows.append(row)
    return rows


def run_sweep(points: list[dict], workers: int = 1, dask: str | None = None,
              progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """Every point's rows, in grid order; on `workers` local processes, or on the Dask scheduler at
    `dask` (tcp://host:port)."""
    results: dict[int, list[dict]] = {}
    total = len(points)

    def finished(index: int, rows: list[dict]) -> None:
        results[index] = rows
        if progress:
            progress(len(results), total)

    if dask:
        try:
            from dask.distributed import Client, as_completed as dask_completed
        except ImportError:
            raise UsageError("dask.distributed is not installed", "--dask", "pip install 'dask[distributed]'") \
                from None
        try:
            client = Client(dask, timeout=10)
        except (OSError, TimeoutError) as exc:
            raise UsageError(f"no Dask scheduler answers ({exc})", "--dask", "tcp://HOST:PORT of a running "
                             "scheduler") from None
        with client:
            futures = {client.submit(run_point, p, pure=False): p["point"] for p in points}
            for future in dask_completed(list(futures)):
                finished(futures[future], future.result())
    elif workers <= 1:
        for p in points:
            finished(p["point"], run_point(p))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(run_point, p): p["point"] for p in points}
            for future in as_completed(futures):
                finished(futures[future], future.result())
    return [row for index in sorted(results) for row in results[index]]


def rows_csv(rows: list[dict]) -> str:
    """The rows as CSV with ROW_FIELDS as the header."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=ROW_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in ROW_FIELDS})
    return out.getvalue()
