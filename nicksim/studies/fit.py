"""The joint calibration: every cost an engine has, fitted at once to a user's measured runs.

`calibrate(runs, systems, engines, holdout)` promises, per engine ("nccl": NCCL's time model,
"des": the discrete-event simulation), the parameters that make its times closest to the measured
ones over the sizes not held out: a bounded, robust least-squares fit (SciPy's `least_squares`,
soft-L1 loss) of log(predicted / measured time), each parameter in log space and within the range
that still describes hardware (`Parameter`). Before fitting, the effect of each parameter on every
fitted size is measured; a parameter that moves no size by 2% over a factor e, or whose effect the
others already explain, is left at NCCL's value and reported as not determined by these
measurements. The result (`EngineFit`) has each parameter before and after with its 1-sigma
uncertainty (from the Jacobian at the solution), each size's error before and after, and the
median error on the sizes held out, before and after: a fit better on what it saw and worse on
what it did not is `over_fitted`. A parameter that ends at the edge of its physical range means
the system described is not the one measured: a UsageError (nothing is written).

`calibration_text(cal)` is the calibration file: TOML, `[set]` the DES parameters (as `--set`
names them, with the fixed values given), `[nccl]` the time model's constants
(tuning/calibrated.py), the report as comments; `read_calibration_file(path)` reads it back.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from ..calls import COLLECTIVE_TABLE, call_for_size
from ..engines import Des, NcclModel
from ..errors import NickSimError, UsageError
from ..job import Job
from ..model.hwparams import EFFICIENCY_MAX, DesParams
from ..tuning.calibrated import BW_BOUNDS, LAT_BOUNDS, LAUNCH_BOUNDS_US, LAUNCH_US
from .measured import MeasuredRun
from .perf import host_enqueue_us

__all__ = ["Parameter", "Holdout", "parse_holdout", "Observation", "ParamFit", "PointFit", "EngineFit",
           "Calibration", "des_parameters", "model_parameters", "calibrate", "format_calibration",
           "calibration_text", "FIT_ENGINES", "MIN_EFFECT", "busbw_error_pct", "point_records", "parameter_records",
           "engine_values"]

FIT_ENGINES = ("nccl", "des")
MIN_EFFECT = 0.02      # a parameter moving no fitted size by 2% over a factor e is not determined
_INDEPENDENT = 0.1     # least singular value of the normalised effects a kept parameter must leave
_STEP = 0.1            # the finite-difference step, in log space: DES times move in small jumps
_EDGE = 1e-3           # how close to a bound (log space) counts as at it
# NCCL's values as a prior for the DES: each parameter is taken to lie within a factor of 4 of
# NCCL's (one sigma in log space). A fitted size outweighs it, but where the data barely tell (the
# DES's times jump between sizes as another link becomes the bottleneck) the fit stays near NCCL's
# value instead of chasing the sizes it saw. NCCL's time model is smooth in its constants, and a
# log's sizes determine them: no prior (an infinite width).
_PRIOR_WIDTH = {"des": math.log(4.0), "nccl": math.inf}

_EFFICIENCY = (0.02, EFFICIENCY_MAX)  # hwparams.py: NCCL's stated link figures leave that margin
_SCALE = (0.05, 1000.0)  # a latency up to 1000x NCCL's: the real backend's Python steps, not a GPU's
_COST_US = (0.0, 10000.0)
_COST_SIZE_US = 10.0  # a cost's usual size: a kernel launch, a network step (the fit's unit for costs)


@dataclass(frozen=True)
class Parameter:
    """One value a fit may change: its name (as `--set` or `[nccl]` spells it), NCCL's value for it,
    its range, and `offset` (for costs that may be 0, a cost of their usual size, else 0): the fit
    moves log(value + offset), so a cost at 0 still moves in steps of its usual size."""

    name: str
    default: float
    low: float
    high: float
    offset: float = 0.0
    what: str = ""

    def x(self, value: float) -> float:
        return math.log(value + self.offset)

    def value(self, x: float) -> float:
        return max(self.low, min(self.high, math.exp(x) - self.offset))

    @property
    def x_bounds(self) -> tuple[float, float]:
        low = self.low + self.offset
        return (math.log(low) if low > 0 else -30.0), math.log(self.high + self.offset)


def des_parameters(params: DesParams) -> list[Parameter]:
    """What the DES fit moves, from `params` (the job's defaults): the per-call launch cost, each
    link kind's bandwidth share and step latency, the proxy's post cost, the plugin's latency and
    the network step's cost."""
    lat = dict(params.hw_lat_scale)
    share = dict(params.link_efficiency)
    return [
        Parameter("launch.scale", params.launch_scale, *_SCALE, what="per-call launch cost (x NCCL's baseLat)"),
        Parameter("nvlink.efficiency", share.get("NVL", 1.0), *_EFFICIENCY, what="NVLink bandwidth share"),
        Parameter("pcie.efficiency", share.get("PCI", 1.0), *_EFFICIENCY, what="PCIe bandwidth share"),
        Parameter("net.efficiency", share.get("NET", 1.0), *_EFFICIENCY, what="NIC bandwidth share"),
        Parameter("step_lat.nvlink.scale", lat.get("NVLINK", 1.0), *_SCALE, what="NVLink step latency (x hwLat)"),
        Parameter("step_lat.pcie.scale", lat.get("PCI", 1.0), *_SCALE, what="PCIe step latency (x hwLat)"),
        Parameter("step_lat.net.scale", lat.get("NET", 1.0), *_SCALE, what="network step latency (x hwLat)"),
        Parameter("proxy.overhead_us", params.net_overhead_us, *_COST_US, _COST_SIZE_US,
                  "proxy post cost per step, us"),
        Parameter("net.latency_us", params.net_latency_us, *_COST_US, _COST_SIZE_US, "network plugin latency, us"),
        Parameter("net.step_us", params.net_step_us, *_COST_US, _COST_SIZE_US,
                  "point-to-point network step cost per connection, us"),
        Parameter("net.step_coll_us", params.net_step_coll_us, *_COST_US, _COST_SIZE_US,
                  "collective network step cost per connection, us"),
    ]


def model_parameters(pairs: Sequence[tuple[str, str]]) -> list[Parameter]:
    """What the time-model fit moves: a per-call cost NCCL's model lacks, and for each algorithm
    and protocol the runs used, factors on NCCL's latency and bandwidth."""
    out = [Parameter(LAUNCH_US, 0.0, *LAUNCH_BOUNDS_US, _COST_SIZE_US, "per-call cost beyond NCCL's, us")]
    for a, p in pairs:
        out.append(Parameter(f"bw.{a}/{p}", 1.0, *BW_BOUNDS, what=f"{a}/{p} bandwidth (x NCCL's)"))
    for a, p in pairs:
        out.append(Parameter(f"lat.{a}/{p}", 1.0, *LAT_BOUNDS, what=f"{a}/{p} latency (x NCCL's)"))
    return out


# --- what is held out ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Holdout:
    """What the fit must not see: sizes (exact, or every other size of each table from the
    smallest fitted one: `alternate`), collectives, node counts and rank counts."""

    sizes: frozenset[int] = frozenset()
    alternate: bool = False
    collectives: frozenset[str] = frozenset()
    nodes: frozenset[int] = frozenset()
    ranks: frozenset[int] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.sizes or self.alternate or self.collectives or self.nodes or self.ranks)


