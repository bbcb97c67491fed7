"""An nccl-tests run answered by an engine: sizes, rows, and the comparison with a measured run.

`sweep_sizes` steps sizes as nccl-tests does (-b/-e with -f or -i); `perf_rows(job, ...)` asks
the engine for each size and returns nccl-tests ResultRows carrying the plan; `compare(rows,
measured)` pairs model rows with measured rows of the same size and says, per row and per size
band, how far apart their bus bandwidths are.
"""
from __future__ import annotations

import time
from dataclasses import astuple, dataclass, replace
from typing import Callable

from ..calls import COLLECTIVE_TABLE, call_for_size
from ..constants.tuning_tables import PROTOCOLS
from ..engines import CallResult, Engine, engine_named
from ..errors import UsageError
from ..files import read_input
from ..job import Job
from ..constants.device import CUDA_DEVICES, CudaDevice
from ..constants.host import HOST_CALL_US
from ..formats.report import (NCCL_TESTS_LATEST, IterStats, MeasuredTable, ResultRow, RankDevice, RunSetup,
                              claim_json_path, closing_lines, format_row, measurement, memory_max_nbytes,
                              nccl_version_code, preamble, read_results, reduced_sizes, reducing_lines, results_json,
                              table_footer, table_header, nccl_tests_json, nccl_tests_release, TIME_FORMAT)
from ..formats.tables import Records
from ..tuning.cost import format_tuning_table

__all__ = ["parse_size", "sweep_sizes", "MAX_SIZES", "perf_rows", "result_row_of", "host_enqueue_us",
           "PerfOptions", "Perf", "run_perf", "Comparison", "compare", "format_comparison", "size_band",
           "measured_table", "measured_table_of", "all_dtypes", "ALL_REDOPS", "UNMODELLED_REDOPS",
           "release_at_least", "NICKSIM"]


def parse_size(text, where: str) -> int:
    """nccl-tests' size grammar: a byte count with an optional K, M, G or T (powers of 1024)."""
    t = str(text).strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        value = int(float(t[:-1] if scale != 1 else t) * scale)
    except (ValueError, OverflowError):  # words, and inf or nan, are no size
        raise UsageError(f"'{text}' is not a size", where, "bytes like 8, 64K, 256M, 8G") from None
    if value < 0:
        raise UsageError(f"size {text}", where, "a size >= 0")
    return value


# The most sizes one run answers: a bound on time and memory (nccl-tests has none; -i 1 over a
# range of megabytes would never end).
MAX_SIZES = 10_000


def sweep_sizes(min_nbytes: int, max_nbytes: int, step_factor: int | None = 2, step_nbytes: int | None = None) \
        -> list[int]:
    """nccl-tests' size loop: from -b to -e, multiplying by -f or adding -i."""
    if max_nbytes < min_nbytes:
        raise UsageError(f"-e {max_nbytes} is below -b {min_nbytes}", "-b/-e", "-e at least -b")
    if step_nbytes:
        count = (max_nbytes - min_nbytes) // step_nbytes + 1
        if count > MAX_SIZES:
            raise UsageError(f"-b {min_nbytes} to -e {max_nbytes} by -i {step_nbytes} is {count} sizes", "-i",
                             f"a step that gives at most {MAX_SIZES} sizes")
    sizes, size = [], min_nbytes
    while size <= max_nbytes:
        sizes.append(size)
        if step_nbytes is not None:
            if step_nbytes == 0:
                break
            size += step_nbytes
        else:
            if size == 0:
                break
            size *= step_factor or 2
    return sizes


