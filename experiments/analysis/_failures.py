"""The errors-as-failures units: the reference harness's reading of a failed case.

AI-in-Health/MedMisBench grades a case whose API call failed as a wrong answer; the toolkit
leaves it out of every denominator. :func:`add_failure_units` adds the units of
``FAILURE_METRICS`` to the metrics engine's ``units`` table by running the engine's own units
statement over the records with each error read as a graded wrong answer with no choice (as
:func:`._units.errors_as_failures` reads them), so both readings follow one definition.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ._units import ERRORS_AS_FAILURES, FAILURE_METRICS

if TYPE_CHECKING:
    import duckdb


def add_failure_units(con: duckdb.DuckDBPyConnection, units_sql: str) -> None:
    """Add the units of ``FAILURE_METRICS`` to ``units``, their metrics renamed with the suffix.

    Args:
        con: A connection holding the ``records`` view and the ``units`` table.
        units_sql: The statement that made ``units`` from ``records`` (run again, not copied,
            over the records read as failures).

    A unit depends only on the records of its own (model, defender, item), so the statement
    runs over the items with an error; every other item's units are copies of those in
    ``units``.
    """
    bases = ", ".join(f"'{m.removesuffix(ERRORS_AS_FAILURES)}'" for m in FAILURE_METRICS)
    renamed = f"* REPLACE (metric || '{ERRORS_AS_FAILURES}' AS metric)"
    con.execute("CREATE OR REPLACE TEMP TABLE __failed_items AS SELECT DISTINCT model, defender, item_key "
                "FROM records WHERE error IS NOT NULL")
    con.execute(f"INSERT INTO units SELECT {renamed} FROM units u WHERE metric IN ({bases}) AND NOT EXISTS "
                "(SELECT 1 FROM __failed_items f WHERE f.model = u.model AND f.defender = u.defender "
                "AND f.item_key = u.item_key)")
    con.execute("CREATE OR REPLACE TEMP VIEW __failed_records AS SELECT * REPLACE ("
                "NULL::VARCHAR AS error, CASE WHEN error IS NULL THEN choice END AS choice, "
                "CASE WHEN error IS NULL THEN correct ELSE false END AS correct) "
                "FROM records SEMI JOIN __failed_items USING (model, defender, item_key)")
    statement = re.sub(r"\brecords\b", "__failed_records", units_sql)
    con.execute(re.sub(r"\bTABLE units\b", "TABLE __failed_units", statement))
    con.execute(f"INSERT INTO units SELECT {renamed} FROM __failed_units WHERE metric IN ({bases})")
    con.execute("DROP TABLE __failed_units")
    con.execute("DROP VIEW __failed_records")
    con.execute("DROP TABLE __failed_items")