def parse_holdout(specs: Sequence[str], parse_size: Callable[[str], int], collective_name: Callable[[str], str]
                  ) -> Holdout:
    """`--holdout` values: `alternate`, `size=2M,8M`, `collective=all_gather`, `nodes=4`, `ranks=32`."""
    sizes, colls, nodes, ranks, alternate = set(), set(), set(), set(), False
    valid = "alternate, size=S[,S...], collective=COLL[,...], nodes=N[,...] or ranks=N[,...]"
    for spec in specs:
        key, sep, text = spec.partition("=")
        key = key.strip().lower()
        if key == "alternate" and not sep:
            alternate = True
            continue
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not sep or not items:
            raise UsageError(f"'{spec}'", "--holdout", valid)
        try:
            if key in ("size", "sizes"):
                sizes.update(parse_size(t) for t in items)
            elif key in ("collective", "collectives"):
                colls.update(collective_name(t) for t in items)
            elif key in ("nodes", "ranks"):
                counts = [int(t) for t in items]
                if any(c < 1 for c in counts):
                    raise ValueError
                (nodes if key == "nodes" else ranks).update(counts)
            else:
                raise UsageError(f"'{spec}'", "--holdout", valid)
        except ValueError:
            raise UsageError(f"'{spec}'", "--holdout", valid) from None
    return Holdout(frozenset(sizes), alternate, frozenset(colls), frozenset(nodes), frozenset(ranks))


