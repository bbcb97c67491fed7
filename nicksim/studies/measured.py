"""Measured runs as calibration reads them: the tables in what people paste, and what the log says NCCL ran.

`read_measured(paths)` promises one MeasuredRun per results table in the files given: nccl-tests
output as pasted (with or without mpirun's `[1,0]<stdout>:` tags, NCCL_DEBUG lines between rows,
either column layout, `-J` JSON), nicksim's own `-J` JSON and text, `nicksim run --trace` files
(one call, the plan it ran taken as forced), and validation case files (a .toml, or a folder of
them), which carry their own system. Each run keeps its sizes and measured
out-of-place times and the `LogFacts` its file states: the NCCL version, the network NCCL used,
the node count, the settings NCCL read from the environment (NCCL_ALGO and NCCL_PROTO among them),
the GPUs nccl-tests listed and the channels rank 0 printed. `run_spec(run, base, given)` is the
system a run was measured on: a case file's own, else `base` (the SYSTEM options) with what the
user did not give (`given`) taken from the log. A file with no table, a table that names no
collective, or a table whose rows show no time is a UsageError naming the file.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..calls import collective_name
from ..errors import UsageError
from ..files import read_input
from ..formats.logs import VERSION_LINE, parse_line, read_job_log
from ..formats.report import DEVICE_LINE, read_results
from ..job import JobSpec
from ..params import Params
from .validate import find_cases, load_case
from .perf import measured_table_of

__all__ = ["LogFacts", "MeasuredRun", "read_measured", "log_facts", "run_spec", "jobs_for", "IGNORED_SETTINGS"]

# Settings a log names that describe the measured host's files and devices, not NCCL's choices:
# a model of another machine must not take them.
IGNORED_SETTINGS = frozenset({
    "NCCL_TOPO_FILE", "NCCL_TOPO_DUMP_FILE", "NCCL_GRAPH_FILE", "NCCL_GRAPH_DUMP_FILE", "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_NET", "NCCL_NET_PLUGIN",
    "NCCL_TUNER_PLUGIN", "NCCL_COMM_ID", "NCCL_HOSTID", "NCCL_CUMEM_ENABLE", "NCCL_IB_GID_INDEX",
})
_NETWORK = re.compile(r"^Using network (.+?)\s*$")
_PERF_BINARY = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv)_perf\b")


@dataclass(frozen=True)
class LogFacts:
    """What a file says about the run besides its table (None or empty where it says nothing)."""

    version: str | None = None
    fabric: str | None = None
    nodes: int | None = None
    settings: tuple[tuple[str, str], ...] = ()
    gpu_names: tuple[str, ...] = ()
    channels: int | None = None

    def setting(self, name: str) -> str | None:
        return dict(self.settings).get(name)


@dataclass(frozen=True)
class MeasuredRun:
    """One measured table: where it is (`source`, file and table), the collective, ranks, type and
    reduction, each size with its out-of-place time (us), the file's LogFacts, for a case file the
    system and settings it states (`spec`, `env`), and the GPUs each nccl-tests thread drove (-g)."""

    source: str
    collective: str
    nranks: int | None
    dtype: str
    redop: str
    points: tuple[tuple[int, float], ...]
    facts: LogFacts
    spec: JobSpec | None = None
    env: tuple[tuple[str, str], ...] = ()
    ngpus: int = 1


def _fabric_of(network: str, text_lines: list[str]) -> str | None:
    """NCCL's `Using network X` line as a fabric name: IB (RoCE where its NICs say so), Socket, the
    AWS Libfabric plugin (EFA), or Google's FasTrak (GPUDirect-TCPXO)."""
    name = network.lower()
    if "libfabric" in name or "ofi" in name:
        return "efa"
    if name.startswith("fastrak"):
        return "tcpxo"
    if name.startswith("socket"):
        return "tcp"
    if name.startswith("ib"):
        return "roce" if any("/RoCE" in t for t in text_lines if t.startswith("NET/IB")) else "ib"
    return None


