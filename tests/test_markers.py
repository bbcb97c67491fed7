"""Tests that need root are marked and, on a machine without root, skipped with the reason."""
from __future__ import annotations

import ast
from pathlib import Path

import conftest

HERE = Path(__file__).resolve().parent


class _Item:
    def __init__(self, markers):
        self.markers, self.added = set(markers), []

    def get_closest_marker(self, name):
        return name if name in self.markers else None

    def add_marker(self, marker):
        self.added.append(marker)


def test_root_tests_are_skipped_with_a_reason_without_root(monkeypatch):
    needs_root, plain = _Item({"root"}), _Item(set())
    monkeypatch.setattr(conftest.os, "geteuid", lambda: 1000)
    conftest.pytest_collection_modifyitems(None, [needs_root, plain])
    assert not plain.added
    (mark,) = needs_root.added
    assert mark.name == "skip" and "root" in mark.kwargs["reason"]


def test_root_tests_run_as_root(monkeypatch):
    needs_root = _Item({"root"})
    monkeypatch.setattr(conftest.os, "geteuid", lambda: 0)
    conftest.pytest_collection_modifyitems(None, [needs_root])
    assert not needs_root.added


def test_every_test_that_makes_namespaces_is_marked_root():
    for path in HERE.glob("test_*.py"):
        tree = ast.parse(path.read_text())
        uses_netns = any(isinstance(n, ast.ImportFrom) and n.module == "netns" for n in tree.body)
        marked = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                     and "root" in ast.unparse(n.value) for n in tree.body)
        assert marked or not uses_netns, f"{path.name} makes namespaces but is not marked root"
