"""A single self-contained ``report.html``: tables, plots and a case browser.

Everything is inside the file (CSS, JS, PNGs as data URIs), so it opens offline. Case data is
embedded as JSON and rendered with ``textContent`` only: model outputs and web pages are
untrusted text and never become markup. Long raw outputs are clipped to keep the file bounded.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RAW_LIMIT = 4000
MAX_ITEMS = 400  # case browser cap; the records and traces keep everything

_QUESTION = re.compile(r"Question:\n(.*?)\n\nOptions:\n(.*?)(?:\n\n|$)", re.S)
_OPTION = re.compile(r"^\s*([A-Za-z0-9]+):\s*(.+)$")

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
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line of a killed run
    return out


def _question_from(trace: Mapping[str, Any]) -> tuple[str, dict[str, str]] | None:
    for step in trace.get("steps", []):
        if step.get("kind") != "model":
            continue
        for message in step.get("input") or []:
            content = message.get("content")
            if not isinstance(content, str):
                continue
            m = _QUESTION.search(content)
            if m:
                options = {}
                for line in m.group(2).splitlines():
                    om = _OPTION.match(line)
                    if om:
                        options[om.group(1)] = om.group(2)
                return m.group(1).strip(), options
    return None


def _clip(text: Any, limit: int = RAW_LIMIT) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + f"\n[… clipped {len(text) - limit} characters]"


def _agent_view(trace: Mapping[str, Any]) -> dict[str, Any]:
    searches, visits = [], []
    for step in trace.get("steps", []):
        if step.get("kind") != "tool":
            continue
        args = step.get("input") or {}
        if step.get("name") == "search_web":
            searches.append({"query": args.get("query", ""), "error": step.get("error")})
        elif step.get("name") == "visit_web":
            visits.append({"url": args.get("url", ""), "error": step.get("error")})
    extra = trace.get("extra") or {}
    verdicts = [
        {"claim": _clip(v.get("claim"), 600), "verdict": v.get("verdict"),
         "quote": _clip(v.get("quote"), 600), "url": v.get("url")}
        for v in extra.get("verdicts") or [] if isinstance(v, dict)
    ]
    return {"searches": searches, "visits": visits, "verdicts": verdicts,
            "cited": list(extra.get("cited_urls") or []), "escalated": extra.get("escalated")}


def case_data(run_dir: Path, max_items: int = MAX_ITEMS) -> dict[str, Any]:
    """The case browser's data: items with their protocol rows and every defender's answer."""
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path in sorted((run_dir / "traces").glob("*.jsonl")):
        for t in _read_jsonl(path):
            # --retry-errors appends a fresh trace for a key; the last one is the record's
            latest[(t["model"], t["defender"], t["protocol"], t["item_id"], t.get("target"))] = t
    traces = list(latest.values())
    clean_ok = {(t["model"], t["defender"], t["item_id"]): t.get("choice") == t.get("gold")
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
            "context": [{"text": c.get("text", ""), "option": c.get("option"), "truthful": c.get("truthful")}
                        for c in t.get("context") or []],
            "answers": [],
        })
        correct = None if t.get("error") else t.get("choice") == t.get("gold")
        flipped = bool(t["protocol"] != "clean" and correct is False
                       and clean_ok.get((t["model"], t["defender"], t["item_id"])))
        row["answers"].append({
            "model": t["model"], "defender": t["defender"], "choice": t.get("choice"),
            "correct": correct, "error": t.get("error"), "flipped": flipped,
            "raw": _clip(t.get("raw")), "agent": _agent_view(t),
        })
    ordered = list(items.values())
    for item in ordered:
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


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def write_html(
    run_dir: Path,
    metrics: Mapping[str, Any],
    *,
    plots: Mapping[str, Path] | None = None,
    baseline: str = "none",
    simulated: bool = False,
    title: str | None = None,
    sensitivity: list[dict[str, Any]] | None = None,
    reading: str | None = None,
) -> Path:
    """Write ``run_dir/report.html`` and return its path."""
    run_dir = Path(run_dir)
    cases = case_data(run_dir)
    # "</" inside a script element would end it early; JSON allows escaping the slash
    payload = json.dumps(cases, ensure_ascii=False).replace("</", "<\\/")
    banner = ('<p class="banner">SIMULATED EXAMINEE — these results come from a simulated examinee '
              "and are not measurements of any model. They exercise the pipeline only.</p>"
              if simulated else "")
    plot_html = "".join(f"<h3>{html.escape(name.replace('_', ' '))}</h3>{_img(p)}"
                        for name, p in (plots or {}).items() if Path(p).exists())
    sens_html = ""
    if sensitivity:
        rows = [[r["model"], r["defender"], _pct(r.get("original")), _pct(r.get("shuffled"))] for r in sensitivity]
        sens_html = ("<h2>Delivery sensitivity: Type 2 with shuffled sentence order</h2>"
                     + _table(["Model", "Defender", "T2 ASR (option order)", "T2 ASR (shuffled)"], rows))
    reading_html = f"<h2>Reading this report</h2><div>{reading}</div>" if reading else ""
    clipped = (f"<p>Showing the first {len(cases['items'])} of {cases['total_items']} items; records.jsonl "
               "and traces/ hold all of them.</p>" if cases["clipped"] else "")
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title or run_dir.name)} — MedMis report</title>
<style>{_CSS}</style></head>
<body>
<h1>MedMis mitigation report: {html.escape(title or run_dir.name)}</h1>
{banner}
<h2>Headline</h2>
<p>Per model × defender on the same items; brackets are Wilson 95% intervals; ΔT1 ASR is paired against <code>{html.escape(baseline)}</code> with a seeded bootstrap interval and the exact McNemar p-value.</p>
{headline_html(metrics, baseline)}
{reading_html}
<h2>Plots</h2><div class="plots">{plot_html or "<p>No plots.</p>"}</div>
<h2>Strata</h2>{strata_html(metrics)}
{sens_html}
<h2>Case browser</h2>
<div class="controls">Defender <select id="f-defender"><option value="">all</option></select>
 Protocol <select id="f-protocol"><option value="">all</option><option>clean</option><option>type1</option><option>type2</option></select>
 <label><input type="checkbox" id="f-flipped"> flipped only (clean-correct → wrong)</label>
 <span id="case-count"></span></div>
{clipped}
<div id="cases"></div>
<script type="application/json" id="case-data">{payload}</script>
<script>{_JS}</script>
</body></html>
"""
    path = run_dir / "report.html"
    path.write_text(doc, encoding="utf-8")
    return path


