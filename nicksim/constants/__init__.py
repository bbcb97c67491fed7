"""NCCL versions nicksim models, and the constants that belong to each.

A version is named by its release line ("2.22" or "2.22.3"); each modelled line stands for
the newest patch release nicksim was checked against. Everything that changed between
releases — enums, bandwidth constants, path rules, print formats — is looked up through
`topo_rules(version)`, never hard-coded in the stages.
"""
from __future__ import annotations

from .versions import (
    DEFAULT_VERSION,
    MODELLED_VERSIONS,
    NcclVersion,
    parse_version,
)
from .topo_rules import TopoRules, topo_rules
from .tuning_tables import TuningTables, tuning_tables

__all__ = [
    "DEFAULT_VERSION",
    "MODELLED_VERSIONS",
    "NcclVersion",
    "parse_version",
    "TopoRules",
    "topo_rules",
    "TuningTables",
    "tuning_tables",
]
