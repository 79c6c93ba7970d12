"""``medmis view``: the JSON API and the page in headless Chromium, on a 200,000-record run.

The big run comes from the DuckDB generator (seconds); expected counts are computed here
independently, with ``json`` over ``records.jsonl``. A small hand-made run carries hostile
text (markup in ids, answers, errors and traces) that must stay text in the page.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from medmis.experiments.bench._scale_run import generate_run_fast
from medmis.experiments.view import RunView, serve_in_thread


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        if found := shutil.which(name):
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


def dump(url: str, profile: Path) -> str:
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
             f"--user-data-dir={profile}", "--virtual-time-budget=20000"]
    dom = subprocess.run([browser, *flags, "--dump-dom", url], capture_output=True, text=True,
                         timeout=90, check=False).stdout
    assert 'data-ready="1"' in dom, dom[-2000:]
    return dom


def get(base: str, path: str, **params: Any) -> Any:
    with urllib.request.urlopen(f"{base}{path}?{urlencode(params)}", timeout=30) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[dict[str, Any]], Path]]:
    root = tmp_path_factory.mktemp("big")
    run = generate_run_fast(root, items=4200, traced_items=12)
    assert run.records >= 200_000
    with (run.run_dir / "records.jsonl").open(encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    assert len(records) == run.records
    view = RunView(run.run_dir)
    server, _ = serve_in_thread(view)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", records, root
    finally:
        server.shutdown()
        view.close()


def _expected(records: list[dict[str, Any]]) -> dict[str, set[tuple[Any, ...]]]:
    """Keys per outcome, from the definitions in the engine's docstring."""
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["model"], r["defender"], r["protocol"], r["subset"], r["item_id"], r["target"])

    def ok(r: dict[str, Any]) -> bool:
        return r["error"] is None and bool(r["correct"] if r["correct"] is not None else r["choice"] == r["gold"])

    clean = {(r["model"], r["defender"], r["subset"], r["item_id"]): ok(r)
             for r in records if r["protocol"] == "clean" and r["error"] is None}
    base = {(r["model"], r["protocol"], r["subset"], r["item_id"], r["target"]): r
            for r in records if r["defender"] == "none"}
    out: dict[str, set[tuple[Any, ...]]] = {o: set() for o in ("flipped", "recovered", "differs", "unparsed", "errored")}
    for r in records:
        c = clean.get((r["model"], r["defender"], r["subset"], r["item_id"]))
        if r["protocol"] != "clean" and r["error"] is None and not ok(r) and c:
            out["flipped"].add(key(r))
        if r["protocol"] == "type2" and ok(r) and c is False:
            out["recovered"].add(key(r))
        b = base.get((r["model"], r["protocol"], r["subset"], r["item_id"], r["target"]))
        if r["defender"] != "none" and b is not None and (
                r["choice"] != b["choice"] or (r["error"] is None) != (b["error"] is None)):
            out["differs"].add(key(r))
        if r["error"] is None and r["choice"] is None:
            out["unparsed"].add(key(r))
        if r["error"] is not None:
            out["errored"].add(key(r))
    return out


@pytest.mark.scale
def test_api_filters_match_the_records(big: tuple[str, list[dict[str, Any]], Path]) -> None:
    base, records, _ = big
    facets = get(base, "api/facets")
    assert facets["total"] == len(records)
    assert facets["defender"] == ["none", "warning", "search_agent", "claim_verify"]
    expected = _expected(records)
    for outcome, keys in expected.items():
        assert keys, outcome  # every outcome occurs in the generated run
        page = get(base, "api/cases", outcome=outcome, limit=500)
        assert page["total"] == len(keys), outcome
        assert all(r[outcome] for r in page["rows"])
    want = [r for r in records if r["defender"] == "warning" and r["subset"] == "MEDMISHLE"
            and r["protocol"] == "type1" and r["provenance"] == records[0]["provenance"]]
    page = get(base, "api/cases", defender="warning", subset="MEDMISHLE", protocol="type1",
               provenance=records[0]["provenance"], offset=10, limit=20)
    assert page["total"] == len(want)
    assert [(r["item_id"], r["target"]) for r in page["rows"]] == [(r["item_id"], r["target"]) for r in want[10:30]]
    # text search over the data file's questions, and the jump to an item
    page = get(base, "api/cases", q="question 4117:", model="mock/scale-b")
    assert page["total"] == sum(1 for r in records if r["item_id"] == "q004117" and r["model"] == "mock/scale-b")
    assert get(base, "api/cases", item="q000007")["total"] == sum(r["item_id"] == "q000007" for r in records)
    with pytest.raises(urllib.error.HTTPError) as err:
        get(base, "api/cases", outcome="bogus")
    assert err.value.code == 400