def perf_rows(job: Job, collective: str, sizes: list[int], dtype: str = "float", redop: str = "sum",
              root: int = 0, engine: Engine | str = "nccl",
              on_row: Callable[[ResultRow | None, CallResult], None] | None = None, prepared=None,
              gpus_per_thread: int = 1) -> list[tuple[ResultRow | None, CallResult]]:
    """One nccl-tests row per size, answered by `engine` (a name, or an Engine made with its
    options), with the engine's plan attached; `on_row(row, result)` hears of each as it is ready.
    A run that hangs ends the list with (None, its result); `prepared` is the engine's set-up of
    the job where it was made already. nccl-tests queues its iterations back to back, so a priced
    row takes the longer of the GPUs' time and what one thread spends enqueuing the call on its
    `gpus_per_thread` GPUs (-g, `host_enqueue_us`); a measured row is what was measured."""
    engine = engine_named(engine) if isinstance(engine, str) else engine
    job.graphs  # a job without GPUs says so before anything else does
    if not 0 <= root < job.nranks:
        raise UsageError(f"root {root} is not a rank of this job", "-r", f"0..{job.nranks - 1}")
    out: list[tuple[ResultRow | None, CallResult]] = []
    floor_us = 0.0 if engine.name == "real" else host_enqueue_us(gpus_per_thread)

    def done(result: CallResult) -> None:
        row = None if result.hang is not None else result_row_of(result, floor_us)
        out.append((row, result))
        if on_row is not None:
            on_row(row, result)

    engine.run_many(job, [call_for_size(collective, size, dtype, redop, root, job.nranks) for size in sizes], done,
                    prepared)
    return out


def host_enqueue_us(gpus_per_thread: int) -> float:
    """What one nccl-tests thread spends per iteration enqueuing the call on its `gpus_per_thread`
    GPUs (constants/host.py): the least time an iteration of its timed loop can take."""
    return gpus_per_thread * HOST_CALL_US


def result_row_of(result: CallResult, floor_us: float = 0.0) -> ResultRow:
    """The nccl-tests row of one answered call: out of place and in place (the same call to an
    engine that prices one; a zero-byte call still costs a launch in nccl-tests), each taking at
    least `floor_us` (the thread's enqueue, `host_enqueue_us`)."""
    call = result.call
    out = measurement(call.collective, call.nranks, call.nbytes, max(result.time_us, floor_us, 1e-3),
                      result.nwrong[0])
    inp = out if result.in_place_time_us is None else measurement(
        call.collective, call.nranks, call.nbytes, max(result.in_place_time_us, floor_us, 1e-3), result.nwrong[1])
    return ResultRow(call.nbytes, call.count, call.dtype, call.redop, call.root, out, inp, result.plan_dict())


@dataclass(frozen=True)
class PerfOptions:
    """nccl-tests' flags for one run: the collective, the sizes (-b/-e with -f or -i), type, reduction,
    root, iterations, warm-up, check and aggregation, and whether to append NCCL's choice to each
    row (--plan) and print the TUNING table first; then the nccl-tests release whose text to
    write, the step as given (-f or -i), the types, reductions and roots of -d/-o/-r all (empty:
    just dtype, redop, root), -t and -g, and -G -u -z -p -I -K -S -M -N as given; `json_path` is
    -J's file (written by the caller from Perf.json_doc, at the path Perf.json_path names)."""

    collective: str
    sizes: tuple[int, ...]
    dtype: str = "float"
    redop: str = "sum"
    root: int = 0
    iters: int = 20
    warmup_iters: int = 1
    check: int = 1
    agg_iters: int = 1
    min_nbytes: int = 8
    max_nbytes: int = 8 << 30
    step: str = "2(factor)"
    annotate: bool = False
    print_tuning: bool = False
    tests_version: str = NCCL_TESTS_LATEST
    step_factor: int | None = 2
    step_nbytes: int | None = None
    dtypes: tuple[str, ...] = ()
    redops: tuple[str, ...] = ()
    roots: tuple[int, ...] = ()
    nthreads: int = 1
    ngpus: int = 1
    graph: int = 0
    unalign: int = 0
    blocking: int = 0
    parallel_init: int = 0
    per_iter: int = 0
    per_iter_skip: int = 0
    timestamps: int = 0
    memory_report: int = 0
    run_cycles: int = 1
    json_path: str | None = None
    argv: tuple[str, ...] = ()


