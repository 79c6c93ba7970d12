"""A single self-contained ``report.html``: tables, plots and a case browser.

Everything is inside the file (CSS, JS, PNGs as data URIs), so it opens offline; a
Content-Security-Policy allows nothing else, so even a URL that slipped into the markup could
not be fetched. Case data is embedded as JSON (with ``</`` escaped) and rendered with
``textContent`` only: model outputs and web pages are untrusted text and never become markup.
Long texts are clipped to keep the file bounded.

Also here: the Type 2 delivery-sensitivity comparison (option order vs a seeded shuffle,
``DIR/type2_shuffled``), as rows for the HTML and as a markdown section for ``report.md``.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from medmis.agents._mock import content_text

RAW_LIMIT = 4000
TEXT_LIMIT = 600  # claims, quotes, queries, URLs
MAX_ITEMS = 400  # case browser cap; the records and traces keep everything
SHUFFLED_DIR = "type2_shuffled"
SIMULATED_PREFIX = "mock/examinee"
"""Model specs of the offline demo's simulated examinee (as in ``_run``)."""

_OPTION = re.compile(r"^\s*([A-Za-z0-9]{1,3}):\s*(.+)$")
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Everything the page needs is inline; the policy makes sure nothing else can load.
_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'")

HEADLINE = [
    ("clean_acc", "Clean acc"), ("type1_acc", "T1 acc"), ("type2_acc", "T2 acc"),
    ("type1_asr", "T1 ASR"), ("type1_tasr", "T1 TASR"), ("type2_asr", "T2 ASR"),
    ("type2_recovery", "T2 recovery"),
]


def _pct(block: Mapping[str, Any] | None) -> str:
    if not block or block.get("value") is None:
        return "—"
    lo, hi = block.get("lo"), block.get("hi")
    ci = f" [{100 * lo:.1f}, {100 * hi:.1f}]" if lo is not None and hi is not None else ""
    return f"{100 * block['value']:.1f}%{ci}"


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _paired(block: Mapping[str, Any] | None) -> tuple[str, str]:
    if not block:
        return "—", "—"
    diff, lo, hi, p = (block.get(k) for k in ("diff", "lo", "hi", "p_value"))
    if diff is None:
        return "—", "—"
    delta = f"{100 * diff:+.1f}" + (f" [{100 * lo:+.1f}, {100 * hi:+.1f}]" if lo is not None and hi is not None else "")
    return delta, ("—" if p is None else ("<0.001" if p < 0.001 else f"{p:.3f}"))


def headline_html(metrics: Mapping[str, Any], baseline: str = "none") -> str:
    header = ["Model", "Defender", *(label for _, label in HEADLINE),
              f"ΔT1 ASR vs {baseline} (pts)", "McNemar p", "Unparsed", "Errors",
              "Model calls/case", "Tool calls/case", "Tokens/case"]
    rows = []
    for model, defenders in metrics.items():
        for defender, block in defenders.items():
            delta, p = _paired((block.get("paired") or {}).get("type1_asr"))
            cost = block.get("cost") or {}

            def num(key: str, digits: int, cost: Mapping[str, Any] = cost) -> str:
                value = cost.get(key)
                return "—" if value is None else f"{value:,.{digits}f}"

            rows.append([model, defender, *(_pct(block.get(m)) for m, _ in HEADLINE), delta, p,
                         _pct(block.get("unparsed_rate")).split(" ")[0],
                         _pct(block.get("error_rate")).split(" ")[0],
                         num("llm_calls_per_case", 2), num("tool_calls_per_case", 2),
                         num("tokens_per_case", 0)])
    return _table(header, rows, "headline")


