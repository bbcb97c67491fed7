"""The real backend's bootstrap, with real processes joined over real sockets on this host."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from nicksim.realhw.runner import free_port

# One rank: join, allgather its rank and pid, print what it got; "stall" then waits before a second
# allgather (long enough to be killed in between); failures print BootstrapError's line, exit 2.
RANK_PROGRAM = r"""
import json, os, sys, time
from nicksim.realhw.bootstrap import Bootstrap, BootstrapError
rank, size, port = (int(a) for a in sys.argv[1:4])
timeout_s, mode, job = float(sys.argv[4]), sys.argv[5], sys.argv[6]
try:
    with Bootstrap.join(rank, size, ("127.0.0.1", port), timeout_s, job) as boot:
        print(json.dumps(boot.allgather({"rank": rank, "pid": os.getpid()})), flush=True)
        if mode == "stall":
            time.sleep(120)
        print(json.dumps(boot.allgather(rank * 10)), flush=True)
except BootstrapError as err:
    print("error: " + err.line(), flush=True)
    sys.exit(2)
"""

GUARD_S = 60  # no run here may take this long; a hang fails the test instead of stalling CI


def start(rank: int, size: int, port: int, timeout_s: float = 20, mode: str = "run", job: str = "job-a"
          ) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RANK_PROGRAM, str(rank), str(size), str(port), str(timeout_s), mode,
                             job], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finished_within(procs: list[subprocess.Popen], since: float) -> float:
    """Seconds from `since` until the last of `procs` ended."""
    for proc in procs:
        proc.wait(timeout=GUARD_S)
    return time.monotonic() - since


def finish(proc: subprocess.Popen) -> tuple[int, list[str]]:
    out, _ = proc.communicate(timeout=GUARD_S)
    return proc.returncode, out.splitlines()


def test_ranks_join_and_allgather_in_rank_order():
    port = free_port()
    procs = [start(r, 4, port) for r in (3, 2, 1, 0)]  # the root last: the others retry until it listens
    results = {}
    for proc in procs:
        code, lines = finish(proc)
        assert code == 0, lines
        first, second = (json.loads(line) for line in lines)
        assert [item["rank"] for item in first] == [0, 1, 2, 3]
        assert second == [0, 10, 20, 30]
        results[first[0]["pid"]] = first
    assert len({json.dumps(r) for r in results.values()}) == 1  # every rank got the same list
    assert {item["pid"] for item in first} == {p.pid for p in procs}


def test_an_unreachable_root_is_a_clear_error_after_the_timeout():
    port = free_port()  # nobody listens there
    code, lines = finish(start(1, 2, port, timeout_s=1))
    assert code == 2
    assert lines == [f"error: bootstrap: rank 1 could not reach the root at 127.0.0.1:{port} within 1 s "
                     "(Connection refused)"]


def test_a_rank_that_never_arrives_is_named_on_every_rank():
    port = free_port()
    root, one = start(0, 3, port, timeout_s=2), start(1, 3, port, timeout_s=20)
    (code0, lines0), (code1, lines1) = finish(root), finish(one)
    reason = f"ranks 2 never reached the root at 127.0.0.1:{port} within 2 s"
    assert (code0, lines0) == (2, [f"error: bootstrap: {reason}"])
    assert (code1, lines1) == (2, [f"error: bootstrap: rank 1 stopped: {reason}"])


def test_a_killed_rank_is_named_on_every_rank():
    port = free_port()
    procs = [start(0, 3, port), start(1, 3, port), start(2, 3, port, mode="stall")]
    victim = procs[2]
    assert json.loads(victim.stdout.readline())[2]["rank"] == 2  # joined; now waiting to be killed
    victim.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    victim.wait(timeout=GUARD_S)
    # A closed connection is known at once: the survivors stop long before their 20 s timeout.
    assert finished_within(procs[:2], killed) < 2.0
    (code0, lines0), (code1, lines1) = finish(procs[0]), finish(procs[1])
    reason = "rank 2 closed its connection (the process ended or was killed)"
    assert code0 == 2 and lines0[-1] == f"error: bootstrap: {reason}"
    assert code1 == 2 and lines1[-1] == f"error: bootstrap: rank 1 stopped: {reason}"


def test_a_rank_started_for_another_size_is_refused():
    port = free_port()
    root, one = start(0, 2, port), start(1, 3, port)
    (code0, lines0), (code1, lines1) = finish(root), finish(one)
    reason = "rank 1 was started for 3 ranks, rank 0 for 2"
    assert (code0, lines0) == (2, [f"error: bootstrap: {reason}"])
    assert (code1, lines1) == (2, [f"error: bootstrap: rank 1 stopped: {reason}"])


def test_a_killed_root_is_named_by_the_other_ranks():
    port = free_port()
    root, one = start(0, 2, port, mode="stall"), start(1, 2, port)
    assert len(json.loads(root.stdout.readline())) == 2
    root.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    root.wait(timeout=GUARD_S)
    assert finished_within([one], killed) < 2.0
    code, lines = finish(one)
    assert code == 2
    assert lines[-1] == "error: bootstrap: rank 1 stopped: rank 0 closed its connection (the process ended or was killed)"


@pytest.mark.parametrize("victim", [0, 2])
def test_a_stopped_rank_is_named_by_every_survivor_within_the_timeout(victim):
    """SIGSTOP keeps a rank's connection open and silent, as a hung process does: its heartbeats
    stop, and every other rank names it within the timeout (2 s here) and a second."""
    port = free_port()
    procs = [start(r, 3, port, timeout_s=2, mode="stall" if r == victim else "run") for r in range(3)]
    assert json.loads(procs[victim].stdout.readline())[victim]["rank"] == victim  # joined; stalling
    procs[victim].send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    survivors = [p for r, p in enumerate(procs) if r != victim]
    try:
        took = finished_within(survivors, stopped)
    finally:
        procs[victim].kill()
        procs[victim].wait(timeout=GUARD_S)
    assert took < 2 + 1.0
    reason = f"rank {victim} sent nothing for 2 s (stopped or hung)"
    lines = {r: finish(p)[1][-1] for r, p in enumerate(procs) if r != victim}
    assert lines == {r: f"error: bootstrap: {reason}" if r == 0 else f"error: bootstrap: rank {r} stopped: {reason}"
                     for r in lines}
    assert all(p.returncode == 2 for p in survivors)


def test_a_rank_of_another_job_is_turned_away_and_the_root_waits_for_its_own():
    port = free_port()
    root = start(0, 2, port)
    stranger = start(1, 2, port, job="job-b")
    code, lines = finish(stranger)
    assert code == 2
    assert lines == [f"error: bootstrap: rank 1 was turned away: the root at 127.0.0.1:{port} belongs to another "
                     "job (job-a, this rank's is job-b): two jobs were given the same NICKSIM_COMM_ID"]
    own = start(1, 2, port)
    assert finish(root)[0] == 0 and finish(own)[0] == 0


def test_a_stray_connection_does_not_stop_the_join():
    # Something else connects to the root's port and sends garbage: the root drops it and waits on.
    port = free_port()
    root = start(0, 2, port)
    stray = None
    for _ in range(400):
        try:
            stray = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            root.poll()
            assert root.returncode is None
            time.sleep(0.05)
    stray.sendall(b"\x00\x00\x00\x00\x00\x00\x00\x05hello")
    one = start(1, 2, port)
    (code0, lines0), (code1, lines1) = finish(root), finish(one)
    stray.close()
    assert (code0, code1) == (0, 0) and json.loads(lines0[1]) == json.loads(lines1[1]) == [0, 10]
