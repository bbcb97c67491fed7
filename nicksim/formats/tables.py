"""Results as tables: a result that is a table gives `records()` (plain dicts, one per row) and
`to_pandas()` (a DataFrame of them; pandas is imported only when asked for)."""
from __future__ import annotations

from ..errors import UsageError

__all__ = ["Records"]


class Records:
    """Mixin for results that are tables: subclasses say what `records()` are."""

    def records(self) -> list[dict]:
        raise NotImplementedError

    def to_pandas(self):
        try:
            import pandas
        except ImportError:
            raise UsageError("pandas is not installed", "to_pandas", "pip install pandas, or records()") from None
        return pandas.DataFrame(self.records())