# --- observations ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Observation:
    """One measured size of one run: which run (index into the runs), the size, the measured time,
    whether the fit leaves it out, and the least time the run's loop allows (perf.host_enqueue_us)."""

    run: int
    nbytes: int
    measured_us: float
    held_out: bool
    floor_us: float = 0.0  # the nccl-tests thread's enqueue (-g): no engine time is below it


def _observations(runs: Sequence[MeasuredRun], jobs: Sequence[Job], holdout: Holdout, min_nbytes: int,
                  max_nbytes: int) -> list[Observation]:
    out = []
    for k, (run, job) in enumerate(zip(runs, jobs)):
        sizes = sorted((n, t) for n, t in run.points if min_nbytes <= n <= max_nbytes)
        whole = (run.collective in holdout.collectives or job.nodes in holdout.nodes or job.nranks in holdout.ranks)
        floor = host_enqueue_us(run.ngpus)
        for i, (nbytes, time_us) in enumerate(sizes):
            held = whole or nbytes in holdout.sizes or (holdout.alternate and i % 2 == 1)
            out.append(Observation(k, nbytes, time_us, held, floor))
    return out


# --- results ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParamFit:
    """One parameter's fit: NCCL's value, the fitted one and its 1-sigma uncertainty (None where
    the data cannot give one), and why a parameter was left at NCCL's value (empty if fitted)."""

    name: str
    what: str
    default: float
    value: float
    sigma: float | None = None
    left_because: str = ""

    @property
    def fitted(self) -> bool:
        return not self.left_because


@dataclass(frozen=True)
class PointFit:
    """One observation with the engine's time before and after the fit, and its plan after."""

    obs: Observation
    before_us: float
    after_us: float
    algorithm: str = ""
    protocol: str = ""

    @property
    def error_before_pct(self) -> float:
        return busbw_error_pct(self.before_us, self.obs.measured_us)

    @property
    def error_after_pct(self) -> float:
        return busbw_error_pct(self.after_us, self.obs.measured_us)


def busbw_error_pct(predicted_us: float, measured_us: float) -> float:
    """The bus bandwidth error the validation report gives: predicted / measured busbw - 1, in %."""
    return 100.0 * (measured_us / predicted_us - 1.0)


def _median_abs(values: list[float]) -> float | None:
    return statistics.median(abs(v) for v in values) if values else None


@dataclass(frozen=True)
class EngineFit:
    """One engine's calibration: every parameter (fitted or left), every observation before and
    after, the values held fixed (`--set`), and how many runs of the engine the fit took."""

    engine: str
    params: tuple[ParamFit, ...]
    points: tuple[PointFit, ...]
    fixed: tuple[tuple[str, float], ...] = ()
    evaluations: int = 0
    notes: tuple[str, ...] = ()

    def medians(self, held_out: bool) -> tuple[float | None, float | None]:
        """Median |busbw error| (%) before and after over the fitted sizes, or the held-out ones."""
        chosen = [p for p in self.points if p.obs.held_out == held_out]
        return (_median_abs([p.error_before_pct for p in chosen]), _median_abs([p.error_after_pct for p in chosen]))

    @property
    def over_fitted(self) -> bool:
        """Better on the sizes it saw, worse on those it did not."""
        fit_b, fit_a = self.medians(False)
        held_b, held_a = self.medians(True)
        return None not in (fit_b, fit_a, held_b, held_a) and fit_a < fit_b and held_a > held_b

    def values(self) -> dict[str, float]:
        """What the calibration file sets for this engine: the fixed values and every fitted one."""
        out = dict(self.fixed)
        out.update({p.name: p.value for p in self.params if p.fitted})
        return out


