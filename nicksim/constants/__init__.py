"""NCCL versions nicksim models, and the constants that belong to each.

A version is named by its release line ("2.22" or "2.22.3"); each modelled line stands for
the newest patch release nicksim was checked against. Everything that changed between
releases — enums, bandwidth constants, path rules, print formats, search and plan
behaviours — is one table of changes per kind (rules.py, topo_rules.py, tuning_tables.py),
looked up through `rules(version)`, `topo_rules(version)` and `tuning_tables(version)`, never
compared against release numbers in the stages.
"""
from __future__ import annotations

from .versions import DEFAULT_VERSION, MODELLED_VERSIONS, NcclVersion, parse_version
from .rules import ReleaseRules, rules
from .topo_rules import TopoRules, topo_rules
from .tuning_tables import TuningTables, tuning_tables

__all__ = [
    "DEFAULT_VERSION",
    "MODELLED_VERSIONS",
    "NcclVersion",
    "parse_version",
    "ReleaseRules",
    "rules",
    "TopoRules",
    "topo_rules",
    "TuningTables",
    "tuning_tables",
]