def log_facts(text: str) -> LogFacts:
    """The LogFacts of a pasted output (see the module docstring): the NCCL_DEBUG lines as
    formats/logs.py reads a job's log, plus the version, the network and nccl-tests' device list."""
    version = network = None
    gpus: list[str] = []
    nccl_lines: list[str] = []
    for raw in text.splitlines():
        device = DEVICE_LINE.search(raw)
        if device:
            gpus.append(device.group(4).strip())
            continue
        if "NCCL" not in raw:
            continue
        if version is None and (m := VERSION_LINE.search(raw)):
            version = m.group(1)
        nccl_lines.append(raw)
    job_log = read_job_log(nccl_lines)
    texts = []
    for raw in nccl_lines:
        parsed = parse_line(raw)
        if parsed is not None and network is None and (m := _NETWORK.match(parsed.text)):
            network = m.group(1)
        elif parsed is not None and parsed.text.startswith("NET/IB"):
            texts.append(parsed.text)
    settings = {k: v.strip() for per_rank in job_log.settings.values() for k, v in per_rank.items()
                if k not in IGNORED_SETTINGS}
    nodes = next((c["nnodes"] for c in job_log.comms.values()), None)
    return LogFacts(version, _fabric_of(network, texts) if network else None, nodes, tuple(sorted(settings.items())),
                    tuple(dict.fromkeys(gpus)), len(job_log.rings) or None)


def _points(table, source: str) -> tuple[tuple[int, float], ...]:
    points = tuple((row.nbytes, row.out_of_place.time_us) for row in table.rows
                   if row.out_of_place is not None and row.out_of_place.time_us and row.out_of_place.time_us > 0)
    if not points:
        raise UsageError("no result row with a time", source, "nccl-tests rows with their time column")
    return points


def _named_test(text: str) -> str | None:
    """The collective of the one nccl-tests binary a pasted output names (its command line), if one."""
    names = set(_PERF_BINARY.findall(text))
    return collective_name(names.pop()) if len(names) == 1 else None


def _run_of_trace(doc: dict, source: str) -> MeasuredRun:
    """A `nicksim run --trace` file: one call of the largest size, its time and the plan it ran
    (which a fit takes as forced: NCCL_ALGO and NCCL_PROTO, as the run chose them)."""
    other = doc.get("otherData")
    if not isinstance(other, dict) or other.get("engine") != "real":
        raise UsageError("a trace that is not of a real run", source,
                         "nccl-tests output, its JSON, case files, or `nicksim run --trace` files")
    try:
        nbytes, time_us = int(other["bytes"]), float(other["time_us"])
        nranks, coll = int(other["nranks"]), collective_name(str(other["collective"]))
        forced = (("NCCL_ALGO", str(other["algorithm"])), ("NCCL_PROTO", str(other["protocol"])))
    except (KeyError, TypeError, ValueError):
        raise UsageError("a trace without its call (bytes, time_us, nranks, collective, algorithm, protocol)",
                         source, "a `nicksim run --trace` file") from None
    if not (nbytes > 0 and time_us > 0):
        raise UsageError("no result row with a time", source, "a trace of a call that ran")
    return MeasuredRun(source, coll, nranks, "float", "sum", ((nbytes, time_us),), LogFacts(settings=forced))


def _runs_of_file(path: Path, collective: str | None) -> list[MeasuredRun]:
    text = read_input(str(path), "a readable nccl-tests output, JSON or case file").decode("utf-8", errors="replace")
    if text.lstrip().startswith("{") and '"traceEvents"' in text[:200]:
        try:
            return [_run_of_trace(json.loads(text), str(path))]
        except json.JSONDecodeError:
            pass  # not a trace after all: read as results, which names what is wrong
    tables = read_results(text, str(path))
    facts = log_facts(text)
    runs = []
    for k, table in enumerate(tables, 1):
        source = f"{path}" + (f" (table {k})" if len(tables) > 1 else "")
        named = table.collective or collective or _named_test(text)
        if named is None:  # nccl-tests before 2.17 prints no "Collective test starting" line
            raise UsageError(f"the table at line {table.source_line} names no collective", str(path),
                             "--collective COLL, or output with its '# Collective test starting' line")
        runs.append(MeasuredRun(source, named, table.nranks, table.dtype or "float", table.redop or "sum",
                                _points(table, source), facts, ngpus=table.ngpus or 1))
    return runs


def _run_of_case(case) -> MeasuredRun:
    text = case.measured_text()
    table = measured_table_of(text, case.origin, case.collective, case.nranks, case.table)
    if case.in_place:  # the case compares the in-place columns: those are its times
        table = replace(table, rows=tuple(replace(r, out_of_place=r.in_place) for r in table.rows
                                          if r.in_place is not None))
    return MeasuredRun(case.path, case.collective, table.nranks, case.dtype or table.dtype or "float",
                       table.redop or "sum", _points(table, case.path), log_facts(text), case.spec, case.env,
                       case.ngpus or table.ngpus or 1)