@dataclass(frozen=True)
class Calibration:
    """A calibration of one or more engines on the runs given (`sources`: a line per run)."""

    sources: tuple[str, ...]
    fits: tuple[EngineFit, ...]
    notes: tuple[str, ...] = field(default=())
    runs: tuple[MeasuredRun, ...] = ()
    jobs: tuple[Job, ...] = ()

    def fit_of(self, engine: str) -> EngineFit | None:
        return next((f for f in self.fits if f.engine == engine), None)


# --- the fit -------------------------------------------------------------------------------------

class _Predictor:
    """The engine's times for the observations at a set of parameter values, one engine run per
    measured run; counts the evaluations."""

    def __init__(self, engine: str, runs: Sequence[MeasuredRun], jobs: Sequence[Job], obs: Sequence[Observation],
                 fixed: Mapping[str, float]):
        self.engine, self.runs, self.jobs, self.obs, self.fixed = engine, runs, jobs, obs, dict(fixed)
        self.count = 0
        self._last: tuple = (None, [])
        self.pool = None  # a process pool for times_many, where the fit has one

    def results(self, values: Mapping[str, float], chosen: Sequence[int]):
        key = (tuple(sorted(values.items())), tuple(chosen))
        if key == self._last[0]:  # least_squares asks for the residuals, then the Jacobian, at one x
            return self._last[1]
        self.count += 1
        settings = {**self.fixed, **values}
        engine = Des(overrides=settings) if self.engine == "des" else NcclModel(calibration=settings)
        by_run: dict[int, list[int]] = {}
        for i in chosen:
            by_run.setdefault(self.obs[i].run, []).append(i)
        out: dict[int, object] = {}
        for k, indices in by_run.items():
            run, job = self.runs[k], self.jobs[k]
            calls = [call_for_size(run.collective, self.obs[i].nbytes, run.dtype, run.redop, 0, job.nranks)
                     for i in indices]
            results = engine.run_many(job, calls)
            for i, result in zip(indices, results):
                if result.hang is not None or not result.time_us > 0:
                    raise UsageError(f"the {self.engine} engine has no time for {self.obs[i].nbytes} bytes of "
                                     f"{run.collective} ({'it hangs' if result.hang else 'none'})", run.source,
                                     "measurements of calls the engine can run")
                out[i] = result
        self._last = (key, [out[i] for i in chosen])
        return self._last[1]

    def times(self, values: Mapping[str, float], chosen: Sequence[int]) -> np.ndarray:
        """The times nccl-tests would print: the engine's, or the thread's enqueue where longer."""
        return self._floored(np.array([r.time_us for r in self.results(values, chosen)]), chosen)

    def _floored(self, times: np.ndarray, chosen: Sequence[int]) -> np.ndarray:
        return np.maximum(times, [self.obs[i].floor_us for i in chosen])

    def times_many(self, many: Sequence[Mapping[str, float]], chosen: Sequence[int]) -> list[np.ndarray]:
        """times() at each set of values: on the pool's processes where there is one."""
        if self.pool is None or len(many) < 2:
            return [self.times(values, chosen) for values in many]
        self.count += len(many)
        return list(self.pool.map(_worker_times, [(dict(values), list(chosen)) for values in many]))


# A pool process's own predictor, made once by _start_worker from what the jobs were made of (a
# Job does not pickle): process-local, set before the pool takes any task.
_WORKER: dict[str, _Predictor] = {}


def _start_worker(engine: str, runs, made: list[tuple], obs, fixed) -> None:
    from ..job import load_job
    from ..params import read_params
    jobs = [load_job(spec, read_params(raw)) for spec, raw in made]
    _WORKER["predictor"] = _Predictor(engine, runs, jobs, obs, fixed)


def _worker_times(task: tuple[dict, list[int]]) -> np.ndarray:
    values, chosen = task
    return _WORKER["predictor"].times(values, chosen)


def _pool_for(engine: str, runs, jobs, obs, fixed, processes: int):
    """A process pool whose processes each hold the engine and the jobs, or None for one process."""
    if processes < 2:
        return None
    from concurrent.futures import ProcessPoolExecutor
    made = [(job.spec, dict(job.params.raw)) for job in jobs]
    return ProcessPoolExecutor(max_workers=processes, initializer=_start_worker,
                               initargs=(engine, list(runs), made, list(obs), dict(fixed)))