@dataclass(frozen=True)
class Perf(Records):
    """A finished nccl-tests run: which engine answered, on what, and a row and a result per size
    (`hang`: the DES's HangReport where the run hung, its last size then has no row); with what
    -J needs: the setup nccl-tests prints, its release, the file claimed for the JSON (None where
    none was asked or it could not be made), the run's start and end, the settings it read
    (KEY=VALUE) and each row's -I statistics where -I was on."""

    collective: str
    engine: str
    system: str
    nranks: int
    nccl_version: str
    rows: tuple[ResultRow, ...]
    results: tuple[CallResult, ...]
    hang: object = None
    setup: RunSetup | None = None
    tests_version: str = NCCL_TESTS_LATEST
    json_path: str | None = None
    times: tuple[str, str] = ("", "")
    env: tuple[str, ...] = ()
    per_iter: tuple | None = None
    argv: tuple[str, ...] = ()

    def records(self) -> list[dict]:
        """One plain record per answered size: the call, the plan, time, algbw and busbw."""
        out = []
        for row, result in zip(self.rows, self.results):
            m = row.out_of_place
            out.append({**result.record(), "engine": self.engine, "system": self.system,
                        "algbw_gbps": m.algbw_gbps, "busbw_gbps": m.busbw_gbps,
                        "in_place_busbw_gbps": row.in_place.busbw_gbps if row.in_place else None})
        return out

    def json_doc(self) -> dict:
        """nccl-tests' -J document as its release writes it (formats.report.nccl_tests_json), nicksim's
        own fields under "nicksim": the collective, engine, system, ranks and NCCL release line,
        and each row's plan under its result's "nicksim". Without a setup (a Perf made by hand),
        the older results_json shape."""
        own = {"collective": self.collective, "engine": self.engine, "system": self.system, "nranks": self.nranks,
               "nccl_version": self.nccl_version}
        if self.setup is None:
            return results_json(self.collective, self.rows, own)
        doc = nccl_tests_json(self.setup, self.rows, version=self.tests_version, args=("nicksim", *self.argv),
                         env=self.env, start_time=self.times[0], end_time=self.times[1], per_iter=self.per_iter,
                         threads=len(self.setup.processes) * self.setup.nthreads, extra=own)
        for item, row in zip(doc["results"], self.rows):
            if row.plan is not None:
                item["nicksim"] = {"plan": dict(row.plan)}
        return doc


def _decision(job: Job, result: CallResult) -> str | None:
    """enqueue.cc (2.22): the decision rank 0 logs for each call under NCCL_DEBUG_SUBSYS=TUNING."""
    if result.estimate != "nccl" or result.algorithm not in job.comm.table.algorithms:
        return None
    return (f"{result.call.nbytes} Bytes -> Algo {job.comm.table.algorithms.index(result.algorithm)} proto "
            f"{PROTOCOLS.index(result.protocol)} time {result.time_us:f}")


def _plan_note(result: CallResult) -> str:
    """--plan's note after a row's last column: NCCL's choice, and where the time comes from if not
    its formula."""
    return (f"  # {result.algorithm}/{result.protocol} {result.n_channels}ch {result.n_threads}t"
            + ("" if result.estimate == "nccl" else f" ({result.estimate})"))


def _log_warmup(logger, job: Job, options: PerfOptions, dtype: str, redop: str, root: int, max_nbytes: int) -> None:
    """nccl-tests' warm-up (common.cu TimeTest): warmup_iters calls of every size from -b to -e by
    factors of 2, each logged with the algorithm NCCL's time model picks for it."""
    if logger is None or not logger.active:
        return
    model = engine_named("nccl")
    size = max(options.min_nbytes, 1)
    while size <= max_nbytes:
        call = call_for_size(options.collective, size, dtype, redop, root, job.nranks)
        algorithm = model.run(job, call).algorithm
        for _ in range(options.warmup_iters):
            logger.call(call, algorithm)
        size *= 2


# Where nicksim writes the line nccl-tests writes with a made-up number, and its own notes: every
# line of its own starts with NICKSIM (formats.report's rule).
NICKSIM = "# nicksim"