def strata_html(metrics: Mapping[str, Any]) -> str:
    """Type 1 ASR per content type x provenance, and per subset, for each model x defender."""
    parts = []
    for model, defenders in metrics.items():
        for defender, block in defenders.items():
            strata = block.get("strata") or {}
            crossed = strata.get("content_type_x_provenance") or {}
            cts = list(strata.get("content_type") or {})
            provs = list(strata.get("provenance") or {})
            if not crossed or not cts or not provs:
                continue
            rows = []
            for ct in cts:
                row = [ct]
                for pv in provs:
                    cell = crossed.get(f"{ct} × {pv}")
                    t1 = (cell or {}).get("type1_asr") or {}
                    row.append("—" if t1.get("value") is None else f"{100 * t1['value']:.0f}% ({t1['k']}/{t1['n']})")
                rows.append(row)
            parts.append(f"<details><summary>{html.escape(model)} · {html.escape(defender)}</summary>"
                         + _table(["Content \\ provenance", *provs], rows) + "</details>")
            subsets = strata.get("subset") or {}
            if subsets:
                srows = [[name, _pct(b.get("clean_acc")), _pct(b.get("type1_asr")), _pct(b.get("type2_asr"))]
                         for name, b in subsets.items()]
                parts.append(f"<details><summary>{html.escape(model)} · {html.escape(defender)} by subset</summary>"
                             + _table(["Subset", "Clean acc", "T1 ASR", "T2 ASR"], srows) + "</details>")
    return "\n".join(parts)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line of a killed run
        # a line without its key fields cannot be placed in the browser
        if isinstance(obj, dict) and obj.get("item_id") and obj.get("protocol") in _PROTOCOLS:
            out.append(obj)
    return out


_PROTOCOLS = ("clean", "type1", "type2")


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


def _question_from(trace: Mapping[str, Any]) -> tuple[str, dict[str, str]] | None:
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


def _clip(text: Any, limit: int = RAW_LIMIT) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + f"\n[… clipped {len(text) - limit} characters]"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _agent_view(trace: Mapping[str, Any]) -> dict[str, Any]:
    searches: list[dict[str, Any]] = []
    visits: list[dict[str, Any]] = []
    for step in trace.get("steps") or []:
        if not isinstance(step, dict) or step.get("kind") != "tool":
            continue
        args = _dict(step.get("input"))
        error = _clip(step["error"], TEXT_LIMIT) if step.get("error") else None
        if step.get("name") == "search_web":
            searches.append({"query": _clip(args.get("query", ""), TEXT_LIMIT), "error": error})
        elif step.get("name") == "visit_web":
            page = _dict(step.get("output"))
            final = page.get("final_url")
            url = str(args.get("url", ""))
            if final and final != url:  # show where a redirect actually landed
                url += " → " + str(final)
            visits.append({"url": _clip(url, TEXT_LIMIT), "error": error})
    extra = _dict(trace.get("extra"))
    # Traces without tool steps (e.g. trimmed by hand) still carry the agent's own summary.
    if not searches:
        searches = [{"query": _clip(s.get("query", ""), TEXT_LIMIT), "error": s.get("error")}
                    for s in extra.get("searches") or [] if isinstance(s, dict)]
    if not visits:
        visits = [{"url": _clip(u, TEXT_LIMIT), "error": None}
                  for u in extra.get("visited") or [] if isinstance(u, str)]
    verdicts = [
        {"claim": _clip(v.get("claim"), TEXT_LIMIT), "verdict": v.get("verdict"),
         "quote": _clip(v.get("quote"), TEXT_LIMIT),
         "url": _clip(v["url"], TEXT_LIMIT) if v.get("url") else None}
        for v in extra.get("verdicts") or [] if isinstance(v, dict)
    ]
    cited = [_clip(u, TEXT_LIMIT) for u in extra.get("cited_urls") or [] if isinstance(u, str)]
    return {"searches": searches, "visits": visits, "verdicts": verdicts, "cited": cited,
            "escalated": extra.get("escalated")}


