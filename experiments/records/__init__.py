"""Run folders on disk: ``records.jsonl`` read and appended, scanned by DuckDB, and the plan.

The lowest layer of the experiment pipeline, free of LangChain and of the defenders: the
harness writes through it, and analysis, reporting, view, export, review and generate read
run folders through it without importing the model stack.
"""

from ._format import GRADE_HINT, UngradedRunError, answer_format_of, refuse_open
from ._io import (
    RecordsFileError,
    WriteFailed,
    append_records,
    complete_length,
    os_error_text,
    read_records,
    repair_torn_tail,
    scrub_lines,
    unreadable_record,
    warn_rewritten,
)
from ._plan import (
    PLAN_FILE,
    Outside,
    Plan,
    describe_outside,
    has_plan,
    keep_planned,
    load_plan,
    outside_plan,
    planned_records_view,
    restrict_view,
    write_plan,
    write_plan_of,
)
from ._record import PROTOCOLS, ProtocolName, Record, item_key
from ._scan import (
    KEY,
    PARQUET_NAME,
    RECORD_COLUMNS,
    compact_records,
    connect,
    load_records_table,
    parquet_is_fresh,
    records_view,
    scan_jsonl,
)
from ._shard import SCHEDULER_VARIABLES, Shard, shard_of

__all__ = [
    "GRADE_HINT",
    "KEY",
    "PARQUET_NAME",
    "PLAN_FILE",
    "PROTOCOLS",
    "RECORD_COLUMNS",
    "SCHEDULER_VARIABLES",
    "Outside",
    "Plan",
    "ProtocolName",
    "Record",
    "RecordsFileError",
    "Shard",
    "UngradedRunError",
    "WriteFailed",
    "answer_format_of",
    "append_records",
    "compact_records",
    "complete_length",
    "connect",
    "describe_outside",
    "has_plan",
    "item_key",
    "keep_planned",
    "load_plan",
    "load_records_table",
    "os_error_text",
    "outside_plan",
    "parquet_is_fresh",
    "planned_records_view",
    "read_records",
    "records_view",
    "refuse_open",
    "repair_torn_tail",
    "restrict_view",
    "scan_jsonl",
    "scrub_lines",
    "shard_of",
    "unreadable_record",
    "warn_rewritten",
    "write_plan",
    "write_plan_of",
]