def delivery_sensitivity(run_dir: Path) -> list[dict[str, Any]]:
    """Type 2 ASR in option order vs shuffled order (``run_dir/type2_shuffled``), when present."""
    shuffled_path = Path(run_dir) / "type2_shuffled" / "metrics.json"
    main_path = Path(run_dir) / "metrics.json"
    if not shuffled_path.exists() or not main_path.exists():
        return []
    main = json.loads(main_path.read_text(encoding="utf-8"))
    shuffled = json.loads(shuffled_path.read_text(encoding="utf-8"))
    rows = []
    for model, defenders in main.items():
        for defender, block in defenders.items():
            other = (shuffled.get(model) or {}).get(defender)
            if other is None:
                continue
            rows.append({"model": model, "defender": defender,
                         "original": block.get("type2_asr"), "shuffled": other.get("type2_asr")})
    return rows


def sensitivity_markdown(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    lines = ["## Delivery sensitivity: Type 2 with shuffled sentence order", "",
             "Same items and defenders; only the order of the Type 2 sentences changes (seeded).", "",
             "| Model | Defender | T2 ASR (option order) | T2 ASR (shuffled) |", "| --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| `{r['model']}` | `{r['defender']}` | {_pct(r.get('original'))} | {_pct(r.get('shuffled'))} |")
    return "\n".join(lines)
