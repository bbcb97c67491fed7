"""Work built on the engines: nccl-tests runs and their comparison with measurements (perf), grids of
what-ifs (sweep), validation against published runs (validate), calibration of the DES (calibrate), and
the textbook alpha-beta model (alphabeta).
"""

__all__ = ["perf", "sweep", "validate", "calibrate", "alphabeta"]
