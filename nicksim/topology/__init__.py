"""The machine as NCCL models it: topology XML in and out (xml), GPU models and fabrics (hardware),
completion of partial vendor files (fill), the built-in systems (catalog), this host detected as NCCL
detects it (detect), and the typed System NCCL reasons about (system).
"""

__all__ = ["xml", "hardware", "fill", "catalog", "detect", "system"]