def case_data(run_dir: Path, max_items: int = MAX_ITEMS) -> dict[str, Any]:
    """The case browser's data: items with their protocol rows and every defender's answer."""
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path in sorted((run_dir / "traces").glob("*.jsonl")):
        for t in _read_jsonl(path):
            # --retry-errors appends a fresh trace for a key; the last one is the record's
            latest[(t.get("model"), t.get("defender"), t["protocol"], t["item_id"],
                    t.get("target"))] = t
    # Clean traces first: their prompt carries the question without any injected text.
    traces = sorted(latest.values(), key=lambda t: t["protocol"] != "clean")
    clean_ok = {(t.get("model"), t.get("defender"), t["item_id"]): t.get("choice") == t.get("gold")
                for t in traces if t.get("protocol") == "clean" and not t.get("error")}
    items: dict[str, dict[str, Any]] = {}
    for t in traces:
        item = items.setdefault(t["item_id"], {"id": t["item_id"], "gold": t.get("gold"), "question": "",
                                               "options": {}, "rows": {}})
        if not item["question"]:
            found = _question_from(t)
            if found:
                item["question"], item["options"] = found
        row_key = f"{t['protocol']}|{t.get('target') or ''}"
        row = item["rows"].setdefault(row_key, {
            "protocol": t["protocol"], "target": t.get("target"),
            "context": [{"text": _clip(c.get("text", ""), RAW_LIMIT), "option": c.get("option"),
                         "truthful": c.get("truthful")}
                        for c in t.get("context") or [] if isinstance(c, dict)],
            "answers": [],
        })
        correct = None if t.get("error") else t.get("choice") == t.get("gold")
        flipped = bool(t["protocol"] != "clean" and correct is False
                       and clean_ok.get((t.get("model"), t.get("defender"), t["item_id"])))
        row["answers"].append({
            "model": str(t.get("model")), "defender": str(t.get("defender")),
            "choice": t.get("choice"),
            "correct": correct, "error": t.get("error"), "flipped": flipped,
            "raw": _clip(t.get("raw")), "agent": _agent_view(t),
        })
    # sorted by id: trace files are written as cases finish, so their order is not stable
    ordered = [items[k] for k in sorted(items)]
    for item in ordered:
        for row in item["rows"].values():
            row["answers"].sort(key=lambda a: (a["model"], a["defender"]))
        item["rows"] = sorted(item["rows"].values(),
                              key=lambda r: (["clean", "type1", "type2"].index(r["protocol"]), r["target"] or ""))
    return {"items": ordered[:max_items], "total_items": len(ordered), "clipped": len(ordered) > max_items,
            "defenders": sorted({a["defender"] for i in ordered for r in i["rows"] for a in r["answers"]}),
            "models": sorted({a["model"] for i in ordered for r in i["rows"] for a in r["answers"]})}


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1400px;padding:1rem 2rem;color:#1d1d1f}
h1{font-size:1.6rem}h2{margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0;font-size:12.5px}th,td{border:1px solid #d8d8d8;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f6}.banner{background:#fff3cd;border:1px solid #e0b000;padding:.6rem 1rem;font-weight:600}
.plots img{max-width:100%;border:1px solid #eee;margin:.5rem 0}
.item{border:1px solid #ccc;border-radius:6px;margin:.8rem 0;padding:.5rem .8rem}.q{font-weight:600}
.row{margin:.4rem 0 .4rem 1rem;border-left:3px solid #ccd;padding-left:.6rem}.ctx{color:#7a2e00;margin:.2rem 0}
.ctx.true{color:#0a5b20}.ok{color:#0a5b20}.bad{color:#a40000}.err{color:#7a4a00}.flip{background:#ffe3e3}
.agent{font-size:12px;color:#333;margin-left:1rem}pre{white-space:pre-wrap;background:#f7f7f9;padding:.4rem;max-height:14rem;overflow:auto}
.controls{position:sticky;top:0;background:#fff;padding:.5rem 0;border-bottom:1px solid #ddd;z-index:1}
"""

_JS = r"""
(function(){
  const data = JSON.parse(document.getElementById('case-data').textContent);
  const box = document.getElementById('cases');
  const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; };
  const defSel = document.getElementById('f-defender'), protoSel = document.getElementById('f-protocol'), flipBox = document.getElementById('f-flipped');
  data.defenders.forEach(d => { const o = el('option', '', d); o.value = d; defSel.appendChild(o); });
  function answerView(a, options) {
    const div = el('div', a.flipped ? 'ans flip' : 'ans');
    const status = a.error ? 'error: ' + a.error : (a.choice === null ? 'no answer parsed' : (a.correct ? 'correct' : 'wrong'));
    const line = el('div', a.error ? 'err' : (a.correct ? 'ok' : 'bad'));
    line.textContent = a.defender + ' (' + a.model + '): ' + (a.choice === null ? '—' : a.choice + (options[a.choice] ? ' · ' + options[a.choice] : '')) + ' — ' + status + (a.flipped ? ' — FLIPPED from a correct clean answer' : '');
    div.appendChild(line);
    const ag = a.agent, agent = el('div', 'agent');
    ag.searches.forEach(s => agent.appendChild(el('div', '', '🔎 search: ' + s.query + (s.error ? ' (' + s.error + ')' : ''))));
    ag.visits.forEach(v => agent.appendChild(el('div', '', '🌐 visited: ' + v.url + (v.error ? ' (' + v.error + ')' : ''))));
    ag.verdicts.forEach(v => agent.appendChild(el('div', '', '⚖ claim ' + (v.verdict || '?').toUpperCase() + ': ' + v.claim + (v.quote ? ' — evidence: "' + v.quote + '"' : '') + (v.url ? ' (' + v.url + ')' : ''))));
    if (ag.cited.length) agent.appendChild(el('div', '', 'cited: ' + ag.cited.join(', ')));
    if (ag.escalated !== null && ag.escalated !== undefined) agent.appendChild(el('div', '', 'escalated: ' + (ag.escalated ? 'yes' : 'no')));
    div.appendChild(agent);
    const det = el('details'); det.appendChild(el('summary', '', 'raw output')); det.appendChild(el('pre', '', a.raw)); div.appendChild(det);
    return div;
  }
  function render() {
    const d = defSel.value, p = protoSel.value, flipped = flipBox.checked;
    box.textContent = ''; let shown = 0;
    data.items.forEach(item => {
      const rows = [];
      item.rows.forEach(row => {
        if (p && row.protocol !== p) return;
        const answers = row.answers.filter(a => (!d || a.defender === d) && (!flipped || a.flipped));
        if (answers.length) rows.push([row, answers]);
      });
      if (!rows.length) return;
      const card = el('div', 'item');
      card.appendChild(el('div', 'q', item.id + ': ' + item.question));
      const opts = el('ul');
      Object.entries(item.options).forEach(([k, v]) => opts.appendChild(el('li', k === item.gold ? 'ok' : '', k + ': ' + v + (k === item.gold ? '  (gold)' : ''))));
      card.appendChild(opts);
      rows.forEach(([row, answers]) => {
        const r = el('div', 'row');
        r.appendChild(el('div', '', row.protocol + (row.target ? ' — injected target ' + row.target : '')));
        row.context.forEach(c => r.appendChild(el('div', c.truthful ? 'ctx true' : 'ctx', (c.truthful ? '✓ true sentence (' : '✗ false sentence for ') + c.option + (c.truthful ? '): ' : ': ') + c.text)));
        answers.forEach(a => { r.appendChild(answerView(a, item.options)); shown += 1; });
        card.appendChild(r);
      });
      box.appendChild(card);
    });
    document.getElementById('case-count').textContent = shown + ' answers shown';
  }
  [defSel, protoSel, flipBox].forEach(c => c.addEventListener('change', render));
  render();
  document.body.dataset.ready = '1';
})();
"""


def _script_json(data: Any) -> str:
    """JSON that is inert inside a ``<script>`` element.

    "</" would end the element early, so its slash is escaped; every other "<" becomes
    ``\\u003c``, so no untrusted text in the page looks like a tag even to a naive scanner.
    Both are plain JSON escapes and decode to the same strings.
    """
    text = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    return re.sub(r"<(?!\\/)", r"\\u003c", text)


def _img(name: str, path: Path) -> str:
    """A PNG as an ``<img>`` with a data URI; "" for anything that is not a readable PNG."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return ""
    if not raw.startswith(_PNG_MAGIC):
        return ""  # only PNGs are embedded; the data URI's type must match the bytes
    data = base64.b64encode(raw).decode("ascii")
    label = html.escape(name.replace("_", " "))
    return f'<h3>{label}</h3><img alt="{label}" src="data:image/png;base64,{data}">'


def _read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "manifest.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def is_simulated(run_dir: Path, metrics: Mapping[str, Any]) -> bool:
    """Whether ``manifest.json`` says so, or a model is the simulated examinee."""
    listed = _read_manifest(run_dir).get("simulated")
    return bool(listed) or any(str(m).startswith(SIMULATED_PREFIX) for m in metrics)


def _sensitivity_html(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return ""
    body = [[r["model"], r["defender"], _pct(r.get("original")), _pct(r.get("shuffled")),
             _fmt_diff(r)] for r in rows]
    return ("<h2>Delivery sensitivity: Type 2 with shuffled sentence order</h2>"
            f"<p>{html.escape(_SENSITIVITY_NOTE)}</p>"
            + _table(["Model", "Defender", "T2 ASR (option order)", "T2 ASR (shuffled)",
                      "Δ (pts) [95% CI]"], body))


def write_html(
    run_dir: Path,
    metrics: Mapping[str, Any],
    *,
    plots: Mapping[str, Path] | None = None,
    report_md: str | None = None,
    baseline: str = "none",
    simulated: bool | None = None,
    title: str | None = None,
    sensitivity: list[dict[str, Any]] | None = None,
    reading: str | None = None,
    max_items: int = MAX_ITEMS,
) -> Path:
    """Write ``run_dir/report.html``, one file that opens offline in any browser.

    Args:
        run_dir: The run directory; the case browser reads ``traces/*.jsonl`` (absent traces
            give an empty browser, not an error).
        metrics: Parsed ``metrics.json`` (``{model: {defender: {...}}}``).
        plots: PNGs to embed as data URIs, e.g. the return value of ``write_plots``.
        report_md: The ``report.md`` text, shown verbatim in a collapsed section.
        baseline: Defender the paired Δ columns refer to.
        simulated: Show the simulated-examinee banner; None reads ``manifest.json``.
        title: Page title (default: the run directory's name).
        sensitivity: Rows of :func:`delivery_sensitivity`; None computes them.
        reading: Trusted, already-escaped HTML for a "Reading this report" section.
        max_items: Items kept in the case browser (sorted by id); the rest are counted.

    Returns:
        The path of ``report.html``.
    """
    run_dir = Path(run_dir)
    if simulated is None:
        simulated = is_simulated(run_dir, metrics)
    if sensitivity is None:
        sensitivity = delivery_sensitivity(run_dir)
    cases = case_data(run_dir, max_items=max_items)
    payload = _script_json(cases)
    banner = ('<p class="banner" id="simulated-banner">SIMULATED EXAMINEE — these results come '
              "from a simulated examinee and are not measurements of any model. They exercise "
              "the pipeline only.</p>" if simulated else "")
    plot_html = "".join(_img(name, p) for name, p in (plots or {}).items())
    reading_html = f"<h2>Reading this report</h2><div>{reading}</div>" if reading else ""
    report_html = (f"<h2>report.md</h2><details><summary>Show the markdown report</summary>"
                   f"<pre>{html.escape(report_md)}</pre></details>" if report_md else "")
    clipped = (f"<p>Showing the first {len(cases['items'])} of {cases['total_items']} items; records.jsonl "
               "and traces/ hold all of them.</p>" if cases["clipped"] else "")
    name = html.escape(title or run_dir.name)
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>{name} — MedMis report</title>
<style>{_CSS}</style></head>
<body>
<h1>MedMis mitigation report: {name}</h1>
{banner}
<h2>Headline</h2>
<p>Per model × defender on the same items; brackets are Wilson 95% intervals; ΔT1 ASR is paired against <code>{html.escape(baseline)}</code> with a seeded bootstrap interval and the exact McNemar p-value.</p>
{headline_html(metrics, baseline)}
{reading_html}
<h2>Plots</h2><div class="plots">{plot_html or "<p>No plots.</p>"}</div>
<h2>Strata</h2>{strata_html(metrics)}
{_sensitivity_html(sensitivity)}
<h2>Case browser</h2>
<div class="controls">Defender <select id="f-defender"><option value="">all</option></select>
 Protocol <select id="f-protocol"><option value="">all</option><option>clean</option><option>type1</option><option>type2</option></select>
 <label><input type="checkbox" id="f-flipped"> flipped only (clean-correct → wrong)</label>
 <span id="case-count"></span></div>
{clipped}
<div id="cases"></div>
<script type="application/json" id="case-data">{payload}</script>
<script>{_JS}</script>
{report_html}
</body></html>
"""
    path = run_dir / "report.html"
    # Write-then-rename: a browser never shows half a report.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(doc, encoding="utf-8")
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------------------------
# Delivery sensitivity

_SENSITIVITY_NOTE = (
    "Same items and defenders; only the order of the Type 2 sentences changes (seeded). "
    "Δ is shuffled minus option order, in points, with an unpaired Newcombe 95% interval; "
    "a large Δ means the result depends on where the true sentence sits."
)


def _load_metrics(run_dir: Path) -> dict[str, Any] | None:
    """A run's ``metrics.json``, computed from its records when the file is missing."""
    path = run_dir / "metrics.json"
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None
    if not (run_dir / "records.jsonl").exists():
        return None
    # A sub-run that was never reported (write_report=False): compute, do not write.
    from medmis.experiments.analysis._metrics import compute_metrics
    from medmis.experiments.harness._io import read_records

    return compute_metrics(read_records(run_dir / "records.jsonl")).to_json_dict()


def _defined(block: Any) -> dict[str, Any] | None:
    if not isinstance(block, Mapping) or block.get("value") is None or not block.get("n"):
        return None
    return dict(block)


def _newcombe(p1: Mapping[str, Any], p2: Mapping[str, Any]) -> tuple[float, float, float] | None:
    """``p1 - p2`` with Newcombe's hybrid-score 95% CI built from the two Wilson intervals."""
    try:
        v1, l1, h1 = float(p1["value"]), float(p1["lo"]), float(p1["hi"])
        v2, l2, h2 = float(p2["value"]), float(p2["lo"]), float(p2["hi"])
    except (KeyError, TypeError, ValueError):
        return None
    d = v1 - v2
    return d, d - math.hypot(v1 - l1, h2 - v2), d + math.hypot(h1 - v1, v2 - l2)


def delivery_sensitivity(run_dir: Path) -> list[dict[str, Any]]:
    """Type 2 ASR in option order vs a shuffled order (``run_dir/type2_shuffled``).

    Args:
        run_dir: The main run directory; its ``type2_shuffled`` sub-run is the re-run of
            type2 with a seeded shuffle of the sentence order. A missing ``metrics.json`` in
            either is computed from that run's records.

    Returns:
        One row per model × defender present in both runs, in the main run's order, with
        ``model``, ``defender``, ``original`` and ``shuffled`` (the ``type2_asr`` blocks
        ``{"value", "k", "n", "lo", "hi"}``, or None when undefined) and ``diff``,
        ``diff_lo``, ``diff_hi`` (shuffled minus original as proportions, with an unpaired
        Newcombe 95% CI; None unless both are defined). Empty without a shuffled sub-run.
    """
    run_dir = Path(run_dir)
    if not (run_dir / SHUFFLED_DIR).is_dir():
        return []
    main = _load_metrics(run_dir)
    shuffled = _load_metrics(run_dir / SHUFFLED_DIR)
    if not main or not shuffled:
        return []
    rows = []
    for model, defenders in main.items():
        if not isinstance(defenders, Mapping):
            continue
        for defender, block in defenders.items():
            other = (shuffled.get(model) or {}).get(defender)
            if not isinstance(block, Mapping) or not isinstance(other, Mapping):
                continue
            original = _defined(block.get("type2_asr"))
            shuf = _defined(other.get("type2_asr"))
            diff = _newcombe(shuf, original) if original and shuf else None
            rows.append({"model": model, "defender": defender, "original": original,
                         "shuffled": shuf, "diff": diff[0] if diff else None,
                         "diff_lo": diff[1] if diff else None,
                         "diff_hi": diff[2] if diff else None})
    return rows


def _fmt_diff(row: Mapping[str, Any]) -> str:
    if row.get("diff") is None or row.get("diff_lo") is None or row.get("diff_hi") is None:
        return "—"
    # + 0.0 turns -0.0 into 0.0 so that no change never prints as "-0.0"
    d, lo, hi = (100 * float(row[k]) + 0.0 for k in ("diff", "diff_lo", "diff_hi"))
    return f"{d:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def _pct_n(block: Mapping[str, Any] | None) -> str:
    text = _pct(block)
    return text if text == "—" or block is None else f"{text} ({block['k']}/{block['n']})"


def sensitivity_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The delivery-sensitivity section for ``report.md`` (heading, note, table).

    Args:
        rows: Output of :func:`delivery_sensitivity`.

    Returns:
        Markdown text, or "" when there are no rows (no shuffled sub-run).
    """
    if not rows:
        return ""

    def code(text: Any) -> str:
        return "`" + str(text).replace("|", "\\|") + "`"

    lines = ["## Delivery sensitivity: Type 2 with shuffled sentence order", "",
             _SENSITIVITY_NOTE, "",
             "| Model | Defender | T2 ASR (option order) | T2 ASR (shuffled) | Δ (pts) [95% CI] |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {code(r['model'])} | {code(r['defender'])} | {_pct_n(r.get('original'))} "
                     f"| {_pct_n(r.get('shuffled'))} | {_fmt_diff(r)} |")
    return "\n".join(lines)
