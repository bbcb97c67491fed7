"""Engines answer calls: NCCL's own time model, the discrete-event simulation and the real backend,
peers behind one interface and one registry.

Every engine promises `run(job, call) -> CallResult` and `run_many(job, calls, on_result)`: the
calls' results in order, ending after a call that hangs (its result carries the HangReport).
`engine_named(name, **options)` makes one from ENGINES ("model" is accepted for "nccl"):

* "nccl" — NCCL's time model, what ncclGroupSimulateEnd would say (tuning/): the algorithm,
  protocol, channels and threads NCCL picks and its estimated time. NCCL prices no point-to-point
  call; sendrecv and alltoall get nicksim's own estimate (tuning/p2p.py), which the result says.
* "des" — the call's plan run through the discrete-event model of the fabric (model/); options:
  DES parameter overrides, faults, stragglers, the watchdog limit, whether to trace.
* "real" — the call's plan run for real, a process per rank on this host moving and checking
  real data (realhw/); options: nccl-tests' iterations, warm-up and check.

SimPy and the real backend load only when their engine runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from .calls import Call
from .errors import UsageError
from .job import Job
from .plan.p2p import p2p_summary
from .tuning.calibrated import calibrated_time_us, time_calibration
from .tuning.choose import choose
from .tuning.p2p import p2p_time_us

__all__ = ["CallResult", "Engine", "NcclModel", "Des", "Real", "ENGINES", "ENGINE_ALIASES", "engine_named",
           "canonical_engine", "engine_result", "model_result"]


@dataclass(frozen=True)
class CallResult:
    """One call's answer: its time in microseconds and the plan summary nccl-tests' JSON carries
    (`algorithm protocol nchannels nthreads`). `estimate` names where the time comes from: "nccl"
    (NCCL's formula), "nicksim-p2p" (nicksim's estimate where NCCL has none), "des" or "real".
    `in_place_time_us` is the in-place call's time where the engine timed it apart (the real
    backend; None: the same as out of place), `nwrong` the wrong elements out of place and in place
    where the engine checked the data. `detail` is the engine's own record of the call: the DES run
    (links, trace, HangReport) or the real run's trace spans."""

    call: Call
    time_us: float
    algorithm: str
    protocol: str
    n_channels: int
    n_threads: int
    estimate: str = "nccl"
    detail: object = None
    in_place_time_us: float | None = None
    nwrong: tuple[int | None, int | None] = (None, None)

    @property
    def hang(self):
        """The HangReport where the call never finished (the DES), else None."""
        return getattr(self.detail, "hang", None)

    def plan_dict(self) -> dict:
        return {"algorithm": self.algorithm, "protocol": self.protocol, "nchannels": self.n_channels,
                "nthreads": self.n_threads}

    def record(self) -> dict:
        """The result as one plain record (for tables and DataFrames)."""
        return {"collective": self.call.collective, "nbytes": self.call.nbytes, "count": self.call.count,
                "dtype": self.call.dtype, "nranks": self.call.nranks, "time_us": self.time_us,
                "in_place_time_us": self.in_place_time_us, **self.plan_dict(), "estimate": self.estimate,
                "hang": self.hang is not None}


class Engine:
    """What every engine promises: `run_many(job, calls, on_result)` answers the calls in order
    (calling `on_result` with each as it is ready) and stops after one that hangs; `run(job,
    call)` answers one. An engine makes what it needs of a job once per run (`prepare`, where a
    set-up that cannot work fails before any call runs; run_many takes it ready made) and answers
    each call from it (`answer`). `describe(job)` says in one phrase what answers and on
    what, `notes(job)` what the engine could not use here."""

    name = ""
    doc = ""
    ranks_log = False  # whether the engine's own rank processes write the NCCL_DEBUG lines

    def prepare(self, job: Job, calls: Sequence[Call] = ()):
        return None

    def answer(self, job: Job, call: Call, prepared) -> CallResult:
        raise NotImplementedError

    def run_many(self, job: Job, calls: Sequence[Call], on_result: Callable[[CallResult], None] | None = None,
                 prepared=None) -> list[CallResult]:
        prepared = self.prepare(job, calls) if prepared is None else prepared
        out = []
        for call in calls:
            result = self.answer(job, call, prepared)
            out.append(result)
            if on_result is not None:
                on_result(result)
            if result.hang is not None:
                break
        return out

    def run(self, job: Job, call: Call) -> CallResult:
        return self.run_many(job, [call])[0]

    def describe(self, job: Job) -> str:
        nodes = f"{job.nodes} node{'s' if job.nodes > 1 else ''}"
        return (f"engine {self.name}, {job.system_name}, {job.nranks} ranks ({nodes} x "
                f"{len(job.paths.node_system.gpus())} GPUs), NCCL {job.system.rules.version.line}")

    def notes(self, job: Job) -> list[str]:
        return []