def read_measured(paths: list[str], collective: str | None = None) -> list[MeasuredRun]:
    """Every measured table in `paths` (files or folders of case files), in the order given; a
    table that names no collective is `collective`'s, or that of the one nccl-tests binary its
    file names."""
    if not paths:
        raise UsageError("no measurements given", "MEASURED", "nccl-tests output, JSON or validation case files")
    runs: list[MeasuredRun] = []
    for given in paths:
        path = Path(given)
        if not path.exists() and given != "-":
            raise UsageError("no such file or folder", str(path),
                             "nccl-tests output, its JSON, or validation case files (a .toml, or a folder of them)")
        if path.is_dir():
            cases = find_cases(path)
            if not cases:
                raise UsageError("no case files (*.toml)", str(path), "a folder of validation cases")
            runs += [_run_of_case(c) for c in cases]
        elif path.suffix.lower() == ".toml":
            runs.append(_run_of_case(load_case(path)))
        else:
            runs += _runs_of_file(path, collective)
    return runs


def run_spec(run: MeasuredRun, base: JobSpec, given: frozenset[str], gpus_per_node: int | None = None) -> JobSpec:
    """The system `run` was measured on: its case's own, else `base` with the NCCL version, network
    and node count the log states wherever the user gave none (`given` names the JobSpec fields
    given); with no node count anywhere, the run's ranks over `gpus_per_node`."""
    if run.spec is not None:
        return run.spec
    changes: dict = {}
    facts = run.facts
    if "nccl_version" not in given and facts.version:
        changes["nccl_version"] = facts.version
    if "fabric" not in given and facts.fabric:
        changes["fabric"] = facts.fabric
    if "nodes" not in given:
        if facts.nodes:
            changes["nodes"] = facts.nodes
        elif run.nranks and gpus_per_node and run.nranks % gpus_per_node == 0:
            changes["nodes"] = run.nranks // gpus_per_node
    return replace(base, **changes)


def _gpu_mismatch(run: MeasuredRun, job) -> str | None:
    """The GPU the log lists where it is not the system's (by compute capability), else None."""
    from ..topology.hardware import GPU_MODELS
    system = job.paths.system
    sms = {system.nodes[g].gpu.sm for g in system.gpus()}
    for name in run.facts.gpu_names:
        known = {m.sm for m in GPU_MODELS.values() if re.search(rf"\b{_model_token(m.marketing)}\b", name.upper())}
        if known and not known & sms:
            return name
    return None


def _model_token(marketing: str) -> str:
    """The part of a GPU's name that tells it apart: its first word with a digit ("H100", "4090")."""
    return next((t for t in re.split(r"[\s\-]", marketing.upper()) if any(c.isdigit() for c in t)), marketing.upper())


def jobs_for(runs: list[MeasuredRun], base: JobSpec, given: frozenset[str], params: Params,
             env: tuple[str, ...] = ()) -> list:
    """The job each run was measured on (run_spec), with the settings its log says NCCL read, then
    `env` (the user's, which win); a run whose rank count or GPUs are not the system's is a
    UsageError naming it."""
    from ..job import load_job
    from ..params import read_params
    gpus_per_node = None
    if "nodes" not in given and any(r.spec is None and not r.facts.nodes for r in runs):
        gpus_per_node = load_job(replace(base, nodes=1), params).nranks
    loaded: dict = {}
    out = []
    for run in runs:
        spec = run_spec(run, base, given, gpus_per_node)
        settings = [f"{k}={v}" for k, v in (*run.facts.settings, *run.env)] + list(env)
        key = (spec, tuple(settings))
        if key not in loaded:
            loaded[key] = load_job(spec, read_params(params.raw, settings))
        job = loaded[key]
        if run.nranks is not None and run.nranks != job.nranks:
            raise UsageError(f"the measurements have {run.nranks} ranks, the system has {job.nranks} ranks "
                             f"({job.nodes} node{'s' if job.nodes > 1 else ''})", run.source,
                             "SYSTEM options with as many GPUs as the measured run (--nodes, --gpus-per-node)")
        gpu = _gpu_mismatch(run, job)
        if gpu is not None:
            raise UsageError(f"the measurements ran on {gpu}, the system has other GPUs", run.source,
                             "the measured system (--system, --gpu)")
        out.append(job)
    return out
