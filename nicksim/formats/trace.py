"""What an engine recorded about one call, for people: the link-use report and the Chrome trace.

`format_link_report(run, top)` promises the `top` busiest links of a DES run — ranked by their
load, the share of their capacity the call used on average — with the bytes that crossed each, the
share of the call's time they carried something, the rate they averaged while busy, their
capacity and that load: where a what-if's bottleneck is.

`chrome_trace(run)` promises a Chrome trace document (Trace Event Format; Perfetto and
chrome://tracing open it): one process per rank, one thread per channel and stream, a complete
event per slice a primitive moved (name: the primitive), and a counter per link carrying its rate
in GB/s over time (process "links"). `real_trace(spans, other)` promises the same document for a
run of the real backend: its spans are the passes each rank made over its connection slots.
"""
from __future__ import annotations

__all__ = ["format_link_report", "chrome_trace", "spans_trace", "real_trace"]


def format_link_report(run, top: int = 10) -> list[str]:
    """The busiest links of `run` (a model.engine.DesRun) as comment lines under an nccl-tests table."""
    size = run.plan.call.nbytes
    lines = [f"# link report: {size} bytes, {run.plan.algorithm}/{run.plan.protocol}, "
             f"{run.time_us:.1f} us simulated",
             f"# {'link':<34} {'bytes':>14} {'busy':>6} {'GB/s busy':>10} {'capacity':>9} {'load':>6}"]

    def load(name: str) -> float:
        capacity = run.link_bw_gbps[name] * 1e3 * run.time_us
        return run.link_nbytes[name] / capacity if capacity > 0 else 0.0

    ranked = sorted(run.link_busy_us, key=lambda name: (-load(name), name))
    for name in ranked[:top]:
        busy = run.link_busy_us[name]
        nbytes = run.link_nbytes[name]
        share = busy / run.time_us if run.time_us > 0 else 0.0
        rate = nbytes / busy / 1e3 if busy > 0 else 0.0
        lines.append(f"# {name:<34} {nbytes:>14.0f} {100 * share:>5.1f}% {rate:>10.1f} {run.link_bw_gbps[name]:>9.1f} "
                     f"{100 * load(name):>5.1f}%")
    return lines


def spans_trace(spans) -> list[dict]:
    """Trace events for `spans`, (rank, channel, stream, op, start_us, end_us, args) each: one
    process per rank, one thread per channel and stream, a complete event per span."""
    events: list[dict] = []
    threads: dict[tuple[int, int, str], int] = {}
    for rank, channel, stream, op, start, end, args in spans:
        key = (rank, channel, stream)
        if key not in threads:
            threads[key] = tid = len([k for k in threads if k[0] == rank])
            events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid,
                           "args": {"name": f"channel {channel} {stream}"}})
        events.append({"name": op, "ph": "X", "pid": rank, "tid": threads[key], "ts": start, "dur": end - start,
                       "args": {"channel": channel, "stream": stream, **args}})
    for rank in sorted({k[0] for k in threads}):
        events.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}})
    return events


def chrome_trace(run) -> dict:
    """`run` (a model.engine.DesRun recorded with trace on) as a Chrome trace document."""
    events = spans_trace([(*span, {}) for span in run.spans])
    ranks = {e["pid"] for e in events}
    links_pid = 1 + max(ranks, default=-1)
    events.append({"name": "process_name", "ph": "M", "pid": links_pid, "args": {"name": "links"}})
    for time_us, link, gbps in run.link_series:
        events.append({"name": link, "ph": "C", "pid": links_pid, "ts": time_us, "args": {"GB/s": round(gbps, 3)}})
    plan = run.plan
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"engine": "des", "bytes": plan.call.nbytes, "collective": plan.call.collective,
                          "algorithm": plan.algorithm, "protocol": plan.protocol, "time_us": run.time_us}}


def real_trace(spans, other: dict) -> dict:
    """A real run's spans (as spans_trace takes them) as a Chrome trace document of the same form
    as a DES run's, without link counters; `other` describes the run."""
    return {"traceEvents": spans_trace(spans), "displayTimeUnit": "ns", "otherData": {"engine": "real", **other}}
