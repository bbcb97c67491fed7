"""Hosts on one machine for tests: network namespaces joined by veth pairs, shaped with tc tbf.

`Hosts(n, rate_mbit)` makes n namespaces, each with one end of a veth pair to a bridge in the
test's own namespace (for n == 2, one veth pair straight between them), addresses 10.X.0.(i+1)/24,
and a tbf qdisc of `rate_mbit` on every end that sends; `hosts.popen(i, argv, env)` runs a command
in host i. Everything is removed on close, also after a failure. Needs root (CI runs as root).
"""
from __future__ import annotations

import os
import subprocess

__all__ = ["Hosts"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _tc(*args: str) -> None:
    subprocess.run(["tc", *args], check=True, capture_output=True, text=True)


class Hosts:
    """n namespaces named nicksim-<pid>-<i>, host i at `address(i)` on interface `ifname(i)`."""

    def __init__(self, n: int, rate_mbit: int | None = None):
        if n < 2:
            raise ValueError("at least two hosts")
        self.n = n
        self._tag = f"{os.getpid() % 100000}"
        self.subnet = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
        self._made: list[str] = []
        self._bridge: str | None = None
        try:
            self._make(rate_mbit)
        except BaseException:
            self.close()
            raise

    def name(self, i: int) -> str:
        return f"nicksim-{self._tag}-{i}"

    def ifname(self, i: int) -> str:
        return f"nsv{self._tag}h{i}"

    def address(self, i: int) -> str:
        return f"{self.subnet}.{i + 1}"

    def _make(self, rate_mbit: int | None) -> None:
        for i in range(self.n):
            _ip("netns", "add", self.name(i))
            self._made.append(self.name(i))
            _ip("-n", self.name(i), "link", "set", "lo", "up")
        if self.n == 2:
            _ip("link", "add", self.ifname(0), "netns", self.name(0), "type", "veth", "peer", "name", self.ifname(1),
                "netns", self.name(1))
        else:
            self._bridge = f"nsv{self._tag}br"
            _ip("link", "add", self._bridge, "type", "bridge")
            _ip("link", "set", self._bridge, "up")
            for i in range(self.n):
                outer = f"nsv{self._tag}o{i}"
                _ip("link", "add", self.ifname(i), "netns", self.name(i), "type", "veth", "peer", "name", outer)
                _ip("link", "set", outer, "master", self._bridge, "up")
                if rate_mbit:
                    _tbf(outer, rate_mbit, None)
        for i in range(self.n):
            _ip("-n", self.name(i), "addr", "add", f"{self.address(i)}/24", "dev", self.ifname(i))
            _ip("-n", self.name(i), "link", "set", self.ifname(i), "up")
            if rate_mbit:
                _tbf(self.ifname(i), rate_mbit, self.name(i))

    def popen(self, i: int, argv: list[str], env: dict, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.name(i), *argv], env=env, **kwargs)

    def close(self) -> None:
        for name in self._made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        if self._bridge:
            subprocess.run(["ip", "link", "del", self._bridge], capture_output=True)
        self._made, self._bridge = [], None

    def __enter__(self) -> "Hosts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _tbf(dev: str, rate_mbit: int, netns: str | None) -> None:
    # A bucket of 1 ms at the rate (at least 64 KiB, room for TSO bursts) and 50 ms of queue.
    burst_kb = max(64, rate_mbit // 8)
    where = ["-n", netns] if netns else []
    _tc(*where, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate_mbit}mbit", "burst", f"{burst_kb}kb",
        "latency", "50ms")