def _differences(predict: _Predictor, params: Sequence[Parameter], x: np.ndarray,
                 values_of: Callable[[np.ndarray], dict[str, float]], chosen: list[int], progress,
                 what: str) -> np.ndarray:
    """d log(time) / d x of every chosen observation for each of `params` (the entries of `x`),
    by forward differences from `x` (values_of turns an x into the engine's values)."""
    base = np.log(predict.times(values_of(x), chosen))
    steps, moved = [], []
    for j, p in enumerate(params):
        steps.append(_step(p, x[j]))
        moved.append(x.copy())
        moved[-1][j] += steps[-1]
    if progress is not None:
        progress(f"{what}: {len(params)} runs of the engine")
    cols = [(np.log(t) - base) / step
            for t, step in zip(predict.times_many([values_of(m) for m in moved], chosen), steps)]
    return np.array(cols).T if cols else np.zeros((len(chosen), 0))


def _step(p: Parameter, x: float) -> float:
    """The finite-difference step from `x`: downwards where the range allows, since a faster link
    or a cheaper step may change nothing when something else bounds the time (a link beside it at
    the same rate), while a slower one always shows."""
    return -_STEP if x - _STEP >= p.x_bounds[0] else _STEP


def _values(params: Sequence[Parameter], x: np.ndarray) -> dict[str, float]:
    return {p.name: p.value(float(v)) for p, v in zip(params, x)}


def _determined(effects: np.ndarray, params: list[Parameter], n_obs: int) -> tuple[list[int], dict[int, str]]:
    """The parameters the data can fit, largest effect first, each adding an effect the others lack;
    and why each other one is left."""
    size = np.max(np.abs(effects), axis=0) if effects.size else np.zeros(len(params))
    order = sorted(range(len(params)), key=lambda j: -size[j])
    kept, why = [], {}
    for j in order:
        if size[j] < MIN_EFFECT:
            why[j] = f"moves no fitted size by {100 * MIN_EFFECT:.0f}%: not determined by these measurements"
            continue
        if len(kept) + 1 >= n_obs:
            why[j] = "more parameters than fitted sizes allow: not determined by these measurements"
            continue
        trial = kept + [j]
        cols = effects[:, trial] / np.linalg.norm(effects[:, trial], axis=0)
        if np.linalg.svd(cols, compute_uv=False)[-1] < _INDEPENDENT:
            why[j] = "its effect is the others' (indistinguishable here): not determined by these measurements"
            continue
        kept.append(j)
    return sorted(kept), why


def _fit_engine(engine: str, runs, jobs, obs: list[Observation], params: list[Parameter], fixed: Mapping[str, float],
                progress, processes: int = 1) -> EngineFit:
    predict = _Predictor(engine, runs, jobs, obs, fixed)
    predict.pool = _pool_for(engine, runs, jobs, obs, fixed, processes)
    try:
        return _fit_with(predict, engine, obs, params, fixed, progress)
    finally:
        if predict.pool is not None:
            predict.pool.shutdown()


