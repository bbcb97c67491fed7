"""What an engine recorded about one call, for people: the link-use report.

`format_link_report(run, top)` promises the `top` busiest links of a DES run — ranked by their
load, the share of their capacity the call used on average — with the bytes that crossed each, the
share of the call's time they carried something, the rate they averaged while busy, their
capacity and that load: where a what-if's bottleneck is.
"""
from __future__ import annotations

__all__ = ["format_link_report"]


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
