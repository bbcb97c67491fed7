"""The knob report (`nicksim env`): every knob nicksim reads, with its value and source, whether the
release reads it, NCCL's default there, the releases that read it and its effect in each engine;
with a job, what that job actually uses where NCCL computes a knob's value from the machine.

`knob_rows(params, minor, names, set_only, job)` gives the rows as plain records, `format_knobs`
the lines people read.
"""
from __future__ import annotations

from ..constants.knobs import ENGINE_NAMES
from ..errors import UsageError
from ..job import Job
from ..params import KNOBS, Params
from ..tuning.cost import net_overhead_us

__all__ = ["knob_rows", "format_knobs", "job_values"]


def job_values(job: Job) -> dict[str, str]:
    """What the job actually uses where a knob's default is computed from the machine: buffers,
    channels, NVLS channels and chunk, the network overhead and the IB transport's settings."""
    from ..model.ib import ib_transport  # the IB transport's settings, as the DES and NCCL take them
    comm, ib = job.comm, ib_transport(job)
    values = {"NCCL_LL_BUFFSIZE": comm.buff_nbytes[0], "NCCL_LL128_BUFFSIZE": comm.buff_nbytes[1],
              "NCCL_BUFFSIZE": comm.buff_nbytes[2], "NCCL_MAX_CTAS": f"{job.channels.n_channels} channels",
              "NCCL_NVLS_NCHANNELS": comm.nvls_channels, "NCCL_NVLS_CHUNKSIZE": comm.nvls_chunk_nbytes,
              "NCCL_NET_OVERHEAD": f"{net_overhead_us(comm.inputs, job.params):g} us"}
    if ib.verbs:
        values.update({"NCCL_IB_ADAPTIVE_ROUTING": int(ib.adaptive), "NCCL_IB_QPS_PER_CONNECTION": ib.qps,
                       "NCCL_IB_TIMEOUT": ib.timeout, "NCCL_IB_RETRY_CNT": ib.retry_cnt})
    return {name: str(value) for name, value in values.items()}


def knob_rows(params: Params, minor: int, names: list[str] = (), set_only: bool = False,
              job: Job | None = None) -> list[dict]:
    """One record per knob (those whose names start with one of `names`, all by default): name,
    value and source where set, why it is ignored, release `minor`'s default, what `job` uses,
    the releases that read it, what it is, and its effect in each engine."""
    on_job = job_values(job) if job is not None else {}
    wanted = [n.upper() for n in names]
    unknown = [n for n in wanted if not any(k.startswith(n) for k in KNOBS)]
    if unknown:
        raise UsageError(f"no knob named {', '.join(unknown)}", "nicksim env",
                         "a name or prefix of one `nicksim env` lists")
    versioned = params.for_version(minor)
    rows = []
    for name, knob in KNOBS.items():
        if wanted and not any(name.startswith(n) for n in wanted):
            continue
        is_set = name in params.raw and params.raw[name] != ""
        if set_only and not is_set:
            continue
        until = f"-{knob.until}" if knob.until else "+" if name.startswith("NCCL_") else ""
        release = f"{knob.since}{until}" if name.startswith("NCCL_") else "-"
        used = "" if knob.read_by(minor) else f" (not read by 2.{minor})"
        if is_set and name not in params.values:
            state = "ignored: invalid"
        elif is_set and name not in versioned.values:
            state = "ignored" + used
        else:
            state = ""
        rows.append({"name": name, "value": params.raw.get(name) if is_set else None,
                     "source": params.sources.get(name) if is_set else None, "state": state,
                     "default": knob.default_for(minor), "on_system": on_job.get(name),
                     "releases": release, "doc": knob.doc,
                     **{engine: knob.effect(engine) for engine in ENGINE_NAMES}})
    return rows


def format_knobs(rows: list[dict], minor: int, system: str | None = None) -> list[str]:
    """The report's lines: a header, then per knob its value line, what it is and its effects."""
    lines = [f"# nicksim env: {len(rows)} knob(s), NCCL 2.{minor} defaults; effects per engine "
             f"({', '.join(ENGINE_NAMES)})"]
    for row in rows:
        value = f"{row['value']} ({row['source']}{', ' + row['state'] if row['state'] else ''})" \
            if row["value"] is not None else "unset"
        here = f"; on {system}: {row['on_system']}" if row["on_system"] is not None else ""
        default = "unset" if row["default"] is None else str(row["default"])
        lines.append(f"{row['name']} = {value}; default {default}{here}; NCCL {row['releases']}")
        lines.append(f"    {row['doc']}")
        lines += [f"    {engine + ':':<6} {row[engine]}" for engine in ENGINE_NAMES]
    return lines