def _fit_with(predict: _Predictor, engine: str, obs: list[Observation], params: list[Parameter],
              fixed: Mapping[str, float], progress) -> EngineFit:
    from scipy.optimize import least_squares  # only calibration needs SciPy
    everything = list(range(len(obs)))
    fitted_idx = [i for i, o in enumerate(obs) if not o.held_out]
    measured = np.array([o.measured_us for o in obs])
    x0 = np.array([p.x(p.default) for p in params])
    before = predict.results(_values(params, x0), everything)
    effects = _differences(predict, params, x0, lambda x: _values(params, x), fitted_idx, progress,
                           "the effect of each parameter")
    kept, why = _determined(effects, params, len(fitted_idx))
    target = np.log(measured[fitted_idx])
    free = [params[j] for j in kept]
    held = {j: params[j].default for j in range(len(params)) if j not in kept}

    def values_of(xk: np.ndarray) -> dict[str, float]:
        x = x0.copy()
        x[kept] = xk
        return _values(params, x)

    prior, width = x0[kept], _PRIOR_WIDTH[engine]

    def residuals(xk: np.ndarray) -> np.ndarray:
        data = np.log(predict.times(values_of(xk), fitted_idx)) - target
        return np.concatenate([data, (xk - prior) / width])

    def jacobian(xk: np.ndarray) -> np.ndarray:
        data = _differences(predict, free, xk, values_of, fitted_idx, progress, "fitting")
        return np.vstack([data, np.eye(len(free)) / width])

    sigma: dict[int, float | None] = {}
    if kept:
        lows, highs = zip(*(p.x_bounds for p in free))
        start = np.clip(x0[kept], np.array(lows) + 1e-9, np.array(highs) - 1e-9)
        solution = least_squares(residuals, start, jac=jacobian, bounds=(lows, highs), loss="soft_l1", f_scale=0.05,
                                 x_scale=1.0, ftol=1e-4, xtol=1e-3, gtol=1e-6, max_nfev=12)
        xk = solution.x
        sigma = _uncertainties(solution, kept)
        _check_physical(free, xk)
    else:
        xk = x0[kept]
    after_values = values_of(xk)
    after = predict.results(after_values, everything)
    out_params = []
    for j, p in enumerate(params):
        if j in kept:
            value = after_values[p.name]
            s = sigma.get(j)
            out_params.append(ParamFit(p.name, p.what, p.default, value,
                                       None if s is None else (value + p.offset) * s))
        else:
            out_params.append(ParamFit(p.name, p.what, p.default, held[j], None, why[j]))
    points = tuple(PointFit(o, max(b.time_us, o.floor_us), max(a.time_us, o.floor_us), a.algorithm, a.protocol)
                   for o, b, a in zip(obs, before, after))
    return EngineFit(engine, tuple(out_params), points, tuple(sorted(fixed.items())), predict.count)


def _uncertainties(solution, kept: list[int]) -> dict[int, float | None]:
    """1-sigma of each fitted log value, from the Jacobian at the solution (Gauss-Newton)."""
    jac = solution.jac
    m, n = jac.shape
    if m <= n:
        return {j: None for j in kept}
    dof_var = 2 * solution.cost / (m - n)
    try:
        cov = np.linalg.pinv(jac.T @ jac) * dof_var
    except np.linalg.LinAlgError:
        return {j: None for j in kept}
    return {j: float(math.sqrt(max(cov[k, k], 0.0))) for k, j in enumerate(kept)}


def _check_physical(free: list[Parameter], xk: np.ndarray) -> None:
    """A fit that ends at the edge of a parameter's physical range, pressing beyond it, describes
    hardware other than the system given."""
    for k, p in enumerate(free):
        low, high = p.x_bounds
        at_high = xk[k] >= high - _EDGE
        at_low = xk[k] <= low + _EDGE and p.low > 0  # a cost of 0 is physical; a share or scale of ~0 is not
        if at_high or at_low:
            wanted = "more" if at_high else "less"
            edge = p.high if at_high else p.low
            raise UsageError(f"the fit needs {p.name} ({p.what}) {wanted} than {edge:g}: the system described does "
                             f"not fit the measurements", "calibrate",
                             "a system like the measured one (--system, --gpu, --nodes, --fabric, --nic-gbps, "
                             "--nics-per-node) or measurements of that system")


def _pairs_used(runs, jobs, obs: list[Observation]) -> list[tuple[str, str]]:
    """The algorithm and protocol NCCL runs for each fitted size, in order of first use."""
    seen: dict[tuple[str, str], None] = {}
    model = NcclModel()
    for o in obs:
        if o.held_out:
            continue
        run, job = runs[o.run], jobs[o.run]
        result = model.answer(job, call_for_size(run.collective, o.nbytes, run.dtype, run.redop, 0, job.nranks))
        if result.algorithm != "P2P":
            seen[(result.algorithm, result.protocol)] = None
    return list(seen)


