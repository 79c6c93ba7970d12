"""A single self-contained ``report.html``: tables, plots and a case browser.

Everything is inside the file (CSS, JS, PNGs as data URIs), so it opens offline; a
Content-Security-Policy allows nothing else, so even a URL that slipped into the markup could
not be fetched. Case data (:mod:`._cases`) is embedded as JSON (with ``</`` escaped) and rendered
with ``textContent`` only: model outputs and web pages are untrusted text and never become markup.

The Type 2 delivery-sensitivity comparison lives in :mod:`._sensitivity`.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from medmis.tools import json_file, redact_json

from ._cases import MAX_ITEMS, case_data
from ._cells import html_table, pct, pct_n
from ._format import fmt_usd
from ._sensitivity import delivery_sensitivity, sensitivity_html

# report.md's section is imported from here by _report
from ._sensitivity import sensitivity_markdown as sensitivity_markdown

SIMULATED_PREFIX = "mock/examinee"
"""Model specs of the offline demo's simulated examinee (as in ``_run``)."""

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Everything the page needs is inline; the policy makes sure nothing else can load.
_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'")

HEADLINE = [
    ("clean_acc", "Clean acc"), ("type1_acc", "T1 acc"), ("type2_acc", "T2 acc"),
    ("type1_asr", "T1 ASR"), ("type1_tasr", "T1 TASR"), ("type2_asr", "T2 ASR"),
    ("type2_recovery", "T2 recovery"),
]


def _paired(block: Mapping[str, Any] | None) -> tuple[str, str]:
    if not block:
        return "—", "—"
    diff, lo, hi, p = (block.get(k) for k in ("diff", "lo", "hi", "p_value"))
    if diff is None:
        return "—", "—"
    delta = f"{100 * diff:+.1f}" + (f" [{100 * lo:+.1f}, {100 * hi:+.1f}]" if lo is not None and hi is not None else "")
    return delta, ("—" if p is None else ("<0.001" if p < 0.001 else f"{p:.3f}"))


def _rate_n(block: Mapping[str, Any] | None) -> str:
    text = pct(block).split(" ")[0]
    return text if text == "—" or not block else f"{text}\n{block.get('k')}/{block.get('n')}"


def headline_html(metrics: Mapping[str, Any], baseline: str = "none") -> str:
    header = ["Model", "Defender", *(label for _, label in HEADLINE),
              f"ΔT1 ASR vs {baseline} (pts)", "p", "Unparsed", "Errors",
              "Model calls/case", "Tool calls/case", "Tokens/case", "USD/case", "USD/1k cases"]
    rows = []
    for model, defenders in metrics.items():
        for defender, block in defenders.items():
            delta, p = _paired((block.get("paired") or {}).get("type1_asr"))
            cost = block.get("cost") or {}

            def num(key: str, digits: int, cost: Mapping[str, Any] = cost) -> str:
                value = cost.get(key)
                return "—" if value is None else f"{value:,.{digits}f}"

            def money(key: str, cost: Mapping[str, Any] = cost) -> str:
                value = cost.get(key)
                return fmt_usd(value)

            rows.append([model, defender, *(pct_n(block.get(m)) for m, _ in HEADLINE), delta, p,
                         *(_rate_n(block.get(m)) for m in ("unparsed_rate", "error_rate")),
                         num("llm_calls_per_case", 2), num("tool_calls_per_case", 2),
                         num("tokens_per_case", 0), money("usd_per_case"),
                         money("usd_per_1k_cases")])
    return html_table(header, rows, "headline")


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
                         + html_table(["Content \\ provenance", *provs], rows) + "</details>")
            subsets = strata.get("subset") or {}
            if subsets:
                srows = [[name, pct(b.get("clean_acc")), pct(b.get("type1_asr")), pct(b.get("type2_asr"))]
                         for name, b in subsets.items()]
                parts.append(f"<details><summary>{html.escape(model)} · {html.escape(defender)} by subset</summary>"
                             + html_table(["Subset", "Clean acc", "T1 ASR", "T2 ASR"], srows) + "</details>")
    return "\n".join(parts)



_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1400px;padding:1rem 2rem;color:#1d1d1f}
h1{font-size:1.6rem}h2{margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0;font-size:12.5px}th,td{border:1px solid #d8d8d8;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f6}table.headline{font-size:12px}table.headline td{white-space:pre-line}
table.headline th,table.headline td{padding:3px 4px}.banner{background:#fff3cd;border:1px solid #e0b000;padding:.6rem 1rem;font-weight:600}
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


def script_json(data: Any) -> str:
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
        data = json_file(path) if path.exists() else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_simulated(run_dir: Path, metrics: Mapping[str, Any]) -> bool:
    """Whether ``manifest.json`` says so, or a model is the simulated examinee."""
    listed = _read_manifest(run_dir).get("simulated")
    return bool(listed) or any(str(m).startswith(SIMULATED_PREFIX) for m in metrics)



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
    incomplete: str | None = None,
    max_items: int = MAX_ITEMS,
    cases: Mapping[str, Any] | None = None,
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
        incomplete: Why the run is incomplete (plain text, escaped here); shown first.
        max_items: Items kept in the case browser (sorted by id); the rest are counted.
        cases: The case browser's data when already gathered (:class:`PendingCases`);
            None reads it here with ``max_items``.

    Returns:
        The path of ``report.html``.
    """
    run_dir = Path(run_dir)
    if simulated is None:
        simulated = is_simulated(run_dir, metrics)
    if sensitivity is None:
        sensitivity = delivery_sensitivity(run_dir)
    # runs written before traces were redacted may still hold an echoed key: mask it here too
    cases = redact_json(case_data(run_dir, max_items=max_items) if cases is None else cases)
    payload = script_json(cases)
    banner = ('<p class="banner" id="simulated-banner">SIMULATED EXAMINEE — these results come '
              "from a simulated examinee and are not measurements of any model. They exercise "
              "the pipeline only.</p>" if simulated else "")
    if incomplete:
        banner = f'<p class="banner" id="incomplete-banner">{html.escape(incomplete)}</p>' + banner
    plot_html = "".join(_img(name, p) for name, p in (plots or {}).items())
    reading_html = f"<h2>Reading this report</h2><div>{reading}</div>" if reading else ""
    report_html = (f"<h2>report.md</h2><details><summary>Show the markdown report</summary>"
                   f"<pre>{html.escape(report_md)}</pre></details>" if report_md else "")
    clipped = (f"<p>Showing a sample of {len(cases['items'])} of {cases['total_items']} items (flips first, "
               "spread over subsets); <code>medmis view "
               f"{html.escape(run_dir.name)}</code> browses all of them.</p>" if cases["clipped"] else "")
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
<p>Per model × defender on the same items; brackets are 95% intervals (Wilson, widened by the design effect when one question carries several Type 1 targets); ΔT1 ASR is paired against <code>{html.escape(baseline)}</code> with an interval and test that count questions (the test each comparison used is in metrics.json).</p>
{headline_html(metrics, baseline)}
{reading_html}
<h2>Plots</h2><div class="plots">{plot_html or "<p>No plots.</p>"}</div>
<h2>Strata</h2>{strata_html(metrics)}
{sensitivity_html(sensitivity)}
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
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # unique per process
    tmp.write_text(doc, encoding="utf-8")
    os.replace(tmp, path)
    return path
