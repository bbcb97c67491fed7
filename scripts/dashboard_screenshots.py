"""Serve the dashboard, open every page in headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright: no browser is downloaded) and save a screenshot of each: the pictures docs/dashboard/
holds and the README shows.

    python3 scripts/dashboard_screenshots.py [--out docs/dashboard] [--measured FILE]

The browser test (tests/test_dashboard_browser.py) uses the same functions: `serve`, `browser`
and `open_page`.
"""
from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

__all__ = ["CHROMIUM", "PAGES", "serve", "browser", "open_page", "go_to", "settle", "capture", "main"]

CHROMIUM = "/usr/bin/chromium"
# The pages by URL path (st.navigation names them after their files), with their titles.
PAGES = (("", "System"), ("plans", "Plans"), ("performance", "Performance"), ("hangs", "Hangs"),
         ("calibration", "Calibration"))
# Chromium as root in a closed network: no sandbox, no GPU, none of its own background traffic.
_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
          "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(timeout_s: float = 60.0):
    """`nicksim dashboard` on a free port of localhost, until the block ends: yields its URL."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "nicksim", "dashboard", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://localhost:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                    if answer.read() == b"ok":
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the dashboard did not start: {server.stdout.read() if server.stdout else ''}")
            time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


@contextlib.contextmanager
def browser(width: int = 1500, height: int = 1000):
    """A Playwright page in Debian's headless Chromium."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=_FLAGS)
        try:
            yield chromium.new_page(viewport={"width": width, "height": height})
        finally:
            chromium.close()


def settle(page, timeout_s: float = 240.0) -> None:
    """Wait until Streamlit has finished running the page's script (its status widget gone twice in
    a row, a second apart)."""
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError("the page kept running")
        running = page.locator('[data-testid="stStatusWidget"]').count() > 0
        quiet = 0 if running else quiet + 1
        if quiet == 2:
            return
        page.wait_for_timeout(1000)


def open_page(page, url: str, path: str, title: str, timeout_s: float = 240.0) -> None:
    """Open one page and wait for its title and for its script to finish."""
    page.goto(f"{url}/{path}", wait_until="domcontentloaded")
    page.get_by_role("heading", name=title, exact=True).first.wait_for(timeout=timeout_s * 1000)
    settle(page, timeout_s)


def go_to(page, title: str, timeout_s: float = 240.0) -> None:
    """Follow the sidebar's link to a page (the session, and so the sidebar's system, is kept)."""
    page.locator('[data-testid="stSidebarNav"]').get_by_text(title, exact=True).click()
    page.get_by_role("heading", name=title, exact=True).first.wait_for(timeout=timeout_s * 1000)
    settle(page, timeout_s)


def capture(page, path: Path, width: int = 1500, max_height: int = 3200) -> None:
    """A screenshot of the whole page: Streamlit scrolls inside its main section, so the window is
    made as tall as that section's content first."""
    height = page.evaluate("() => Math.max(...[...document.querySelectorAll('[data-testid=\"stMain\"], "
                           "[data-testid=\"stSidebarContent\"]')].map(e => e.scrollHeight), 800)")
    page.set_viewport_size({"width": width, "height": min(int(height) + 40, max_height)})
    page.wait_for_timeout(1500)  # let the charts re-lay out to the new size
    page.screenshot(path=str(path))
    page.set_viewport_size({"width": width, "height": 1000})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" / "dashboard"))
    parser.add_argument("--measured", help="an nccl-tests output of the default system (8 ranks) for Calibration "
                                           "and Performance")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    measured = Path(args.measured).read_text() if args.measured else None
    with serve() as url, browser() as page:
        open_page(page, url, "", "System")
        nodes = page.get_by_role("spinbutton", name="nodes", exact=True)
        nodes.fill("4")  # four nodes: the fabric and the trees across nodes show
        nodes.press("Enter")
        settle(page)
        for path, title in PAGES:
            if path:
                go_to(page, title)
            if path == "performance":  # the measured run is of one node
                nodes = page.get_by_role("spinbutton", name="nodes", exact=True)
                nodes.fill("1")
                nodes.press("Enter")
                settle(page)
            if path in ("performance", "calibration") and measured:
                box = page.get_by_label("nccl-tests output, as pasted")
                box.fill(measured)
                box.press("Control+Enter")
                settle(page)
            if path == "hangs":
                page.get_by_role("combobox", name="scenario").click()
                page.get_by_role("option", name="straggler", exact=False).first.click()
                settle(page)
            if path == "calibration" and measured:  # the tuner's fastest pairs, 64 KiB to 1 GiB
                page.get_by_label("from", exact=True).fill("64K")
                page.get_by_label("from", exact=True).press("Enter")
                settle(page)
                page.get_by_role("button", name="find the fastest pair per size").click()
                settle(page)
            if path == "plans":
                page.get_by_role("tab", name="Trees").click()
                page.wait_for_timeout(1000)
            target = out / f"{title.lower()}.png"
            capture(page, target)
            print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