def calibrate(runs: Sequence[MeasuredRun], jobs: Sequence[Job], engines: Sequence[str] = FIT_ENGINES,
              holdout: Holdout = Holdout(), fixed: Mapping[str, float] | None = None, min_nbytes: int = 0,
              max_nbytes: int = 1 << 62, progress: Callable[[str], None] | None = None,
              processes: int = 1) -> Calibration:
    """Each engine of `engines` fitted to `runs`, run `k` measured on `jobs[k]` (see the module
    docstring); `fixed` DES values (`--set`) are kept as given; only sizes from `min_nbytes` to
    `max_nbytes` count. The DES's runs for one Jacobian go to `processes` processes."""
    fixed = dict(fixed or {})
    obs = _observations(runs, jobs, holdout, min_nbytes, max_nbytes)
    fitted = [o for o in obs if not o.held_out]
    if not fitted:
        raise UsageError("every measured size is held out or outside the sizes asked for", "--holdout / -b / -e",
                         "a hold-out that leaves sizes to fit")
    notes = []
    for run, job in zip(runs, jobs):  # rank 0's "Channel xx/NN" lines: what NCCL built there
        if run.facts.channels and run.facts.channels != job.comm.n_channels:
            notes.append(f"{run.source}: NCCL ran {run.facts.channels} channels, the model plans "
                         f"{job.comm.n_channels}: the system described differs from the one measured")
    if holdout and len(fitted) == len(obs):
        notes.append("--holdout matched no measured size: nothing was held out")
    fits = []
    for engine in engines:
        if engine == "des":
            from ..model.engine import default_params  # SimPy loads only for the DES
            params = [p for p in des_parameters(default_params(jobs[0])) if p.name not in fixed]
            fits.append(_fit_engine("des", runs, jobs, obs, params, fixed, progress, processes))
        else:
            usable = [o for o in obs if not COLLECTIVE_TABLE[runs[o.run].collective].p2p]
            if not [o for o in usable if not o.held_out]:
                notes.append("nccl: NCCL's time model prices no point-to-point call; its fit needs a collective")
                continue
            params = model_parameters(_pairs_used(runs, jobs, usable))
            fits.append(_fit_engine("nccl", runs, jobs, usable, params, {}, progress))
    sources = tuple(f"{r.source}: {r.collective}, {j.nranks} ranks on {j.nodes} node{'s' if j.nodes > 1 else ''}, "
                    f"{len(r.points)} sizes" for r, j in zip(runs, jobs))
    return Calibration(sources, tuple(fits), tuple(notes), tuple(runs), tuple(jobs))


# --- text ----------------------------------------------------------------------------------------

def _pct(v: float | None) -> str:
    return f"{v:.1f}%" if v is not None else "n/a"


def _size(nbytes: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift}{unit}"
    return str(nbytes)


def format_calibration(cal: Calibration) -> list[str]:
    """The calibration as a report: the runs, then per engine each parameter before and after,
    each size's error before and after, and the medians on what was fitted and what was held out."""
    lines = ["# nicksim calibrate"]
    lines += [f"#   {s}" for s in cal.sources]
    for note in cal.notes:
        lines.append(f"# note: {note}")
    for f in cal.fits:
        lines.append(f"# engine {f.engine}: {sum(p.fitted for p in f.params)} parameters fitted, "
                     f"{f.evaluations} runs of the engine")
        lines.append(f"#   {'parameter':<24} {'NCCL':>10} {'fitted':>10} {'+/-':>9}  what")
        for p in f.params:
            if p.fitted:
                s = f"{p.sigma:9.3g}" if p.sigma is not None else f"{'n/a':>9}"
                lines.append(f"#   {p.name:<24} {p.default:10.4g} {p.value:10.4g} {s}  {p.what}")
        for p in f.params:
            if not p.fitted:
                lines.append(f"#   {p.name:<24} {p.default:10.4g} {'(left)':>10} {'':>9}  {p.left_because}")
        for name, value in f.fixed:
            lines.append(f"#   {name:<24} {'':>10} {value:10.4g} {'(given)':>9}")
        lines.append(f"#   {'size':>8} {'collective':<15} {'ranks':>5} {'meas_us':>10} {'before_us':>10} "
                     f"{'after_us':>10} {'before%':>8} {'after%':>8}  plan")
        for p in f.points:
            run = cal.runs[p.obs.run] if cal.runs else None
            coll = run.collective if run else ""
            ranks = run.nranks if run and run.nranks else ""
            lines.append(f"#   {_size(p.obs.nbytes):>8} {coll:<15} {ranks!s:>5} {p.obs.measured_us:10.2f} "
                         f"{p.before_us:10.2f} {p.after_us:10.2f} {p.error_before_pct:8.1f} {p.error_after_pct:8.1f}  "
                         f"{p.algorithm}/{p.protocol}{'  held out' if p.obs.held_out else ''}")
        fit_b, fit_a = f.medians(False)
        lines.append(f"# {f.engine}: fitted sizes, median |busbw error| {_pct(fit_b)} before, {_pct(fit_a)} after")
        held_b, held_a = f.medians(True)
        if held_b is not None:
            lines.append(f"# {f.engine}: held-out sizes, median |busbw error| {_pct(held_b)} before, "
                         f"{_pct(held_a)} after" + ("  OVER-FITTED: better on what it saw, worse on what it did not"
                                                     if f.over_fitted else ""))
    return lines