@pytest.mark.scale
@pytest.mark.browser
def test_chromium_filters_and_case_detail(big: tuple[str, list[dict[str, Any]], Path]) -> None:
    base, records, root = big
    flipped = [r for r in records if r["defender"] == "warning"
               and r["model"] == "mock/scale-a" and r["protocol"] == "type2"]
    dom = dump(base + "?" + urlencode({"model": "mock/scale-a", "defender": "warning",
                                       "protocol": "type2", "outcome": "flipped"}), root / "p1")
    total = get(base, "api/cases", model="mock/scale-a", defender="warning", protocol="type2",
                outcome="flipped")["total"]
    assert 0 < total < len(flipped)
    assert re.search(rf'id="summary">{total} cases, showing 1–50<', dom)
    rows = re.findall(r'<tr class="row"[^>]*>(.*?)</tr>', dom)
    assert len(rows) == 50
    for row in rows:
        cells = re.findall(r"<td>(.*?)</td>", row)
        assert cells[2:5] == ["mock/scale-a", "warning", "type2"]
        assert '<span class="flag">flipped</span>' in row
    # jump to an item: its first case opens with question, options, injected sentence and,
    # for the search agent, its searches and visited pages
    dom = dump(base + "?" + urlencode({"item": "q000003", "defender": "search_agent", "protocol": "type1"}),
               root / "p2")
    detail = dom[dom.index('<section id="detail">'):]
    assert "Synthetic scale question 3: which option is the filler answer?" in detail
    assert "(injected target)" in detail and "(gold)" in detail
    assert "<h3>Injected sentences</h3><ul><li>[for A] Filler sentence 1 for item 3.</li>" in detail
    assert "<h5>Searches</h5><ul><li>evidence for q000003</li>" in detail
    assert "https://example.org/evidence/q000003" in detail
    assert detail.count('class="answer"') == 4  # every defender's answer to this case
    # text search and a subset filter
    dom = dump(base + "?" + urlencode({"q": "question 4117:", "subset": "MEDMISXPERTQA"}), root / "p3")
    want = sum(1 for r in records if r["item_id"] == "q004117" and r["subset"] == "MEDMISXPERTQA")
    assert want and re.search(rf'id="summary">{want} cases, showing 1–{want}<', dom)


def test_hostile_text_stays_text(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    evil = '<img src=x onerror="document.body.dataset.pwned=1">'
    base = {"model": "m", "subset": "MEDMISQA", "item_id": "x<b>1</b>", "gold": "A",
            "content_type": evil, "provenance": None, "trace_file": "traces/m__none.jsonl"}
    records = [base | {"defender": d, "protocol": p, "target": t, "choice": c, "correct": c == "A",
                       "error": e, "trace_file": f"traces/m__{d}.jsonl"}
               for d in ("none", "guard") for p, t, c, e in
               (("clean", None, "A", None), ("type1", "B", "B" if d == "none" else None,
                                             None if d == "none" else "Boom: </script>" + evil))]
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    for d in ("none", "guard"):
        lines = [{"model": "m", "defender": d, "protocol": r["protocol"], "item_id": r["item_id"],
                  "subset": "MEDMISQA", "target": r["target"], "context": [{"text": evil, "option": "B"}],
                  "choice": r["choice"], "gold": "A", "error": r["error"], "raw": "raw " + evil,
                  "extra": {"verdicts": [{"claim": evil, "verdict": "refuted", "quote": evil}]},
                  "steps": [{"kind": "model", "input": [{"role": "human", "content":
                             f"Question:\nWhich {evil}?\n\nOptions:\nA: yes {evil}\nB: no\n\nAnswer."}]}]}
                 for r in records if r["defender"] == d]
        (run / f"traces/m__{d}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")
    view = RunView(run)
    server, _ = serve_in_thread(view)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        case = get(url, "api/case", model="m", defender="guard", protocol="type1",
                   item_key="MEDMISQA/x<b>1</b>", target="B")
        assert case["question"] == f"Which {evil}?" and case["options"]["A"] == f"yes {evil}"
        with urllib.request.urlopen(url, timeout=10) as r:
            assert "script-src 'self'" in r.headers["Content-Security-Policy"]
        dom = dump(url + "?" + urlencode({"item": "x<b>1</b>", "protocol": "type1", "defender": "guard"}),
                   tmp_path / "profile")
    finally:
        server.shutdown()
        view.close()
    assert "data-pwned" not in dom and not re.search(r"<img", dom) and "<b>1</b>" not in dom
    assert "x&lt;b&gt;1&lt;/b&gt;" in dom
    assert "error: Boom: &lt;/script&gt;&lt;img" in dom
    assert "refuted: &lt;img src=x" in dom
