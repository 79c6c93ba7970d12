"""The case browser's page and script (served by :mod:`._server`; no data inside).

The script builds every element with ``createElement`` and ``textContent``: no data from a
run ever reaches ``innerHTML``, so a question or a model answer holding markup shows as text.
The filters live in the page URL's query string, so a filtered view can be bookmarked.
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>medmis view</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1b1b}
header{padding:8px 12px;background:#f3f4f6;border-bottom:1px solid #ddd;display:flex;flex-wrap:wrap;gap:6px;align-items:center}
header label{display:inline-flex;gap:3px;align-items:center}
main{display:flex;gap:12px;padding:8px 12px}
#list{flex:1 1 55%;overflow-x:auto}
#detail{flex:1 1 45%;border-left:1px solid #ddd;padding-left:12px;min-width:0;overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #eee;padding:3px 6px;text-align:left;white-space:nowrap}
tr.row{cursor:pointer} tr.row:hover{background:#f5f8ff}
.flag{display:inline-block;border:1px solid #999;border-radius:3px;padding:0 3px;margin-right:2px;font-size:11px}
.ok{color:#17663a} .bad{color:#a11} pre{white-space:pre-wrap;background:#fafafa;padding:6px;max-height:20em;overflow:auto}
#error{color:#a11}
#simulated{background:#fdecea;color:#922;font-weight:bold;padding:6px 12px;border-bottom:1px solid #e6b0aa}
#simulated:empty{display:none}
</style></head>
<body data-ready="0">
<div id="simulated" role="note"></div>
<header id="controls"></header>
<div id="error" role="alert"></div>
<main><section id="list"><p id="summary"></p><table><thead><tr>
<th>item</th><th>subset</th><th>model</th><th>defender</th><th>protocol</th><th>target</th>
<th>gold</th><th>answer</th><th>outcome</th></tr></thead><tbody id="rows"></tbody></table>
<p><button id="prev" type="button">previous</button> <button id="next" type="button">next</button></p>
</section><section id="detail"></section></main>
<script src="app.js"></script>
</body></html>
"""

