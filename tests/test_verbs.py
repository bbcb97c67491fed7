"""The verbs check says why NET goes over sockets, from what sysfs lists and what pyverbs offers."""
from __future__ import annotations

import importlib.util
import sys

from nicksim.realhw.verbs import rdma_devices, verbs_unavailable


def test_no_rdma_device_is_said(tmp_path):
    assert rdma_devices(str(tmp_path / "missing")) == []
    assert verbs_unavailable(None, 0, str(tmp_path / "missing")) == f"no RDMA device in {tmp_path / 'missing'}"


def test_a_device_without_an_active_port_or_without_pyverbs_is_named(tmp_path, monkeypatch):
    for name in ("mlx5_1", "mlx5_0"):
        port = tmp_path / name / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text("1: DOWN\n")
        (port / "link_layer").write_text("InfiniBand\n")
    assert rdma_devices(str(tmp_path)) == ["mlx5_0", "mlx5_1"]
    assert verbs_unavailable(None, 0, str(tmp_path)) == "no active InfiniBand or RoCE port on mlx5_0, mlx5_1"
    (tmp_path / "mlx5_1" / "ports" / "1" / "state").write_text("4: ACTIVE\n")
    monkeypatch.delitem(sys.modules, "pyverbs", raising=False)  # not loaded yet, and nowhere to load it from
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert verbs_unavailable(None, 0, str(tmp_path), str(tmp_path / "no-dist-packages")) == (
        "RDMA device(s) mlx5_0, mlx5_1 but no pyverbs (apt install python3-pyverbs (rdma-core 28 or newer))")
