"""The case browser's data: every item with its protocol rows and each defender's answer.

Built from ``traces/*.jsonl`` of a run (the latest trace per key), with the question and options
recovered from the prompt a model saw. Long texts are clipped to keep ``report.html`` bounded;
the records and traces keep everything. The page (:mod:`._html`) embeds this as JSON.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from medmis.agents import content_text
from medmis.tools import json_value

RAW_LIMIT = 4000
TEXT_LIMIT = 600  # claims, quotes, queries, URLs
MAX_ITEMS = 400  # case browser cap; the records and traces keep everything
MAX_ANSWERS = 20_000  # answers (records) of the sampled items, about 3 MB of page
MIN_ITEMS = 50  # the sample's floor however wide the grid

_OPTION = re.compile(r"^\s*([A-Za-z0-9]{1,3}):\s*(.+)$")
_PROTOCOLS = ("clean", "type1", "type2")


_STR = rb'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'  # a JSON string on one line (unrolled: fast in re)
_ID_HEAD = re.compile(rb'\{"model": ' + _STR + rb', "defender": ' + _STR + rb', "protocol": ' + _STR
                      + rb', "item_id": (' + _STR + rb')')
_BLOCK = 8 << 20


def _id_suffixes(items: set[str]) -> set[str]:
    """Every ``x`` with ``key.endswith("/" + x)`` for a key in ``items``: the ids a trace line
    can have to belong to one of them, with or without its subset."""
    return {k[i + 1:] for k in items for i, ch in enumerate(k) if ch == "/"}


def _head_id(head: bytes) -> str | None:
    raw = head[1:-1]
    if b"\\" not in raw:
        return raw.decode("utf-8", "replace")
    try:
        value = json.loads(head.decode("utf-8", "replace"))
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None


def _candidate_lines(path: Path, items: set[str]) -> Iterator[str]:
    """The lines of ``path`` that may belong to ``items``, decoded as a text-mode read would.

    A line whose head (the runner's first key fields) names an item id that no key in
    ``items`` ends with is skipped without being decoded or parsed; any other line is passed
    on. Bytes are split on newlines in blocks; a block holding a carriage return is split as
    text mode splits it (universal newlines), so the lines are those of ``open(path)``.
    """
    ids = _id_suffixes(items)
    with path.open("rb") as fh:
        rest = b""
        while True:
            chunk = fh.read(_BLOCK)
            block = rest + chunk
            if not chunk:
                rest = b""
            else:
                cut = block.rfind(b"\n") + 1
                block, rest = block[:cut], block[cut:]
            if b"\r" in block:
                yield from io.StringIO(block.decode("utf-8", "replace"), newline=None)
            elif block:
                for line in block.split(b"\n"):
                    if not line:
                        continue
                    m = _ID_HEAD.match(line)
                    if m is not None and _head_id(m.group(1)) not in ids:
                        continue
                    yield line.decode("utf-8", "replace")
            if not chunk:
                return


def _read_jsonl(path: Path, items: set[str] | None = None) -> list[dict[str, Any]]:
    """Trace lines with their key fields; with ``items``, only lines of those item keys.

    Lines are streamed; with ``items``, a line whose head (the runner's key fields) names an
    item id no key ends with is skipped without being decoded or parsed.
    """
    out = []
    ids = _id_suffixes(items) if items is not None else set()
    with path.open(encoding="utf-8", errors="replace") as fh:
        lines: Iterable[str] = fh if items is None else _candidate_lines(path, items)
        for line in lines:
            try:
                obj = json_value(line, path, None)
            except ValueError:
                continue  # a torn last line of a killed run (or a line no reader accepts)
            # a line without its key fields cannot be placed in the browser
            if not (isinstance(obj, dict) and obj.get("item_id") and obj.get("protocol") in _PROTOCOLS):
                continue
            # traces written before "subset" was added are matched on the id alone
            if items is None or _item_key(obj) in items or (
                    not obj.get("subset") and str(obj["item_id"]) in ids):
                out.append(obj)
    return out


def parse_question(text: str) -> tuple[str, dict[str, str]] | None:
    """Question and options from a rendered prompt (``Question:`` … ``Options:`` …).

    The *last* ``Options:`` block is taken: the untrusted context sentences come before the
    question, so one that imitates a question cannot replace the real one.
    """
    opt_at = text.rfind("\n\nOptions:\n")
    q_at = text.rfind("Question:\n", 0, max(opt_at, 0))
    if opt_at < 0 or q_at < 0:
        return None
    options: dict[str, str] = {}
    for line in text[opt_at + len("\n\nOptions:\n"):].split("\n"):
        m = _OPTION.match(line)
        if not m:
            break  # the options block ends at the answer instruction
        options[m.group(1)] = m.group(2).strip()
    question = text[q_at + len("Question:\n"):opt_at].strip()
    return (question, options) if question and options else None


def question_from_trace(trace: Mapping[str, Any]) -> tuple[str, dict[str, str]] | None:
    """Question and options from the first user prompt of a trace that parses."""
    for step in trace.get("steps") or []:
        if not isinstance(step, dict) or step.get("kind") != "model":
            continue
        messages = step.get("input")
        for message in messages if isinstance(messages, list) else []:
            if not isinstance(message, dict) or message.get("role") not in ("human", "user"):
                continue
            content = message.get("content")
            found = parse_question(content_text(content) if isinstance(content, (str, list)) else "")
            if found:
                return found
    return None


def clip_text(text: Any, limit: int = RAW_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, saying how many were cut."""
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + f"\n[… clipped {len(text) - limit} characters]"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def agent_view(trace: Mapping[str, Any]) -> dict[str, Any]:
    """A trace's searches and visits, clipped, for the case views (report and ``medmis view``)."""
    searches: list[dict[str, Any]] = []
    visits: list[dict[str, Any]] = []
    for step in trace.get("steps") or []:
        if not isinstance(step, dict) or step.get("kind") != "tool":
            continue
        args = _dict(step.get("input"))
        error = clip_text(step["error"], TEXT_LIMIT) if step.get("error") else None
        if step.get("name") == "search_web":
            searches.append({"query": clip_text(args.get("query", ""), TEXT_LIMIT), "error": error})
        elif step.get("name") == "visit_web":
            page = _dict(step.get("output"))
            final = page.get("final_url")
            url = str(args.get("url", ""))
            if final and final != url:  # show where a redirect actually landed
                url += " → " + str(final)
            visits.append({"url": clip_text(url, TEXT_LIMIT), "error": error})
    extra = _dict(trace.get("extra"))
    # Traces without tool steps (e.g. trimmed by hand) still carry the agent's own summary.
    if not searches:
        searches = [{"query": clip_text(s.get("query", ""), TEXT_LIMIT), "error": s.get("error")}
                    for s in extra.get("searches") or [] if isinstance(s, dict)]
    if not visits:
        visits = [{"url": clip_text(u, TEXT_LIMIT), "error": None}
                  for u in extra.get("visited") or [] if isinstance(u, str)]
    verdicts = [
        {"claim": clip_text(v.get("claim"), TEXT_LIMIT), "verdict": v.get("verdict"),
         "quote": clip_text(v.get("quote"), TEXT_LIMIT),
         "url": clip_text(v["url"], TEXT_LIMIT) if v.get("url") else None}
        for v in extra.get("verdicts") or [] if isinstance(v, dict)
    ]
    # cited = the answer's sources by the harness's one rule; a visited page is listed under
    # visits only (older traces' ``cited_urls`` fell back to the visited pages: never shown)
    cited = [{"url": clip_text(s["url"], TEXT_LIMIT), "by": s.get("by") if isinstance(s.get("by"), str) else None}
             for s in extra.get("sources") or [] if isinstance(s, dict) and isinstance(s.get("url"), str)]
    return {"searches": searches, "visits": visits, "verdicts": verdicts, "cited": cited,
            "escalated": extra.get("escalated")}


def _item_key(trace: dict[str, Any]) -> str:
    # released ids repeat across subsets; traces written before "subset" was added lack it
    return f"{trace.get('subset') or ''}/{trace['item_id']}"


_SAMPLE = """
WITH r AS (SELECT model, defender, protocol, item_key, subset, error IS NULL AND
                  coalesce(correct, choice IS NOT NULL AND choice = gold) AS ok FROM records),
c AS (SELECT model, defender, item_key, ok AS clean_ok FROM r WHERE protocol = 'clean'),
i AS (SELECT r.item_key, any_value(r.subset) AS subset,
             bool_or(coalesce(r.protocol <> 'clean' AND NOT r.ok AND c.clean_ok, false)) AS flip
      FROM r LEFT JOIN c USING (model, defender, item_key) GROUP BY r.item_key)
SELECT item_key, flip, count(*) OVER () FROM i
ORDER BY flip DESC, row_number() OVER (PARTITION BY flip, subset ORDER BY item_key), subset
LIMIT ?
"""


def sample_items(run_dir: Path, max_items: int) -> tuple[list[str], int] | None:
    """At most ``max_items`` item keys, flips first, spread evenly over subsets; and the total.

    Fewer on a wide grid: about :data:`MAX_ANSWERS` records' answers in all, never fewer
    than :data:`MIN_ITEMS` items.

    Reads ``records.jsonl`` through DuckDB (None when the run has none): a case is flipped
    when an injected case is answered wrongly by a (model, defender) that was right on clean.
    """
    from medmis.experiments.records import connect, planned_records_view

    records = run_dir / "records.jsonl"
    if not records.exists() or records.stat().st_size == 0:
        return None
    con = connect()
    try:
        planned_records_view(con, run_dir)
        # a wide grid answers each item many times: bound the answers the page embeds too
        per_item = con.execute("SELECT count(*) / count(DISTINCT item_key) FROM records").fetchone()
        if per_item and per_item[0]:
            max_items = min(max_items, max(MIN_ITEMS, int(MAX_ANSWERS // per_item[0])))
        rows = con.execute(_SAMPLE, [max_items]).fetchall()
        total = rows[0][2] if rows else con.execute(
            "SELECT count(DISTINCT item_key) FROM records").fetchone()[0]  # type: ignore[index]
    finally:
        con.close()
    return [k for k, _, _ in rows], int(total)


def case_data(run_dir: Path, max_items: int = MAX_ITEMS) -> dict[str, Any]:
    """The case browser's data: items with their protocol rows and every defender's answer.

    With ``records.jsonl`` present, only a sample of items is read from the traces (see
    :func:`sample_items`), so the page and the memory it takes stay bounded on any run.
    """
    sample = sample_items(run_dir, max_items)
    chosen = set(sample[0]) if sample else None
    per_file = [_read_jsonl(p, chosen) for p in sorted((run_dir / "traces").glob("*.jsonl"))]
    return _assemble(sample, per_file, max_items)


def _assemble(sample: tuple[list[str], int] | None, per_file: list[list[dict[str, Any]]],
              max_items: int) -> dict[str, Any]:
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for lines in per_file:
        for t in lines:
            # --retry-errors appends a fresh trace for a key; the last one is the record's
            latest[(t.get("model"), t.get("defender"), t["protocol"], _item_key(t),
                    t.get("target"), t.get("epoch") or 0)] = t
    # Clean traces first: their prompt carries the question without any injected text.
    traces = sorted(latest.values(), key=lambda t: t["protocol"] != "clean")
    # an attacked answer flips against the clean answer of its own epoch (--epochs)
    clean_ok = {(t.get("model"), t.get("defender"), _item_key(t), t.get("epoch") or 0): t.get("choice") == t.get("gold")
                for t in traces if t.get("protocol") == "clean" and not t.get("error")}
    items: dict[str, dict[str, Any]] = {}
    for t in traces:
        item = items.setdefault(_item_key(t), {"id": t["item_id"], "gold": t.get("gold"), "question": "",
                                               "options": {}, "rows": {}})
        if not item["question"]:
            found = question_from_trace(t)
            if found:
                item["question"], item["options"] = found
        row_key = f"{t['protocol']}|{t.get('target') or ''}"
        row = item["rows"].setdefault(row_key, {
            "protocol": t["protocol"], "target": t.get("target"),
            "context": [{"text": clip_text(c.get("text", ""), RAW_LIMIT), "option": c.get("option"),
                         "truthful": c.get("truthful")}
                        for c in t.get("context") or [] if isinstance(c, dict)],
            "answers": [],
        })
        correct = None if t.get("error") else t.get("choice") == t.get("gold")
        flipped = bool(t["protocol"] != "clean" and correct is False
                       and clean_ok.get((t.get("model"), t.get("defender"), _item_key(t), t.get("epoch") or 0)))
        row["answers"].append({
            "model": str(t.get("model")), "defender": str(t.get("defender")),
            "choice": t.get("choice"),
            "correct": correct, "error": t.get("error"), "flipped": flipped,
            "raw": clip_text(t.get("raw")), "agent": agent_view(t),
        })
    # the sample's order (flips first), else by id: trace files are written as cases finish
    order = {k: i for i, k in enumerate(sample[0])} if sample else {}
    ordered = [items[k] for k in sorted(items, key=lambda k: (order.get(k, len(order)), k))]
    total = sample[1] if sample else len(ordered)
    for item in ordered:
        for row in item["rows"].values():
            row["answers"].sort(key=lambda a: (a["model"], a["defender"]))
        item["rows"] = sorted(item["rows"].values(),
                              key=lambda r: (["clean", "type1", "type2"].index(r["protocol"]), r["target"] or ""))
    return {"items": ordered[:max_items], "total_items": max(total, len(ordered)),
            "clipped": max(total, len(ordered)) > max_items,
            "defenders": sorted({a["defender"] for i in ordered for r in i["rows"] for a in r["answers"]}),
            "models": sorted({a["model"] for i in ordered for r in i["rows"] for a in r["answers"]})}
