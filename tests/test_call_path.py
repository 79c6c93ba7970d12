"""The per-call shortcuts of a run, each checked against the long way it replaces.

- ``json_needs_redaction`` may only say "nothing to mask" when the full redaction walk
  indeed changes nothing (fuzzed with the patterns' own look-alikes and credential names);
- ``scrub_lines`` writes what serialising the fully redacted record and trace would write;
- a fresh folder's resume plan and outcome equal the DuckDB reads they skip;
- importing the defenders does not import LangGraph.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from medmis.experiments.benchmark import Record
from medmis.experiments.harness._outcome import record_outcome
from medmis.experiments.harness._resume import CasePlan, resume_state
from medmis.experiments.records import scrub_lines
from medmis.tools import json_needs_redaction, redact_json, redact_obj

_PIECES = ["sk-", "sk-proj-", "AIza", "tvly-", "jina_", "Bearer ", "BEARER\t", "apı_key=", "APİ-KEY: ",
           "x-api-key", "Authorization: ", "?key=", "&token=", "https://", "user:pw@", "@", "=", "K", "ſ",
           "a" * 20, "Z9_-" * 9, " ", "\n", "é", "Final answer: B", '"', ":", "\\", "secret-value-1",
           "Basic ", "basic\t", "dXNlcjpwYXNz", "c2NpZW5jZQ==", "c2VjcmV0LXZhbHVlLTE", "x"]
_NAMES = ["model", "api_key", "API-KEY", "auth", "Auth", "key", "keys", "pwd", "input_tokens", "access_token",
          "x_token\n", "token", "tokenizer", "secret", "client.Secret", "password", "credentials", "Kelvin",
          "aſecret", "note", "é"]


def _tree(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.random()
    if depth > 2 or kind < 0.45:
        return "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 6)))
    if kind < 0.55:
        return rng.choice([None, 3, 2.5, True])
    if kind < 0.75:
        return [_tree(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(_NAMES): _tree(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def test_the_json_quick_check_only_skips_what_the_full_walk_leaves_alone() -> None:
    rng = random.Random(11)
    secrets = ["secret-value-1"]
    skipped = changed = 0
    for _ in range(6000):
        obj = _tree(rng)
        text = json.dumps(obj, ensure_ascii=False)
        full = redact_obj(obj, secrets)
        if full != obj:
            changed += 1
        if not json_needs_redaction(text, secrets):
            skipped += 1
            assert full == obj, text
            assert redact_json(obj, secrets) is obj
        else:
            assert redact_json(obj, secrets) == full
    assert changed > 1000 and skipped > 500  # both sides were exercised


def test_a_trace_of_plain_text_needs_no_walk() -> None:
    trace = {"raw": "Reasoning.\nFinal answer: C", "usage": {"input_tokens": 5, "output_tokens": 2},
             "steps": [{"input": [{"role": "human", "content": "Which drug? µg/kg – 5 °C"}]}]}
    assert not json_needs_redaction(json.dumps(trace, ensure_ascii=False), ["sk-configured-123456"])


def _record(**update: Any) -> Record:
    base = dict(model="openai/x", defender="none", protocol="clean", item_id="q1", subset="S", target=None,
                gold="A", choice="A", correct=True, error=None, latency_s=0.1, seed=0,
                trace_file="traces/openai_x__none.jsonl")
    base.update(update)
    return Record(**base)


@pytest.mark.parametrize("error", [None, "AuthenticationError: Incorrect API key provided: sk-proj-abcdefghijklmnop1234",
                                   "BadRequest: key=configured-secret-99"])
def test_scrub_lines_writes_what_the_full_redaction_would(error: str | None) -> None:
    secrets = ["configured-secret-99"]
    record = _record(error=error, choice=None if error else "A", correct=None if error else True)
    trace = {"raw": error or "Final answer: A", "steps": [{"input": "ask", "when": Path("/x")}],
             "extra": {"api_key": "plain"} if error else {}}
    masked, record_line, trace_line = scrub_lines(record, trace, secrets)
    full_record = Record.model_validate(redact_obj(record.model_dump(mode="json"), secrets))
    full_trace = redact_obj(json.loads(json.dumps(trace, default=str)), secrets)
    assert masked == full_record
    assert json.loads(record_line) == json.loads(full_record.model_dump_json())
    assert json.loads(trace_line) == full_trace
    if error:
        assert "abcdefghijklmnop" not in record_line + trace_line and "configured-secret-99" not in trace_line
        assert json.loads(trace_line)["extra"]["api_key"] == "***"
    else:
        assert masked is record and record_line == record.model_dump_json()


def _plan() -> CasePlan:
    cases = [("clean", "S/q1", None), ("type1", "S/q1", "B"), ("clean", "S/q2", None)]
    return CasePlan(["m1", "m2"], ["none", "warn"], cases)


def test_a_fresh_folder_plans_what_the_duckdb_read_plans(tmp_path: Path) -> None:
    fresh = resume_state(tmp_path / "absent.jsonl", _plan())
    # a records file whose only record belongs to no planned key goes through DuckDB
    other = tmp_path / "records.jsonl"
    other.write_text(_record(model="other/model", item_id="zz").model_dump_json() + "\n", encoding="utf-8")
    scanned = resume_state(other, _plan())
    assert fresh.missing == scanned.missing and len(fresh.missing) == 2 * 2 * 3
    assert fresh.records == 0 and scanned.records == 1


def test_an_outcome_from_the_runs_own_tally_equals_the_files(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("{}", encoding="utf-8")
    records = tmp_path / "records.jsonl"
    lines = [_record(item_id=f"q{i}", error="RateLimitError: 429" if i % 2 else None).model_dump_json()
             for i in range(5)]
    records.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["medmis", "run", "--data", "d.jsonl"]
    n_file, from_file = record_outcome(tmp_path, records, None, argv)
    n_tally, from_tally = record_outcome(tmp_path, records, None, argv,
                                         tally=(5, ["RateLimitError: 429", "RateLimitError: 429"]))
    assert (n_file, from_file) == (n_tally, from_tally) and from_file.code != 0


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env}, check=False)


def test_importing_the_defenders_does_not_import_langgraph() -> None:
    done = _python("""
        import sys
        import medmis.defenses, medmis.experiments.harness._runner
        assert not any(m.startswith("langgraph") for m in sys.modules), sorted(sys.modules)
        from medmis.defenses import create_defender
        create_defender("search_agent", {})
    """)
    assert done.returncode == 0, done.stderr[-2000:]


def test_scrub_lines_handles_httpx_objects_in_a_trace() -> None:
    """What json cannot encode is written as its str(), as before."""
    record = _record()
    _, _, line = scrub_lines(record, {"url": httpx.URL("https://example.org/a?b=1")}, [])
    assert json.loads(line) == {"url": "https://example.org/a?b=1"}


def test_a_type1_record_that_overtakes_its_clean_one_is_paired_when_it_arrives() -> None:
    from medmis.experiments.harness import RunStats

    def rec(protocol: str, item: str, correct: bool) -> Record:
        return _record(protocol=protocol, item_id=item, target="B" if protocol == "type1" else None,
                       choice="A" if correct else "B", correct=correct)

    in_order, overtaken = RunStats(), RunStats()
    stream = [rec("clean", "q1", True), rec("type1", "q1", False), rec("clean", "q2", True),
              rec("type1", "q2", True), rec("clean", "q3", False), rec("type1", "q3", False)]
    clean_a: dict[tuple[str, str, str], bool] = {}
    for r in stream:
        in_order.add(r, clean_a)
    clean_b: dict[tuple[str, str, str], bool] = {}
    for r in [stream[1], stream[3], stream[5], stream[0], stream[4], stream[2]]:
        overtaken.add(r, clean_b)
    assert in_order.flips == overtaken.flips == [1, 2]
    assert not overtaken.waiting
