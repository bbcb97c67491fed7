"""numba's `njit` where numba is installed, the plain Python function where it is not.

`njit(**options)` decorates a function as `numba.njit(**options)` does when numba can be imported;
without numba it returns the function itself, which gives the same answers, only slower. `COMPILED`
says which of the two the package runs on.
"""
from __future__ import annotations

from typing import Callable

try:
    import numba
except ImportError:  # numba is optional: the DES runs, more slowly, without it
    numba = None

__all__ = ["njit", "COMPILED"]

COMPILED: bool = numba is not None


def njit(**options) -> Callable[[Callable], Callable]:
    """A decorator: numba.njit(**options) where numba is installed, else one that returns the
    function unchanged."""
    if numba is not None:
        return numba.njit(**options)
    return lambda function: function
