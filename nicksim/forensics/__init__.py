"""Diagnosing a hang, or a wrong result, from the logs people have after one: reading the files
(read, flight_recorder) into Evidence (evidence), weighing it into a Diagnosis (diagnose), and, on a
known system, where each blocked rank waits (waits).
"""
from .diagnose import diagnose, format_diagnosis
from .evidence import CATEGORIES, Diagnosis, Event, Evidence
from .read import read_evidence
from .waits import with_waits

__all__ = ["Event", "Evidence", "Diagnosis", "CATEGORIES", "read_evidence", "diagnose", "format_diagnosis",
           "with_waits"]
