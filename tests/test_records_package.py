"""The records package reads and writes run folders without the model stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from medmis.experiments.records import (
    Record,
    append_records,
    connect,
    load_records_table,
    read_records,
)


def test_importing_the_records_package_loads_no_langchain_or_langgraph() -> None:
    probe = (
        "import sys, medmis.experiments.records\n"
        "print(sorted(m for m in sys.modules if m.startswith(('langchain', 'langgraph'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_records_round_trip_and_scan(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    rec = Record(model="m", defender="none", protocol="clean", item_id="1", subset="MEDMISQA", gold="A",
                 choice="A", correct=True)
    append_records(path, [rec])
    assert read_records(path) == [rec]
    con = connect()
    try:
        load_records_table(con, path)
        assert con.execute("SELECT count(*), any_value(item_key) FROM records").fetchone() == (1, "MEDMISQA/1")
    finally:
        con.close()
