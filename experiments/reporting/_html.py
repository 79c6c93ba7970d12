"""A single self-contained ``report.html``: report.md's sections, its plots and a case browser.

The page renders the same list of sections as ``report.md`` (:func:`~._sections.report_sections`
through :mod:`._markdown`), so the two cannot disagree on a table or a sentence. Everything is inside the file (CSS, JS, PNGs as data URIs), so it opens offline; a
Content-Security-Policy allows nothing else, so even a URL that slipped into the markup could
not be fetched. Case data (:mod:`._cases`) is embedded as JSON (with ``</`` escaped) and rendered
with ``textContent`` only: model outputs and web pages are untrusted text and never become markup.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from medmis.tools import redact_json

from ._cases import MAX_ITEMS, case_data
from ._markdown import inline_html, markdown_html
from ._sections import Section

_BANNERS = ("incomplete", "simulated")
"""Sections shown as a banner: why the numbers are incomplete, or simulated."""
# Everything the page needs is inline; the policy makes sure nothing else can load.
_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'")

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1400px;padding:1rem 2rem;color:#1d1d1f}
h1{font-size:1.6rem}h2{margin-top:2rem;border-bottom:1px solid #ddd}section{overflow-x:auto}
table{border-collapse:collapse;margin:.5rem 0;font-size:12.5px}th,td{border:1px solid #d8d8d8;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f6}#headline table,#paired table,#cost table{font-size:12px}
#headline th,#headline td,#paired th,#paired td,#cost th,#cost td{padding:3px 4px}code{font-size:.95em}
.banner{background:#fff3cd;border:1px solid #e0b000;padding:.6rem 1rem;font-weight:600}
figure{margin:.5rem 0}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:12px;color:#555}
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
    (ag.cited || []).forEach(c => agent.appendChild(el('div', '', '📎 cited (the answer rests on): ' + c.url + (c.by ? ' (' + c.by + ')' : ''))));
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


def write_html(
    run_dir: Path,
    sections: Sequence[Section] | str,
    *,
    title: str | None = None,
    simulated: bool = False,
    max_items: int = MAX_ITEMS,
    cases: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``run_dir/report.html``, one file that opens offline in any browser.

    The page is ``report.md``'s sections rendered as HTML (:mod:`._markdown`: the same tables and
    sentences, every text escaped, the plots embedded as data URIs), then the case browser.

    Args:
        run_dir: The run directory; the case browser reads ``traces/*.jsonl`` (absent traces
            give an empty browser, not an error).
        sections: The report's sections (:func:`~._sections.report_sections`), or a markdown
            text rendered as one section.
        title: Page title (default: the run directory's name).
        simulated: Show the simulated-examinee banner when ``sections`` has none of its own.
        max_items: Items kept in the case browser (sorted by id); the rest are counted.
        cases: The case browser's data when already gathered (:func:`~._cases.case_data`);
            None reads it here with ``max_items``.

    Returns:
        The path of ``report.html``.
    """
    run_dir = Path(run_dir)
    if isinstance(sections, str):
        sections = [Section("report", sections)]
    # runs written before traces were redacted may still hold an echoed key: mask it here too
    cases = redact_json(case_data(run_dir, max_items=max_items) if cases is None else cases)
    payload = script_json(cases)
    body = []
    for section in sections:
        if section.id in _BANNERS:  # the run-level warnings stand out, first on the page
            text = " ".join(x.lstrip("> ").strip() for x in section.markdown.splitlines() if x.strip())
            body.append(f'<p class="banner" id="{section.id}-banner">{inline_html(text)}</p>')
        else:
            body.append(f'<section id="{html.escape(section.id)}">{markdown_html(section.markdown, run_dir)}</section>')
    if simulated and not any(s.id == "simulated" for s in sections):
        body.insert(0, '<p class="banner" id="simulated-banner">SIMULATED EXAMINEE — these results come '
                    "from a simulated examinee and are not measurements of any model. They exercise "
                    "the pipeline only.</p>")
    clipped = (f"<p>Showing a sample of {len(cases['items'])} of {cases['total_items']} items (flips first, "
               "spread over subsets); <code>medmis view "
               f"{html.escape(run_dir.name)}</code> browses all of them.</p>" if cases["clipped"] else "")
    name = html.escape(title or run_dir.name)
    content = "\n".join(body)
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>{name} — MedMis report</title>
<style>{_CSS}</style></head>
<body>
{content}
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
    # Write-then-rename: a browser never shows half a report.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # unique per process
    tmp.write_text(doc, encoding="utf-8")
    os.replace(tmp, path)
    return path
