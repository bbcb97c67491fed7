"""Progress on stderr (nicksim/progress.py): drawn at a terminal, redrawn while a step runs, absent in pipes."""
import io
import os
import select
import subprocess
import sys
import threading
import time

from conftest import REPO
from nicksim.progress import REDRAW_S, Progress


def test_off_when_stderr_is_not_a_terminal(capsys):
    with Progress("nicksim test", total=3, enabled=False) as progress:
        progress.phase("working")
        progress.say("row 1")
        progress.advance()
    out = capsys.readouterr()
    assert out.out == "row 1\n" and out.err == ""


def test_a_long_step_still_shows_time_passing(monkeypatch, capsys):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with Progress("nicksim test", enabled=True) as progress:
        progress.phase("setting up")
        drawn = err.getvalue().count("setting up")
        time.sleep(4 * REDRAW_S)  # nothing advances: the bar is redrawn by itself
        redrawn = err.getvalue().count("setting up")
        progress.total(2)
        progress.say("row 1")
        progress.advance()
    assert drawn >= 1 and redrawn >= drawn + 2
    assert "1/2" in err.getvalue()
    assert capsys.readouterr().out == "row 1\n"  # results go to stdout, never into the bar


def _drain(master: int, timeout_s: float) -> bytes:
    """What the terminal holds now (the child wrote it before anything later)."""
    got = b""
    while select.select([master], [], [], timeout_s)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
        timeout_s = 0.05
    return got


def _stderr_on_a_terminal(*args: str) -> tuple[str, list[str], int]:
    """Run nicksim with stderr on a pseudo-terminal: (what the terminal held when the first stdout
    line came, the stdout lines, the exit status)."""
    master, slave = os.openpty()
    stop = threading.Event()
    before = ""

    def keep_draining():  # the child never blocks on a full terminal
        while not stop.is_set():
            _drain(master, 0.1)

    env = {**os.environ, "COLUMNS": "120"}
    with subprocess.Popen([sys.executable, "-m", "nicksim", *args], stdout=subprocess.PIPE, stderr=slave,
                          cwd=REPO, env=env, text=True) as proc:
        first = proc.stdout.readline()
        before = _drain(master, 0.05).decode(errors="replace")
        drainer = threading.Thread(target=keep_draining, daemon=True)
        drainer.start()
        lines = [first.rstrip("\n")] + [line.rstrip("\n") for line in proc.stdout]
        status = proc.wait()
    stop.set()
    drainer.join(timeout=5)
    os.close(slave)  # held open until now: a terminal whose last writer closed loses what it held
    os.close(master)
    return before, lines, status


def test_validate_draws_progress_before_its_first_line_and_prints_cases_as_they_finish():
    terminal, lines, status = _stderr_on_a_terminal("validate", "validation/C19-all_reduce.toml")
    assert status == 0
    assert "nicksim validate" in terminal  # drawn while the first case was still running
    assert lines[0].startswith("# nicksim validate") and lines[2].lstrip().startswith("C19-all_reduce")


def test_perf_draws_progress_while_the_des_sets_up():
    terminal, lines, status = _stderr_on_a_terminal("perf", "all_reduce", "-b", "1M", "-e", "2M", "--engine", "des")
    assert status == 0
    assert "nicksim perf" in terminal  # before the header, which waits for the engine's set-up
    assert lines[0].startswith("# nicksim perf all_reduce")
    assert sum(1 for x in lines if x.startswith("     1048576")) == 1
