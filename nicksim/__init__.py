"""nicksim: NCCL's topology, path, search and tuning decisions, reproduced in Python.

The pipeline runs topology -> paths -> search -> tuning -> plan -> engine -> report; this
package holds the core stages, each passing an immutable result to the next.
"""
from .errors import NickSimError

__all__ = ["NickSimError", "__version__"]
__version__ = "0.1.0"
