"""The Streamlit dashboard: `nicksim dashboard` serves app.py (api.DASHBOARD_APP), one page per
script in pages/. It holds no logic of its own: every number it shows comes from nicksim.api, the
pictures from nicksim.api.figures."""
__all__ = ()