@dataclass
class NcclModel(Engine):
    """NCCL's time model: each call answered as ncclGroupSimulateEnd would; with a `calibration`
    (tuning/calibrated.py names), NCCL's pick priced with the calibrated constants."""

    calibration: Mapping[str, float] = field(default_factory=dict)
    name = "nccl"
    doc = "NCCL's own time model (what ncclGroupSimulateEnd says)"

    def prepare(self, job: Job, calls: Sequence[Call] = ()):
        return time_calibration(self.calibration)

    def answer(self, job: Job, call: Call, prepared=None) -> CallResult:
        if call.info.p2p:
            protocol, n_channels = p2p_summary(job, call)
            return CallResult(call, p2p_time_us(job, call), "P2P", protocol, n_channels, 640, "nicksim-p2p")
        choice = choose(job.comm, call)
        time_us = choice.time_us
        if prepared:  # a calibration: the same pick, at what it costs on the measured system
            time_us = calibrated_time_us(job.comm, call, choice.algorithm, choice.protocol, prepared)
        return CallResult(call, time_us, choice.algorithm, choice.protocol, choice.max_channels,
                          choice.n_threads, "nccl-calibrated" if prepared else "nccl")


@dataclass
class Des(Engine):
    """The discrete-event simulation: NCCL's plan of each call run through the fabric, with
    `overrides` of the DES parameters (calibration, --set), `faults` and `stragglers` as
    `perf --fault/--straggler` spell them, the watchdog limit and whether to record a trace."""

    overrides: Mapping[str, float] = field(default_factory=dict)
    faults: Sequence[str] = ()
    stragglers: Sequence[str] = ()
    timeout_us: float = 600e6
    trace: bool = False
    name = "des"
    doc = "the discrete-event simulation of the fabric"

    def prepare(self, job: Job, calls: Sequence[Call] = ()):
        """The DES set-up of `job` (model.engine.DesSetup): its parameters, faults and stragglers,
        made once for every call of a run (what it derives is shared between them)."""
        from .model.engine import default_params, des_setup  # SimPy loads only for the DES
        from .model.hwparams import with_overrides
        return des_setup(job, with_overrides(default_params(job), dict(self.overrides)), self.faults,
                         self.stragglers, self.timeout_us, self.trace)

    def answer(self, job: Job, call: Call, prepared) -> CallResult:
        from .model.engine import simulate
        run = simulate(prepared, call)
        plan = run.plan
        return CallResult(call, run.time_us, plan.algorithm, plan.protocol, plan.max_channels, plan.n_threads,
                          "des", run)


@dataclass
class Real(Engine):
    """The real backend: NCCL's plan of each call run by a process per rank on this host, moving
    real data over shared memory (or the GPUs, NICKSIM_DEVICE=gpu), `iters` timed iterations after
    `warmup_iters`, every element checked where `check`; `trace` records the last call's steps."""

    iters: int = 20
    warmup_iters: int = 1
    check: int = 1
    trace: bool = False
    name = "real"
    ranks_log = True
    doc = "the job's plans run by a process per rank on this host, moving and checking real data"

    def prepare(self, job: Job, calls: Sequence[Call] = ()):
        """The checks made before any rank starts: the job fits on this host, the device asked for
        (NICKSIM_DEVICE) is there, and every call's plan is one the backend can run."""
        from .realhw.runner import check_runnable_here  # the real backend loads only when it runs
        check_runnable_here(job, calls, self.check)
        return True

    def run_many(self, job: Job, calls: Sequence[Call], on_result=None, prepared=None) -> list[CallResult]:
        from .realhw.runner import run_job
        if prepared is None:
            self.prepare(job, calls)
        return run_job(job, calls, self.iters, self.warmup_iters, self.check, self.trace, on_result, CallResult)

    def describe(self, job: Job) -> str:
        from .realhw.runner import spawned_layout
        return (f"the plans of {job.system_name} ({job.nranks} ranks, {job.nodes} node(s)) run by "
                f"{spawned_layout(job)}, NCCL {job.spec.nccl_version} plans")

    def notes(self, job: Job) -> list[str]:
        from .realhw.runner import unused_here
        unused = unused_here(job.params)
        return [f"not used here: {'; '.join(unused)}"] if unused else []


ENGINES: dict[str, type[Engine]] = {"nccl": NcclModel, "des": Des, "real": Real}
ENGINE_ALIASES: dict[str, str] = {"model": "nccl"}  # the time model's name before "nccl"


def canonical_engine(name: str, where: str = "--engine") -> str:
    """The registry's name for `name` (an alias resolved), or a UsageError listing them."""
    key = ENGINE_ALIASES.get(str(name).strip().lower(), str(name).strip().lower())
    if key not in ENGINES:
        raise UsageError(f"engine '{name}' is not available", where,
                         ", ".join(ENGINES) + " (model is nccl's former name)")
    return key


def engine_named(name: str, **options) -> Engine:
    """The engine `name` made with its `options` (see each engine's fields)."""
    cls = ENGINES[canonical_engine(name)]
    try:
        return cls(**options)
    except TypeError:
        raise UsageError(f"options {', '.join(options)}", f"engine {cls.name}",
                         "the fields of nicksim.engines." + cls.__name__) from None


def engine_result(job: Job, call: Call, engine: str = "nccl", **options) -> CallResult:
    """`call` answered by the named engine."""
    return engine_named(engine, **options).run(job, call)


def model_result(job: Job, call: Call) -> CallResult:
    """NCCL's decision and estimated time for `call` on `job` (the "nccl" engine)."""
    return NcclModel().answer(job, call)