def calibration_text(cal: Calibration) -> str:
    """The calibration file: the report as comments, `[set]` for the DES, `[nccl]` for the model."""
    out = ["\n".join(format_calibration(cal))]
    for engine, table in (("des", "set"), ("nccl", "nccl")):
        f = cal.fit_of(engine)
        if f is None:
            continue
        out.append(f"[{table}]")
        out += [f'"{name}" = {value:.6g}' for name, value in f.values().items()]
    return "\n".join(out) + "\n"


def engine_values(doc: Mapping, where: str) -> dict[str, dict[str, float]]:
    """A calibration file's tables, checked: {"des": [set], "nccl": [nccl]}."""
    from ..model.hwparams import check_override
    from ..tuning.calibrated import check_model_value
    out: dict[str, dict[str, float]] = {"des": {}, "nccl": {}}
    for engine, table, check in (("des", "set", check_override), ("nccl", "nccl", check_model_value)):
        values = doc.get(table, {})
        if not isinstance(values, dict):
            raise UsageError(f"[{table}] is not a table", where, f"[{table}] with NAME = number lines")
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UsageError(f"{name} = {value!r}", f"{where}: [{table}]", "a number")
            try:
                check(name, float(value), f"{where}: [{table}] {name}")
            except NickSimError:
                raise
            out[engine][name] = float(value)
    if not out["des"] and not out["nccl"]:
        raise UsageError("no [set] or [nccl] table", where, "a calibration file (nicksim calibrate -o)")
    return out


# --- records (tables, the dashboard) ---------------------------------------------------------------

def point_records(cal: Calibration) -> list[dict]:
    """A record per engine and observation: the run, the size, measured and predicted times and bus
    bandwidths before and after, the errors, whether it was held out, and the plan."""
    from ..formats.report import measurement
    out = []
    for f in cal.fits:
        for p in f.points:
            run, job = cal.runs[p.obs.run], cal.jobs[p.obs.run]

            def busbw(time_us: float) -> float:
                return measurement(run.collective, job.nranks, p.obs.nbytes, time_us).busbw_gbps
            out.append({"engine": f.engine, "source": run.source, "collective": run.collective, "nranks": job.nranks,
                        "nbytes": p.obs.nbytes, "held_out": p.obs.held_out, "measured_us": p.obs.measured_us,
                        "before_us": p.before_us, "after_us": p.after_us,
                        "measured_busbw_gbps": busbw(p.obs.measured_us),
                        "before_busbw_gbps": busbw(p.before_us), "after_busbw_gbps": busbw(p.after_us),
                        "error_before_pct": p.error_before_pct, "error_after_pct": p.error_after_pct,
                        "algorithm": p.algorithm, "protocol": p.protocol})
    return out


def parameter_records(cal: Calibration) -> list[dict]:
    """A record per engine and parameter: NCCL's value, the fitted one and its 1-sigma, or why it
    was left at NCCL's value; and the values given (`--set`)."""
    out = []
    for f in cal.fits:
        out += [{"engine": f.engine, "parameter": p.name, "what": p.what, "nccl": p.default, "value": p.value,
                 "sigma": p.sigma, "fitted": p.fitted, "left_because": p.left_because} for p in f.params]
        out += [{"engine": f.engine, "parameter": name, "what": "given", "nccl": None, "value": value, "sigma": None,
                 "fitted": False, "left_because": "given"} for name, value in f.fixed]
    return out
