"""The dashboard's entry script (`nicksim dashboard`, or `streamlit run nicksim/dashboard/app.py`):
the pages. Each page draws the sidebar's system itself (dashboard.common.page_job)."""
from pathlib import Path

import streamlit as st

__all__ = ["PAGES"]

_HERE = Path(__file__).resolve().parent
PAGES = (("system.py", "System", ":material/memory:"), ("plans.py", "Plans", ":material/route:"),
         ("performance.py", "Performance", ":material/speed:"), ("hangs.py", "Hangs", ":material/bug_report:"),
         ("calibration.py", "Calibration", ":material/tune:"))

st.set_page_config(page_title="nicksim", layout="wide")
navigation = st.navigation([st.Page(str(_HERE / "pages" / name), title=title, icon=icon)
                            for name, title, icon in PAGES])
navigation.run()
