"""The dashboard in a real browser: `nicksim dashboard` serves it, Debian's Chromium (driven by
Playwright, executable_path=/usr/bin/chromium, no browser downloaded) opens every page, a control
is changed, and each page's screenshot must show something and no exception."""
from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from conftest import need_package
from matplotlib.image import imread

_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "dashboard_screenshots.py"
_spec = importlib.util.spec_from_file_location("dashboard_screenshots", _SCRIPT)
shots = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shots)


def _drawn_share(png: Path) -> float:
    """The share of the picture's pixels that are not the page's white background."""
    pixels = imread(png)[..., :3]
    return float((np.abs(pixels - 1.0).max(axis=-1) > 0.08).mean())


def _no_exception(page) -> None:
    shown = page.locator('[data-testid="stException"]')
    assert shown.count() == 0, shown.first.inner_text()
    assert "Traceback" not in page.locator('[data-testid="stMain"]').inner_text()


def test_every_page_in_chromium(tmp_path):
    need_package(Path(shots.CHROMIUM).exists(), "chromium", "the browser Playwright drives")
    with shots.serve() as url, shots.browser() as page:
        shots.open_page(page, url, "", "System")
        nodes = page.get_by_role("spinbutton", name="nodes", exact=True)
        nodes.fill("2")  # a control: the system becomes two nodes, on every page
        nodes.press("Enter")
        shots.settle(page)
        assert "2 node(s), 16 ranks" in page.locator('[data-testid="stCaptionContainer"]').first.inner_text()
        for path, title in shots.PAGES:
            if path:
                shots.go_to(page, title)
            _no_exception(page)
            assert page.get_by_role("spinbutton", name="nodes", exact=True).input_value() == "2"  # the sidebar carries across pages
            png = tmp_path / f"{title}.png"
            shots.capture(page, png)
            assert _drawn_share(png) > 0.02, f"{title} looks blank"
            if path in ("", "plans", "performance", "hangs"):  # pages that draw without input
                assert page.locator('[data-testid="stImage"] img, [data-testid="stImage"]').count() >= 1, title


def test_a_terminated_dashboard_stops_its_streamlit_server():
    # `nicksim dashboard` serves through a Streamlit child: SIGTERM (`kill`, a service manager, a test
    # harness) stops the child as Ctrl-C does, instead of leaving it serving the port.
    port = shots._free_port()
    server = subprocess.Popen([sys.executable, "-m", "nicksim", "dashboard", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        children: list[str] = []
        while not children and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.2)
            children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
        assert children, "nicksim dashboard started no server"
        time.sleep(1.0)  # past start-up: the signal handler is in place well before this
        server.terminate()
        assert server.wait(timeout=20) == 128 + signal.SIGTERM
        assert not [c for c in children if Path(f"/proc/{c}").exists()], "the Streamlit server outlived nicksim"
    finally:
        if server.poll() is None:
            server.kill()
