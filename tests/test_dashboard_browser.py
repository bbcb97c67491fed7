"""The dashboard in a real browser: `nicksim dashboard` serves it, Debian's Chromium (driven by
Playwright, executable_path=/usr/bin/chromium, no browser downloaded) opens every page, a control
is changed, and each page's screenshot must show something and no exception."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
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
    assert Path(shots.CHROMIUM).exists(), "Debian's chromium package (the README's test command installs it)"
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