SCRIPT = r"""
'use strict';
const FILTERS = ['model', 'defender', 'protocol', 'subset', 'content_type', 'provenance'];
const OUTCOMES = ['flipped', 'recovered', 'differs', 'unparsed', 'errored'];
const LIMIT = 50;
const params = new URLSearchParams(location.search);
const state = {offset: Number(params.get('offset') || 0), rows: []};

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
async function getJSON(path, query) {
  const r = await fetch(path + '?' + query.toString());
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}
function query() {
  const q = new URLSearchParams();
  for (const f of FILTERS) { const v = document.getElementById('f-' + f).value; if (v) q.set(f, v); }
  const outs = OUTCOMES.filter(o => document.getElementById('o-' + o).checked);
  if (outs.length) q.set('outcome', outs.join(','));
  for (const f of ['q', 'item']) { const v = document.getElementById('f-' + f).value.trim(); if (v) q.set(f, v); }
  return q;
}
function buildControls(facets) {
  document.getElementById('simulated').textContent = facets.simulated || '';
  const bar = document.getElementById('controls');
  for (const f of FILTERS) {
    const lab = el('label', f.replace('_', ' ') + ' ');
    const sel = el('select'); sel.id = 'f-' + f;
    sel.appendChild(el('option', 'all')).value = '';
    for (const v of facets[f]) { const o = el('option', v); o.value = v; sel.appendChild(o); }
    sel.value = params.get(f) || '';
    sel.addEventListener('change', () => reload(0));
    lab.appendChild(sel); bar.appendChild(lab);
  }
  const chosen = (params.get('outcome') || '').split(',');
  for (const o of OUTCOMES) {
    const lab = el('label'); const box = el('input'); box.type = 'checkbox'; box.id = 'o-' + o;
    box.checked = chosen.includes(o); box.addEventListener('change', () => reload(0));
    lab.appendChild(box); lab.appendChild(document.createTextNode(o === 'differs' ? 'differs from ' + facets.baseline : o));
    bar.appendChild(lab);
  }
  for (const [f, hint] of [['q', 'search text'], ['item', 'jump to item id']]) {
    const box = el('input'); box.id = 'f-' + f; box.placeholder = hint; box.value = params.get(f) || '';
    box.addEventListener('keydown', e => { if (e.key === 'Enter') reload(0); });
    bar.appendChild(box);
  }
}
function outcomeCell(r) {
  const td = el('td');
  if (r.errored) td.appendChild(el('span', 'error', 'flag bad'));
  else if (r.unparsed) td.appendChild(el('span', 'unparsed', 'flag bad'));
  else td.appendChild(el('span', r.ok ? 'correct' : 'wrong', r.ok ? 'ok' : 'bad'));
  for (const f of ['flipped', 'recovered', 'differs']) if (r[f]) td.appendChild(el('span', f, 'flag'));
  return td;
}
function renderRows(page) {
  const body = document.getElementById('rows');
  body.replaceChildren();
  state.rows = page.rows;
  page.rows.forEach((r, i) => {
    const tr = el('tr', null, 'row'); tr.dataset.index = String(i);
    for (const v of [r.item_id, r.subset, r.model, r.defender, r.protocol, r.target || '', r.gold, r.choice === null ? '—' : r.choice])
      tr.appendChild(el('td', v));
    tr.appendChild(outcomeCell(r));
    tr.addEventListener('click', () => openCase(r));
    body.appendChild(tr);
  });
  const end = page.offset + page.rows.length;
  document.getElementById('summary').textContent =
    page.total + ' cases' + (page.total ? ', showing ' + (page.offset + 1) + '–' + end : '');
  document.getElementById('prev').disabled = page.offset === 0;
  document.getElementById('next').disabled = end >= page.total;
}
function section(parent, title) { parent.appendChild(el('h3', title)); }
function list(parent, items, fmt) {
  const ul = el('ul'); for (const x of items) ul.appendChild(el('li', fmt(x))); parent.appendChild(ul);
}
async function openCase(r) {
  const q = new URLSearchParams({model: r.model, defender: r.defender, protocol: r.protocol, item_key: r.item_key});
  if (r.target !== null) q.set('target', r.target);
  if (r.epoch) q.set('epoch', r.epoch);
  const c = await getJSON('api/case', q);
  const d = document.getElementById('detail'); d.replaceChildren();
  d.appendChild(el('h2', c.item_key + ' · ' + c.protocol + (c.target ? ' → ' + c.target : '')));
  d.appendChild(el('p', c.question || '(question not in the traces)', 'question'));
  const opts = el('ol'); opts.className = 'options';
  for (const [k, v] of Object.entries(c.options || {})) {
    opts.appendChild(el('li', k + ': ' + v + (k === c.gold ? '  (gold)' : '') + (k === c.target ? '  (injected target)' : '')));
  }
  d.appendChild(opts);
  if ((c.context || []).length) {
    section(d, 'Injected sentences');
    list(d, c.context, s => (s.option ? '[for ' + s.option + '] ' : '') + s.text);
  }
  section(d, 'Answers');
  for (const a of c.answers) {
    const box = el('div', null, 'answer'); box.dataset.defender = a.defender;
    box.appendChild(el('h4', a.defender + ': ' + (a.error ? 'error: ' + a.error : (a.choice === null ? 'unparsed' : a.choice)) + (a.flipped ? ' (flipped)' : '')));
    if (a.raw) box.appendChild(el('pre', a.raw));
    const ag = a.agent || {};
    if ((ag.searches || []).length) { box.appendChild(el('h5', 'Searches')); list(box, ag.searches, s => s.query + (s.error ? ' (error: ' + s.error + ')' : '')); }
    if ((ag.visits || []).length) { box.appendChild(el('h5', 'Visited')); list(box, ag.visits, v => v.url); }
    if ((ag.cited || []).length) { box.appendChild(el('h5', 'Cited (the answer rests on)')); list(box, ag.cited, c => c.url + (c.by ? ' (' + c.by + ')' : '')); }
    if ((ag.verdicts || []).length) { box.appendChild(el('h5', 'Claim verdicts')); list(box, ag.verdicts, v => v.verdict + ': ' + v.claim + (v.quote ? ' | quote: ' + v.quote : '') + (v.url ? ' | ' + v.url : '')); }
    d.appendChild(box);
  }
}
async function reload(offset) {
  state.offset = offset;
  const q = query();
  history.replaceState(null, '', '?' + q.toString() + (offset ? '&offset=' + offset : ''));
  q.set('offset', String(offset)); q.set('limit', String(LIMIT));
  document.body.dataset.ready = '0';
  try {
    const page = await getJSON('api/cases', q);
    renderRows(page);
    document.getElementById('error').textContent = '';
    if (q.get('item') && page.rows.length) await openCase(page.rows[0]);
  } catch (e) { document.getElementById('error').textContent = String(e.message || e); }
  document.body.dataset.ready = '1';
}
async function main() {
  try { buildControls(await getJSON('api/facets', new URLSearchParams())); }
  catch (e) { document.getElementById('error').textContent = String(e.message || e); document.body.dataset.ready = '1'; return; }
  document.getElementById('prev').addEventListener('click', () => reload(Math.max(0, state.offset - LIMIT)));
  document.getElementById('next').addEventListener('click', () => reload(state.offset + LIMIT));
  await reload(state.offset);
}
main();
"""
