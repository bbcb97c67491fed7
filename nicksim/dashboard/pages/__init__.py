"""The dashboard's pages, one script each (System, Plans, Performance, Hangs, Calibration)."""
__all__ = ()
