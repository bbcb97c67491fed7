"""The discrete-event model of the fabric: plans executed over links that concurrent transfers share."""

__all__ = ["fabric", "flows", "network"]