def _host_bus_ids(job: Job) -> list[str]:
    """The bus ids of one host's GPUs in local-rank order, from the host's whole topology (a host
    NCCL splits into domains has GPUs its rank-0 view leaves out)."""
    found = []
    for node in job.filled.doc.root.iter():
        gpu = node.find("gpu") if node.tag == "pci" else None
        if gpu is not None and gpu.get("rank") is not None and node.get("busid"):
            found.append((int(gpu.get("rank")), node.get("busid").lower()))
    host_gpus = job.nranks // job.spec.nodes
    if len(found) != host_gpus:  # the job's view of a node, for every node
        system = job.paths.node_system
        found = [(system.nodes[g].gpu.rank, system.nodes[g].gpu.busid) for g in system.gpus()]
    return [busid for _, busid in sorted(found)] * (host_gpus // max(len(found), 1))


def _cuda_device(job: Job) -> CudaDevice | None:
    """What CUDA says of the job's GPUs (one model throughout), None where nicksim does not know it."""
    system = job.paths.node_system
    models = {system.nodes[g].gpu.model for g in system.gpus()}
    return CUDA_DEVICES.get(models.pop()) if len(models) == 1 else None


def _processes(job: Job, options: PerfOptions, name: str) -> tuple[tuple[RankDevice, ...], ...]:
    """The job's ranks as nccl-tests' processes of -t x -g GPUs each, consecutive ranks on one host:
    each rank's host, process id and CUDA device as nicksim's NCCL log lines make them up
    (node-NN, 4100 + the process's first rank, the local rank), its GPU's bus id and CUDA name."""
    per_process = options.nthreads * options.ngpus
    host_gpus = job.nranks // job.spec.nodes
    if host_gpus % per_process:
        raise UsageError(f"-t {options.nthreads} -g {options.ngpus}: a node's {host_gpus} GPUs do not split into "
                         f"processes of {per_process}", "-t/-g", f"-t x -g dividing {host_gpus} (--gpus-per-node)")
    bus_ids = _host_bus_ids(job)
    processes = []
    for first in range(0, job.nranks, per_process):
        processes.append(tuple(RankDevice(rank, 0, 4100 + first, f"node-{rank // host_gpus:02d}", rank % host_gpus,
                                          bus_ids[rank % host_gpus], name)
                               for rank in range(first, first + per_process)))
    return tuple(processes)


def all_dtypes(job: Job, release: str = NCCL_TESTS_LATEST) -> tuple[str, ...]:
    """-d all: nccl-tests' types in its order (src/common.cu test_typenames): bfloat16 for NCCL
    2.10+ (every release nicksim models), f8e4m3 and f8e5m2 from nccl-tests 2.15.0 for NCCL 2.24+
    on GPUs of compute capability 9.0 or more (minCudaArch)."""
    types = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16")
    system = job.paths.node_system
    sm = min((system.nodes[g].gpu.sm for g in system.gpus()), default=0)
    if release_at_least(release, "2.15.0") and job.system.rules.version.at_least(24) and sm >= 90:
        types += ("f8e4m3", "f8e5m2")
    return types


# -o all: nccl-tests' reductions in its order (test_opnames; avg from NCCL 2.10, mulsum from 2.11),
# and the one nicksim does not model (ncclRedOpCreatePreMulSum).
ALL_REDOPS = ("sum", "prod", "max", "min", "avg", "mulsum")
UNMODELLED_REDOPS = ("mulsum",)


def release_at_least(version: str, first: str) -> bool:
    """Whether nccl-tests `version` is `first` or later."""
    def key(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split("."))
    return key(nccl_tests_release(version)) >= key(first)


def _iter_stats(time_us: float, iters: int, skip: int, processes: int) -> IterStats:
    """-I's summary where every iteration takes the same time (the engines price one call)."""
    times = (time_us,) * iters
    return IterStats(time_us, time_us, time_us, time_us, time_us, time_us, 0.0, 0.0, times,
                     (times,) * processes if processes > 1 else ())


def run_perf(job: Job, engine: Engine | str, options: PerfOptions, emit: Callable[[str], None] = lambda line: None,
             logger=None, on_ready: Callable[[], None] | None = None) -> Perf:
    """An nccl-tests run answered by `engine`, its text written line by line to `emit` as each size
    completes, as nccl-tests `options.tests_version` prints it: nicksim's own lines (each starting
    "# nicksim": what answers, on what, what is made up or not checked), `# Writing JSON output`
    where -J claimed a file, nccl-tests' preamble with a device line per rank, `# Reducing
    maxBytes` where the GPUs' memory holds less than -e asks (sizes above it are not run), the
    TUNING table where asked, the header, a row per size for each type, reduction and root asked
    (-d/-o/-r all loop as nccl-tests does; -N repeats the sizes), with NCCL's choice after the
    last column where `options.annotate`, the footer and closing lines, then what the engine says
    of the run (the DES's collapsed nodes, a hang). `logger` (formats.joblog.JobLogger) writes the
    NCCL_DEBUG lines every rank would: init, the warm-up, each call, destroy. `on_ready()` is
    called once the engine has accepted the job (a refusal is then the only thing said)."""
    engine = engine_named(engine) if isinstance(engine, str) else engine
    logger = None if engine.ranks_log else logger  # a real run's ranks write their own
    collective = options.collective
    info = COLLECTIVE_TABLE[collective]
    version = nccl_tests_release(options.tests_version)
    job.graphs  # a job without GPUs says so before anything else does
    dtypes = options.dtypes or (options.dtype,)
    redops = tuple(o for o in options.redops or (options.redop,) if o not in UNMODELLED_REDOPS) \
        if info.prints_redop else ("sum",)
    roots = (options.roots or (options.root,)) if info.rooted else (0,)
    for root in roots:
        if not 0 <= root < job.nranks:
            raise UsageError(f"root {root} is not a rank of this job", "-r", f"0..{job.nranks - 1}")
    if options.per_iter and engine.name == "real":
        raise UsageError("-I 1 needs each iteration's time, which the real engine does not keep", "-I",
                         "-I 0 with --engine real")
    device = _cuda_device(job)
    processes = _processes(job, options, device.name if device else "(GPU model unknown to nicksim)")
    setup = RunSetup(f"{collective}_perf", nccl_version_code(*astuple(job.system.rules.version)),
                     options.min_nbytes, options.max_nbytes, options.step_factor, options.step_nbytes,
                     options.warmup_iters, options.iters, options.agg_iters, 0, options.graph, options.unalign,
                     options.blocking, options.parallel_init, options.per_iter, options.per_iter_skip,
                     options.nthreads, options.ngpus, processes)
    # The model and the DES move no data, so nothing is checked: their text says validation 0 and
    # #wrong N/A, as nccl-tests -c 0 prints, however -c was given. The real engine checks (-c).
    checked = options.check if engine.name == "real" else 0
    setup = replace(setup, check=checked)
    sizes, reduced = list(options.sizes), None
    if device is not None:  # the memory rule takes -c as given: the buffers of the run asked for
        reduced = reduced_sizes(options.min_nbytes, options.max_nbytes,
                                memory_max_nbytes(device.total_global_mem, options.check, version), version)
        if reduced is not None:
            low, high = reduced
            sizes = [s for s in sizes if low <= s <= high] or ([high] if low == high else [])
    combos = [(d, o, r) for d in dtypes for o in redops for r in roots]
    calls = [call_for_size(collective, size, d, o, r, job.nranks) for d, o, r in combos for size in sizes]
    prepared = engine.prepare(job, calls)  # a set-up that cannot work says so before the header
    if on_ready is not None:
        on_ready()
    priced = not info.p2p
    emit(f"{NICKSIM} perf {collective}: {engine.describe(job)}")
    for note in engine.notes(job):
        emit(f"{NICKSIM}: {note}")
    emit(f"{NICKSIM}: hosts and pids are made up (node-NN, 4100 + a process's first rank); bus ids and GPU names "
         "are the system's")
    if options.check and not checked:
        emit(f"{NICKSIM}: -c {options.check}: the {engine.name} engine moves no data: nothing is checked, so "
             "validation 0 and #wrong N/A (as nccl-tests -c 0)")
    if device is None:
        emit(f"{NICKSIM}: the GPUs' memory is not known to nicksim: no size is dropped for memory")
    elif reduced is not None and device.source == "nominal":
        emit(f"{NICKSIM}: memory is {device.name}'s nominal {device.total_global_mem / (1 << 30):g} GiB; CUDA "
             "reports a little less, so the real cut comes a little lower")
    left_out = [o for o in options.redops if o in UNMODELLED_REDOPS] if info.prints_redop else []
    if left_out:
        emit(f"{NICKSIM}: -o all: {', '.join(left_out)} (ncclRedOpCreatePreMulSum) is not modelled; its rows are "
             "left out")
    if options.per_iter:
        emit(f"{NICKSIM}: -I 1: every iteration of a priced call takes the same time (i_min = i_max = i_p99 = "
             "time, i_cv% 0)")
    start = time.strftime(TIME_FORMAT)
    json_path = None
    if options.json_path is not None:
        json_path, line = claim_json_path(options.json_path)
        emit(line)
    for line in preamble(setup, version):
        emit(line)
    if reduced is not None:
        for line in reducing_lines(reduced[1]):
            emit(line)
    if options.print_tuning and priced:
        for line in format_tuning_table(job.comm.table):
            emit(line)
    if logger is not None:
        logger.init()
    for line in table_header(version, timestamps=bool(options.timestamps), per_iter=bool(options.per_iter)):
        emit(line)
    rows: list[ResultRow] = []
    results: list[CallResult] = []
    stats: list = []
    nprocs = len(processes)

    def emit_row(row: ResultRow, result: CallResult) -> None:
        row_stats = None
        if options.per_iter:
            inplace = row.in_place.time_us if row.in_place is not None else row.out_of_place.time_us
            row_stats = (_iter_stats(row.out_of_place.time_us, options.iters, options.per_iter_skip, nprocs),
                         _iter_stats(inplace, options.iters, options.per_iter_skip, nprocs))
            stats.append(row_stats)
        stamp = time.strftime(TIME_FORMAT) if options.timestamps else None
        emit(format_row(row, version, index=len(rows), per_iter=row_stats, timestamp=stamp)
             + (_plan_note(result) if options.annotate else ""))
        rows.append(row)
        results.append(result)

    hang = None
    for dtype, redop, root in combos:
        _log_warmup(logger, job, options, dtype, redop, root, max(sizes, default=0))
        combo_rows: list[tuple[ResultRow, CallResult]] = []

        def row_done(row: ResultRow | None, result: CallResult) -> None:
            if row is None:
                results.append(result)
                return
            if not checked:  # nothing was checked: no #wrong, whatever an engine reports
                row = replace(row, out_of_place=replace(row.out_of_place, nwrong=None),
                              in_place=replace(row.in_place, nwrong=None) if row.in_place is not None else None)
            calls_made = 1 + options.iters * options.agg_iters + (1 if options.check else 0)  # BenchTime's calls
            if logger is not None:
                decision = _decision(job, result) if priced else None
                for in_place in (False, True):
                    for _ in range(calls_made):
                        logger.call(result.call, result.algorithm, in_place, decision)
            emit_row(row, result)
            combo_rows.append((row, result))

        perf_rows(job, collective, sizes, dtype, redop, root, engine, row_done, prepared, options.ngpus)
        hang = results[-1].hang if results else None
        if hang is not None:
            break
        for _ in range(options.run_cycles - 1):  # -N: the same sizes again (an engine prices them alike)
            for row, result in combo_rows:
                emit_row(row, result)
    threads = nprocs * options.nthreads
    for line in table_footer(collective, rows, version=version, threads=threads):
        emit(line)
    memory = (f"{NICKSIM}: -M 1: GPU memory usage is not modelled (nccl-tests measures it with cudaMemGetInfo)"
              if options.memory_report else None)
    for line in closing_lines(version, memory):
        emit(line)
    apart = [r for r in results if r.detail is not None and not getattr(r.detail, "exact", True)]
    if apart:
        emit(f"{NICKSIM}: des: on {len(apart)} size(s) each channel's nodes were collapsed on their own (docs/des.md: "
             "close to, not exactly, the full simulation); --set des.exact_nodes=N simulates up to N node classes "
             "exactly")
    blocks = sorted({r.detail.step_factor for r in results if getattr(r.detail, "step_factor", 1) > 1})
    if blocks:
        emit(f"{NICKSIM}: des: long rings ran their steps in blocks of {', '.join(map(str, blocks))} (docs/des.md: "
             "close to, not exactly, every step); --set des.max_steps=0 runs every step")
    if hang is not None:
        for line in hang.lines():
            emit(f"{NICKSIM}: {line}")
    if logger is not None:
        logger.destroy()
    env = tuple(f"{k}={v}" for k, v in sorted(job.params.raw.items()) if job.params.sources.get(k) in
                ("environment", "--env"))
    return Perf(collective, engine.name, job.system_name, job.nranks, job.system.rules.version.line, tuple(rows),
                tuple(results), hang, setup, version, json_path, (start, time.strftime(TIME_FORMAT)), env,
                tuple(stats) if options.per_iter else None, tuple(options.argv))


def size_band(nbytes: int) -> str:
    """The size bands validation reports by: < 64 KiB, 64 KiB - 16 MiB, >= 16 MiB."""
    if nbytes < 64 << 10:
        return "<64K"
    return "64K-16M" if nbytes < 16 << 20 else ">=16M"


@dataclass(frozen=True)
class Comparison:
    """A model row beside the measured row of the same size; `error_pct` is the busbw error of
    the model relative to the measurement, from the times where the measurement has one (busbw
    columns are rounded to 0.01 GB/s, which erases small sizes), else from busbw."""

    nbytes: int
    model_time_us: float
    measured_time_us: float | None
    model_busbw_gbps: float
    measured_busbw_gbps: float | None

    @property
    def error_pct(self) -> float | None:
        if self.measured_time_us:
            return 100.0 * (self.measured_time_us / self.model_time_us - 1.0)
        if not self.measured_busbw_gbps:
            return None
        return 100.0 * (self.model_busbw_gbps - self.measured_busbw_gbps) / self.measured_busbw_gbps


def _measured_busbw(row: ResultRow) -> tuple[float | None, float | None]:
    """Out-of-place time and busbw, falling back to in-place where a table has only that."""
    for m in (row.out_of_place, row.in_place):
        if m is not None and m.busbw_gbps is not None:
            return m.time_us, m.busbw_gbps
    return None, None


def measured_table(path: str, collective: str, nranks: int | None = None, index: int = 1) -> MeasuredTable:
    """The `index`-th table of a measured file (nccl-tests text or JSON, or CSV blocks) that is for
    `collective` on `nranks` ranks (any rank count if None), tables that do not say counting as fitting."""
    text = read_input(path, "a readable nccl-tests output file").decode("utf-8", errors="replace")
    return measured_table_of(text, path, collective, nranks, index)


def measured_table_of(text: str, source: str, collective: str, nranks: int | None = None,
                      index: int = 1) -> MeasuredTable:
    """measured_table for text already read; `source` names it in errors."""
    tables = read_results(text, source)
    fitting = [t for t in tables if t.collective in (None, collective) and (nranks is None or t.nranks in (None, nranks))]
    if len(fitting) < index:
        found = ", ".join(f"{t.collective} with {t.nranks} ranks" for t in tables) or "no tables"
        wanted = f"{collective} table" + (f" #{index}" if index > 1 else "")
        raise UsageError(f"no {wanted} for {nranks or 'any number of'} ranks (found {found})", source,
                         "a file with a matching nccl-tests table")
    return fitting[index - 1]


def compare(rows: list[ResultRow], measured: MeasuredTable) -> list[Comparison]:
    """Pairs of model and measured rows with the same size, in size order."""
    by_size = {r.nbytes: r for r in measured.rows}
    out = []
    for row in rows:
        other = by_size.get(row.nbytes)
        if other is None:
            continue
        time_us, busbw = _measured_busbw(other)
        out.append(Comparison(row.nbytes, row.out_of_place.time_us, time_us, row.out_of_place.busbw_gbps, busbw))
    return out


def format_comparison(pairs: list[Comparison], engine: str = "nccl") -> list[str]:
    """A `#`-commented block, one line per size, then median and worst absolute error per band;
    `engine` names the side that was computed."""
    lines = [f"# {engine} vs measured (busbw error = {engine} / measured - 1)",
             f"# {'size':>12}  {engine + '_us':>10}  {'meas_us':>10}  {engine + '_busbw':>11}  {'meas_busbw':>10}  "
             f"{'error%':>8}"]
    for p in pairs:
        meas_t = f"{p.measured_time_us:10.2f}" if p.measured_time_us is not None else f"{'N/A':>10}"
        meas_b = f"{p.measured_busbw_gbps:10.2f}" if p.measured_busbw_gbps is not None else f"{'N/A':>10}"
        err = f"{p.error_pct:8.1f}" if p.error_pct is not None else f"{'N/A':>8}"
        lines.append(f"# {p.nbytes:>12}  {p.model_time_us:10.2f}  {meas_t}  {p.model_busbw_gbps:11.2f}  {meas_b}  "
                     f"{err}")
    for band in ("<64K", "64K-16M", ">=16M"):
        errs = sorted(abs(p.error_pct) for p in pairs if size_band(p.nbytes) == band and p.error_pct is not None)
        if errs:
            median = errs[len(errs) // 2] if len(errs) % 2 else (errs[len(errs) // 2 - 1] + errs[len(errs) // 2]) / 2
            lines.append(f"# band {band:>8}: {len(errs)} sizes, median |error| {median:.1f}%, worst {errs[-1]:.1f}%")
    return lines
