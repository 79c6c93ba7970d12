"""A run folder that cannot be written: one line naming the path and the error number, exit 2
when nothing was written, else exit 3 with the manifest's outcome ``write failed``; a resume
afterwards writes no line twice (experiments/harness/_caseloop.py, _runner.py).

Each run is its own ``medmis`` process. You are likely root here, for whom a read-only folder
is no obstacle: the failures are a directory where a file should be, a file where a folder
should be, and a disk that fills up under the record file (``OSError(ENOSPC)`` raised by the
file itself after half a line reached the disk, as a full disk does).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"
RUN = ["run", "--data", str(SAMPLE), "--limit", "10", "--model", "mock/examinee", "--defender", "none",
       "--no-progress", "--max-connections", "2"]  # fmt: skip
CASES = 30

# `medmis` whose records.jsonl, opened for appending, fills the disk on its third line
DISK_FULL = textwrap.dedent("""
    import errno, sys
    from pathlib import Path
    from medmis.experiments.cli import main

    real_open = Path.open

    class FullDisk:
        def __init__(self, fh):
            self._fh, self._lines = fh, 0

        def __getattr__(self, name):
            return getattr(self._fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._fh.close()

        def write(self, text):
            self._lines += 1
            if self._lines == 3:
                self._fh.write(text[: len(text) // 2])  # half the line reaches the disk
                self._fh.flush()
                raise OSError(errno.ENOSPC, "No space left on device")
            return self._fh.write(text)

    def open_(self, *args, **kwargs):
        fh = real_open(self, *args, **kwargs)
        return FullDisk(fh) if self.name == "records.jsonl" and args[:1] == ("a",) else fh

    Path.open = open_
    sys.exit(main(sys.argv[1:]))
""")


def medmis(*args: str, driver: str | None = None) -> subprocess.CompletedProcess[str]:
    head = ["-c", driver] if driver else ["-m", "medmis.experiments.cli"]
    return subprocess.run([sys.executable, *head, *args], capture_output=True, text=True, timeout=120)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("medmis: ")]
    assert "Traceback" not in stderr and len(lines) == 1, stderr
    return lines[0]


def ablation_config(tmp_path: Path, out: Path) -> Path:
    path = tmp_path / "ablation.toml"
    path.write_text(textwrap.dedent(f"""
        name = "w"
        data = "{SAMPLE.as_posix()}"
        limit = 10
        out = "{out.as_posix()}"
        max_connections = 2

        [[models]]
        spec = "mock/examinee"

        [[defenders]]
        name = "none"
    """), encoding="utf-8")
    return path


def command(kind: str, tmp_path: Path, out: Path) -> list[str]:
    if kind == "ablate":
        return ["ablate", str(ablation_config(tmp_path, out)), "--no-progress"]
    return [*RUN, "--out", str(out)]


def manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text())


def keys(path: Path) -> list[tuple[str, str, str | None]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["item_id"], r["protocol"], r["target"]) for r in rows]


@pytest.mark.parametrize("kind", ["run", "ablate"])
def test_a_directory_where_records_should_be_is_one_line_and_exit_2(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    (out / "records.jsonl").mkdir(parents=True)
    done = medmis(*command(kind, tmp_path, out))
    assert done.returncode == 2, done.stderr
    # one preflight of every output path, for run and ablate alike (issue 31)
    expected = f"{out / 'records.jsonl'} is a folder where the run writes a file; move it away or choose another --out"
    assert one_line(done.stderr) == f"medmis: {expected}"
    assert sorted(p.name for p in out.iterdir()) == ["records.jsonl"]  # nothing created


def test_a_file_where_the_traces_folder_should_be_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "traces").write_text("")
    done = medmis(*RUN, "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) == (f"medmis: {out / 'traces'} is a file where the run keeps a folder; "
                                     "move it away or choose another --out")
    assert sorted(p.name for p in out.iterdir()) == ["traces"]  # nothing created


def test_a_directory_where_a_trace_file_should_be_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    # it used to fail at the first case, after manifest.json, plan.json and an empty
    # records.jsonl were made; exit 2 creates nothing (issue 31)
    out = tmp_path / "out"
    (out / "traces" / "mock_examinee__none.jsonl").mkdir(parents=True)
    done = medmis(*RUN, "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert "is a folder where the run writes a file" in one_line(done.stderr)
    assert sorted(p.name for p in out.iterdir()) == ["traces"]


@pytest.mark.parametrize("kind", ["run", "ablate"])
def test_a_full_disk_mid_run_stops_with_exit_3_and_the_resume_writes_no_line_twice(
        tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    args = command(kind, tmp_path, out)
    done = medmis(*args, driver=DISK_FULL)
    assert done.returncode == 3, done.stderr
    assert one_line(done.stderr) == (
        f"medmis: cannot write {out / 'records.jsonl'}: [Errno 28 ENOSPC] No space left on device; "
        "2 record(s) written before it, re-run the same command to resume")
    outcome = manifest(out)["outcome"]
    assert outcome["status"] == "write failed" and outcome["exit_code"] == 3
    # the failed case left nothing: neither half its record nor its trace line
    assert (out / "records.jsonl").read_text().endswith("\n") and len(keys(out / "records.jsonl")) == 2
    trace = out / "traces" / "mock_examinee__none.jsonl"
    assert keys(trace) == keys(out / "records.jsonl")
    again = medmis(*args)
    assert again.returncode == 0, again.stderr
    records = keys(out / "records.jsonl")
    assert len(records) == len(set(records)) == CASES
    assert sorted(keys(trace), key=str) == sorted(records, key=str)  # one trace line per case, none twice


def test_a_record_line_that_is_not_utf8_is_named_on_resume(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = medmis(*RUN, "--out", str(out), "--limit", "3")
    assert first.returncode == 0, first.stderr
    lines = (out / "records.jsonl").read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"defender":"none"', b'"defender":"n\xff\xfee"')
    (out / "records.jsonl").write_bytes(b"\n".join(lines))
    again = medmis(*RUN, "--out", str(out), "--limit", "3")
    assert again.returncode == 2, again.stderr
    line = one_line(again.stderr)
    assert line.startswith(f"medmis: {out / 'records.jsonl'}:2: unreadable record, not UTF-8 (byte 0xff at column")
