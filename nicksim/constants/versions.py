"""NCCL release lines nicksim models, and parsing of version strings."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError

__all__ = ["NcclVersion", "MODELLED_VERSIONS", "DEFAULT_VERSION", "parse_version"]


@dataclass(frozen=True, order=True)
class NcclVersion:
    """A modelled NCCL release line, e.g. 2.22 (patch = the release the tables were read from)."""

    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @property
    def line(self) -> str:
        return f"{self.major}.{self.minor}"

    def at_least(self, minor: int) -> bool:
        """True for 2.<minor> and later (all modelled versions are 2.x)."""
        return (self.major, self.minor) >= (2, minor)


# The tag each release line was read from (NVIDIA/nccl tags v2.N.P-1).
MODELLED_VERSIONS: tuple[NcclVersion, ...] = tuple(
    NcclVersion(2, minor, patch)
    for minor, patch in (
        (18, 6), (19, 4), (20, 5), (21, 5), (22, 3), (23, 4), (24, 3),
        (25, 1), (26, 6), (27, 7), (28, 9), (29, 7), (30, 7),
    )
)
DEFAULT_VERSION = MODELLED_VERSIONS[-1]

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?$")


def parse_version(text: str, where: str = "--nccl-version") -> NcclVersion:
    """Map '2.22', '2.22.3', 'v2.22.3-1' or '2.22.3+cuda12.2' to its modelled release line."""
    match = _VERSION_RE.match(text.strip())
    valid = ", ".join(v.line for v in MODELLED_VERSIONS)
    if not match:
        raise UsageError(f"'{text}' is not an NCCL version", where, valid)
    major, minor = int(match.group(1)), int(match.group(2))
    for version in MODELLED_VERSIONS:
        if (version.major, version.minor) == (major, minor):
            return version
    raise UsageError(f"NCCL {major}.{minor} is not modelled", where, valid)
