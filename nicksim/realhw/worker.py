"""One rank of a run the real engine started (`python -m nicksim.realhw.worker TASK`).

engines.Real (through runner.run_job) writes the run as a task file: the job's spec, nccl-tests'
options and the job's settings. Each rank process reads it, joins the others as under a launcher
(spawn set RANK, WORLD_SIZE and NICKSIM_COMM_ID) and runs `runner.run_rank`; rank 0 appends each
size's result to the task's results file as one JSON line as soon as it completes. A failure ends
the rank with one line on stderr and exit status 2, as the command line would.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import fields
from pathlib import Path

from ..errors import NickSimError, UsageError, print_line
from ..job import JobSpec
from ..params import read_params
from .launch import rank_env, root_address
from .runner import RunOptions, run_rank

__all__ = ["main"]


def _options(doc: dict) -> RunOptions:
    spec = JobSpec(**{f.name: doc["job_spec"][f.name] for f in fields(JobSpec)})
    return RunOptions(**{**{f.name: doc[f.name] for f in fields(RunOptions)}, "sizes": tuple(doc["sizes"]),
                         "job_spec": spec})


def _run(task_path: str) -> None:
    task = json.loads(Path(task_path).read_text())
    options = _options(task["options"])
    params = read_params(os.environ, [f"{k}={v}" for k, v in task["settings"].items()])
    env = rank_env(os.environ)
    root = root_address(params, os.environ)
    if env is None or root is None:
        raise UsageError("no rank or root address in the environment", "nicksim.realhw.worker",
                         "a process started by the real engine")
    out = Path(task["results"])

    def row_done(row, spans=None) -> None:
        other = row.in_place
        item = {"time_us": row.out_of_place.time_us, "in_place_time_us": other.time_us if other else None,
                "nwrong": [row.out_of_place.nwrong, other.nwrong if other else None], **row.plan,
                "spans": spans}
        with open(out, "a", encoding="utf-8") as stream:
            stream.write(json.dumps(item) + "\n")

    done = [0]

    def on_row(row) -> None:  # the traced largest size's line waits for its spans (on_trace, just after)
        done[0] += 1
        if not (options.trace and done[0] == len(options.sizes)):
            row_done(row)

    run_rank(env, root, options, params, on_row=on_row, on_trace=lambda row, spans: row_done(row, spans))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        _run(argv[0])
        return 0
    except NickSimError as exc:
        print_line(f"nicksim: error: {exc.line()}")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
