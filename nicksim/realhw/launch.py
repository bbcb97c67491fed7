"""Where a real-backend process stands in its job, from the variables its launcher set.

`rank_env(environ)` reads torchrun's, Open MPI's, an MPICH/PMI launcher's and Slurm's variables,
in that order (the most specific first: mpirun inside a Slurm allocation still sees SLURM_*), and
returns None where no launcher started the process (`nicksim run` then spawns its own ranks).
`root_address(params, environ)` is the bootstrap root: NICKSIM_COMM_ID=host:port, as NCCL_COMM_ID,
else torchrun's MASTER_ADDR and MASTER_PORT. A malformed value raises UsageError naming the variable.
`job_identity(environ)` names the job a rank belongs to, from its launcher's job or run id, so
that the bootstrap turns away a rank of another job given the same root address.
`watch_parent()` ends a rank (as Ctrl-C would) once the process that started it is gone;
`exit_with_parent()` gives Popen a function that arms the same in a child before it runs anything.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Mapping

from ..errors import UsageError
from ..params import Params

__all__ = ["RankEnv", "LAUNCHERS", "RUN_ID", "JOB_IDS", "rank_env", "root_address", "parse_host_port",
           "job_identity", "watch_parent", "exit_with_parent"]

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def exit_with_parent():
    """For Popen's preexec_fn: the child takes SIGINT as Python does by default, even where the
    launcher ignores it (a job a shell script started in the background inherits SIGINT ignored,
    and an ignored signal stays ignored across exec), and, on Linux, gets SIGINT when the thread
    that started it ends (PR_SET_PDEATHSIG, armed between fork and exec, so a launcher killed at
    any moment takes its ranks with it)."""
    return _exit_with(os.getpid())


def _exit_with(parent_pid: int):
    """exit_with_parent() for a child of `parent_pid`. A parent that dies between fork and the
    prctl call sends no signal, so a child that finds itself already orphaned once armed ends there."""
    if not sys.platform.startswith("linux"):
        return lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it

    def arm() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        prctl(_PR_SET_PDEATHSIG, signal.SIGINT)
        if os.getppid() != parent_pid:
            os._exit(128 + signal.SIGINT)  # as SIGINT would have ended it, before it runs anything
    return arm

# How often a rank looks whether its launcher is still there.
PARENT_POLL_S = 0.2


def watch_parent() -> None:
    """From now on, when the process that started this one ends (a launcher killed with -9, say),
    this process gets SIGINT, so it stops and cleans up as on Ctrl-C, within PARENT_POLL_S: a dead
    launcher leaves no rank behind. A thread compares getppid() with the parent seen now (an orphan
    is re-parented to init or a subreaper); it works on every POSIX system and, unlike Linux's
    PR_SET_PDEATHSIG, does not fire when the thread that started the process ends."""
    if any(t.name == "nicksim-parent-watch" for t in threading.enumerate()):
        return  # one watch a process (ranks run as threads in tests)
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # started in a shell's background
        signal.signal(signal.SIGINT, signal.default_int_handler)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name="nicksim-parent-watch", daemon=True).start()


@dataclass(frozen=True)
class RankEnv:
    """This process's rank among `size`, its rank among the ranks on its host, and the launcher
    whose variables said so."""

    rank: int
    size: int
    local_rank: int
    launcher: str


# (launcher, rank variable, size variable, local rank variable)
LAUNCHERS = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)


RUN_ID = "TORCHELASTIC_RUN_ID"  # torchrun's --rdzv-id; `nicksim run` sets its own for the ranks it starts

# The variables that name a job, per launcher: every rank of one job sees the same values.
JOB_IDS = (
    ("torchrun", (RUN_ID,)),
    ("slurm", ("SLURM_JOB_ID", "SLURM_STEP_ID")),
    ("openmpi", ("OMPI_MCA_ess_base_jobid",)),
    ("pmix", ("PMIX_NAMESPACE",)),
)


def job_identity(environ: Mapping[str, str]) -> str:
    """The job this process belongs to, as its launcher names it ("" where none does: such a job
    joins any root; torchrun's default run id "none" names nothing)."""
    for launcher, names in JOB_IDS:
        values = [environ.get(name, "") for name in names]
        if values[0] and values[0] != "none":
            return f"{launcher} " + ".".join(v for v in values if v)
    return ""


def _int_var(environ: Mapping[str, str], name: str, launcher: str) -> int:
    text = environ[name].strip()
    if not text.isdigit():
        raise UsageError(f"{name}={environ[name]!r} is not a whole number", f"{launcher}'s environment",
                         "0, 1, 2, ...")
    return int(text)


def rank_env(environ: Mapping[str, str]) -> RankEnv | None:
    """The first launcher whose rank and size variables are both set, read and checked; None where
    none is (a local rank left unset counts as the rank itself: every rank on one host)."""
    for launcher, rank_var, size_var, local_var in LAUNCHERS:
        if rank_var not in environ or size_var not in environ:
            continue
        rank, size = _int_var(environ, rank_var, launcher), _int_var(environ, size_var, launcher)
        if size < 1 or rank >= size:
            raise UsageError(f"{rank_var}={rank} with {size_var}={size}", f"{launcher}'s environment",
                             f"a rank from 0 to {size_var} - 1, and {size_var} >= 1")
        local = _int_var(environ, local_var, launcher) if local_var in environ else rank
        if local > rank:
            raise UsageError(f"{local_var}={local} is above {rank_var}={rank}", f"{launcher}'s environment",
                             "a local rank no greater than the rank")
        return RankEnv(rank, size, local, launcher)
    return None


def parse_host_port(text: str, where: str) -> tuple[str, int]:
    """'host:port', '[v6 address]:port' -> (host, port)."""
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"'{text}' is not host:port", where, "e.g. 10.0.0.1:29500 or [fe80::1]:29500")
    return host, int(port)


def root_address(params: Params, environ: Mapping[str, str]) -> tuple[str, int] | None:
    """NICKSIM_COMM_ID, else NCCL_COMM_ID (NCCL's own root address, same grammar), else MASTER_ADDR
    and MASTER_PORT (both needed), else None."""
    for name in ("NICKSIM_COMM_ID", "NCCL_COMM_ID"):
        comm_id = params.get(name)
        if comm_id:
            return parse_host_port(comm_id, name)
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    if addr and port:
        return parse_host_port(f"{addr}:{port}" if ":" not in addr else f"[{addr}]:{port}",
                               "MASTER_ADDR/MASTER_PORT")
    if addr or port:
        missing = "MASTER_PORT" if addr else "MASTER_ADDR"
        raise UsageError(f"{missing} is not set", "MASTER_ADDR/MASTER_PORT", "both, or NICKSIM_COMM_ID=host:port")
    return None
