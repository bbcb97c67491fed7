"""What nicksim writes and reads in other tools' formats: nccl-tests tables and JSON (report), NCCL_DEBUG
lines (logs: the grammar, the sink and the reader; joblog: the lines NCCL logs for a whole job), the
DES's link report and Chrome trace (trace), and results as tables of plain records (tables).
"""

__all__ = ["report", "logs", "joblog", "trace", "tables"]
