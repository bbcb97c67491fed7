"""A command's progress on stderr: a tqdm bar that counts done steps and the seconds spent.

`Progress(what, total)` promises, while it is open and stderr is a terminal, a bar that is drawn
within half a second and redrawn at least every half second (so a long step with nothing to count
still shows time passing), naming the current phase (`phase(text)`) and counting `advance()`s
against `total` (None: no total known). `say(line)` prints a result line on stdout above the bar.
When stderr is not a terminal (a pipe, a file, CI) nothing is drawn and `say` is a plain print,
so output that is redirected holds only results.
"""
from __future__ import annotations

import shutil
import sys
import threading

__all__ = ["Progress", "REDRAW_S"]

REDRAW_S = 0.5  # how often the bar is redrawn while nothing advances


class Progress:
    """A progress bar on stderr for one command, drawn only where stderr is a terminal."""

    def __init__(self, what: str, total: int | None = None, enabled: bool | None = None):
        self.what = what
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None
        self._total = total

    def __enter__(self) -> "Progress":
        if self.enabled:
            from tqdm import tqdm
            # shutil reads COLUMNS and LINES, then the terminal; tqdm draws nothing on a terminal that
            # reports 0 lines (a new pseudo-terminal does), so such a one counts as 80 x 24
            size = shutil.get_terminal_size()
            self._bar = tqdm(total=self._total, desc=self.what, file=sys.stderr, leave=False,
                             ncols=size.columns or 80, nrows=size.lines or 24, mininterval=0.1,
                             bar_format=self._format())
            self._ticker = threading.Thread(target=self._tick, name="nicksim-progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _format(self) -> str:
        if self._total:
            return "{desc}: {n_fmt}/{total_fmt} |{bar}| {elapsed}"
        return "{desc}: {n_fmt} done, {elapsed}"

    def _tick(self) -> None:
        while not self._stop.wait(REDRAW_S):
            with self._lock:
                if self._bar is not None:
                    self._bar.refresh()

    def phase(self, text: str) -> None:
        """Name what is being done now (shown after the command's name)."""
        with self._lock:
            if self._bar is not None:
                self._bar.set_description_str(f"{self.what}: {text}", refresh=True)

    def total(self, total: int) -> None:
        """Set how many steps there are, once it is known."""
        self._total = total
        with self._lock:
            if self._bar is not None:
                self._bar.total = total
                self._bar.bar_format = self._format()
                self._bar.refresh()

    def advance(self, steps: int = 1) -> None:
        """Count steps done."""
        with self._lock:
            if self._bar is not None:
                self._bar.update(steps)

    def say(self, line: str) -> None:
        """Print a result line on stdout, above the bar."""
        with self._lock:
            if self._bar is None:
                print(line, flush=True)
                return
            self._bar.clear()
            print(line, flush=True)
            self._bar.refresh()
