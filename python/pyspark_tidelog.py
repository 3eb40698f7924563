"""Makes `spark.read.format("tidelog")` work without `tidelog.spark.register(spark)`.

Spark imports every top-level `pyspark_*` module it finds and registers its `DefaultSource`
under `DefaultSource.name()`. An import error here would break that lookup for every Python
data source in the session, so a missing dependency only surfaces when "tidelog" is used.
"""

from __future__ import annotations

try:
    from tidelog.spark import TidelogDataSource as DefaultSource
except ImportError as error:  # pragma: no cover - depends on the environment (e.g. no pyarrow)
    from pyspark.sql.datasource import DataSource

    _IMPORT_ERROR = (
        f"tidelog's Spark data source cannot load ({error}); pip install 'tidelog[spark]'"
    )

    class DefaultSource(DataSource):  # type: ignore[no-redef]
        """Stands in for the real source to say what is missing."""

        @classmethod
        def name(cls) -> str:
            return "tidelog"

        def schema(self) -> str:
            raise ImportError(_IMPORT_ERROR)


__all__ = ["DefaultSource"]
