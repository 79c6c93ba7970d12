"""The review form's stylesheet and script (kept apart from the page writer in :mod:`._form`).

The script renders every task from the embedded JSON with ``textContent`` only (model output is
untrusted text), keeps the reviewer's answers in ``localStorage`` after every change, exports
them as ``ratings.csv`` rows (``task_id,reviewer,rubric,criterion,score,flags,comment``) and
re-imports such a file to restore or move a session between browsers.
"""

from __future__ import annotations

CSS = """
body{font:15px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{position:sticky;top:0;z-index:2;background:#fff;border-bottom:1px solid #ddd;padding:.5rem 1.5rem;display:flex;flex-wrap:wrap;gap:.6rem;align-items:center}
header h1{font-size:1.1rem;margin:0 1rem 0 0}main{max-width:1100px;margin:0 auto;padding:1rem 1.5rem 4rem}
button,select,label.file{font:inherit;padding:.25rem .7rem;border:1px solid #999;border-radius:4px;background:#f4f4f6;cursor:pointer}
.status{color:#555;font-size:13px}.warn{background:#fff3cd;border:1px solid #e0b000;padding:.5rem 1rem}
.task{background:#fff;border:1px solid #ccc;border-radius:6px;padding:1rem 1.2rem}
.q{font-weight:600;white-space:pre-wrap}.opts li{margin:.15rem 0}.tag{font-size:12px;border-radius:3px;padding:0 .35rem;margin-left:.4rem}
.gold{background:#d9f2df}.target{background:#ffe0e0}.chosen{background:#e3e8ff}
.inject{border-left:4px solid #c0392b;background:#fff6f5;padding:.5rem .8rem;margin:.6rem 0}
.def{color:#444;font-size:13px;margin:.2rem 0}pre{white-space:pre-wrap;background:#f7f7f9;padding:.5rem;max-height:22rem;overflow:auto;font-size:13px}
fieldset{border:1px solid #bbb;border-radius:6px;margin:1rem 0;padding:.6rem 1rem}legend{font-weight:700}
.crit{margin:.7rem 0;padding:.4rem .5rem;border-radius:4px}.crit.missing{background:#fff8e6}.crit .cq{font-weight:600}
.crit label{display:block;margin:.15rem 0 .15rem 1rem;cursor:pointer}.crit label b{display:inline-block;width:1.2rem}
textarea{width:100%;min-height:3.5rem;font:inherit}.flags label{display:block;margin:.1rem 0 .1rem 1rem}
.nav{display:flex;gap:.5rem;align-items:center;margin:.6rem 0}.done{color:#0a5b20}.todo{color:#a40000}
details.help{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.4rem .8rem;margin-bottom:1rem}
table{border-collapse:collapse;font-size:13px;margin:.4rem 0}th,td{border:1px solid #d8d8d8;padding:3px 6px;vertical-align:top;text-align:left}th{background:#f4f4f6}
.step{border-top:1px dashed #ccc;margin-top:.3rem;padding-top:.3rem}.step span{font-size:12px;color:#666}
"""

JS = r"""
(function(){
  const data = JSON.parse(document.getElementById('review-data').textContent);
  const rub = data.rubrics.rubrics, FLAGS = data.rubrics.flags.map(f => f.name);
  const KEY = 'medmis-review/' + data.pack_id + '/' + data.reviewer;
  const HEADER = ['task_id','reviewer','rubric','criterion','score','flags','comment'];
  const byId = {}; data.tasks.forEach(t => { byId[t.task_id] = t; });
  const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; };
  const $ = id => document.getElementById(id);
  let state = {tasks: {}}, storageOk = true, current = 0;
  const blank = () => ({A: {}, B: {}, flags: [], comment_A: '', comment_B: ''});
  const entry = id => (state.tasks[id] = state.tasks[id] || blank());
  try { const saved = localStorage.getItem(KEY); if (saved) state = JSON.parse(saved); if (!state.tasks) state = {tasks: {}}; }
  catch (e) { storageOk = false; }
  function save() {
    state.saved_at = new Date().toISOString();
    try { localStorage.setItem(KEY, JSON.stringify(state)); $('save-status').textContent = 'saved in this browser ' + state.saved_at.slice(11, 19); }
    catch (e) { storageOk = false; $('save-status').textContent = 'NOT saved: this browser blocks storage; export often'; }
  }
  function complete(id) {
    const s = state.tasks[id]; if (!s) return false;
    return ['A', 'B'].every(r => rub[r].every(c => s[r][c.name] !== undefined));
  }
  function progress() {
    const n = data.tasks.filter(t => complete(t.task_id)).length;
    $('progress').textContent = n + ' of ' + data.tasks.length + ' tasks complete';
    const sel = $('task-select');
    data.tasks.forEach((t, i) => { sel.options[i].textContent = (complete(t.task_id) ? '✓ ' : '· ') + t.task_id; });
    document.querySelectorAll('.crit').forEach(div => {
      const s = state.tasks[div.dataset.task];
      div.classList.toggle('missing', !s || s[div.dataset.rubric][div.dataset.criterion] === undefined);
    });
  }
  function optionList(t) {
    const ul = el('ul', 'opts');
    Object.entries(t.options).forEach(([k, v]) => {
      const li = el('li', '', k + ': ' + v);
      if (k === t.gold) li.appendChild(el('span', 'tag gold', 'keyed answer'));
      if (k === t.target) li.appendChild(el('span', 'tag target', 'targeted by the injection'));
      if (k === t.choice) li.appendChild(el('span', 'tag chosen', "model's answer"));
      ul.appendChild(li);
    });
    return ul;
  }
  function criterion(t, r, c) {
    const div = el('div', 'crit'); div.dataset.task = t.task_id; div.dataset.rubric = r; div.dataset.criterion = c.name;
    div.appendChild(el('div', 'cq', c.name + ' — ' + c.question));
    c.anchors.forEach((text, score) => {
      const label = el('label'), input = el('input');
      input.type = 'radio'; input.name = t.task_id + '|' + r + '|' + c.name; input.value = String(score);
      input.dataset.task = t.task_id; input.dataset.rubric = r; input.dataset.criterion = c.name;
      input.addEventListener('change', () => { entry(t.task_id)[r][c.name] = score; save(); progress(); });
      label.appendChild(input); label.appendChild(el('b', '', ' ' + score)); label.appendChild(document.createTextNode(' ' + text));
      div.appendChild(label);
    });
    return div;
  }
  function comment(t, r) {
    const ta = el('textarea'); ta.dataset.task = t.task_id; ta.dataset.comment = r; ta.placeholder = 'Comment (optional)';
    ta.addEventListener('input', () => { entry(t.task_id)['comment_' + r] = ta.value; save(); });
    return ta;
  }
  function taskView(t, i) {
    const box = el('section', 'task'); box.id = 'task-' + t.task_id; box.hidden = true;
    box.appendChild(el('h2', '', t.task_id + ' (' + (i + 1) + ' of ' + data.tasks.length + ') · ' + t.subset));
    box.appendChild(el('div', 'q', t.question));
    box.appendChild(optionList(t));
    const inj = el('div', 'inject');
    inj.appendChild(el('div', '', 'Injected sentence (arguing for option ' + t.target + '):'));
    inj.appendChild(el('div', 'q', t.injected));
    inj.appendChild(el('div', 'def', 'Content corruption: ' + (t.content || 'unlabelled') + ' — ' + t.content_definition));
    inj.appendChild(el('div', 'def', 'Provenance: ' + (t.provenance || 'unlabelled') + ' — ' + t.provenance_definition));
    box.appendChild(inj);
    box.appendChild(el('div', '', "Model's answer: " + (t.choice === null ? 'none parsed' : t.choice + ' · ' + (t.options[t.choice] || ''))));
    box.appendChild(el('h3', '', 'Full response')); box.appendChild(el('pre', 'response', t.response));
    const det = el('details'); det.appendChild(el('summary', '', 'Reasoning trace (' + t.reasoning.length + ' steps)'));
    t.reasoning.forEach(s => { const d = el('div', 'step'); d.appendChild(el('span', '', s.kind + ' · ' + s.name)); d.appendChild(el('pre', '', s.text)); det.appendChild(d); });
    box.appendChild(det);
    const fa = el('fieldset'); fa.appendChild(el('legend', '', 'Rubric A — the injected item'));
    rub.A.forEach(c => fa.appendChild(criterion(t, 'A', c)));
    const flags = el('div', 'flags'); flags.appendChild(el('div', 'cq', 'Disposition flags (tick any that apply)'));
    data.rubrics.flags.forEach(f => {
      const label = el('label'), box2 = el('input'); box2.type = 'checkbox'; box2.dataset.task = t.task_id; box2.dataset.flag = f.name;
      box2.addEventListener('change', () => {
        const s = entry(t.task_id); s.flags = s.flags.filter(x => x !== f.name); if (box2.checked) s.flags.push(f.name); save();
      });
      label.appendChild(box2); label.appendChild(document.createTextNode(' ' + f.label + ' — ' + f.description)); flags.appendChild(label);
    });
    fa.appendChild(flags); fa.appendChild(comment(t, 'A')); box.appendChild(fa);
    const fb = el('fieldset'); fb.appendChild(el('legend', '', "Rubric B — the model's response under misleading context"));
    rub.B.forEach(c => fb.appendChild(criterion(t, 'B', c)));
    fb.appendChild(comment(t, 'B')); box.appendChild(fb);
    return box;
  }
  function fill() {  // state -> inputs (after loading or importing)
    document.querySelectorAll('input[type=radio]').forEach(i => {
      const s = state.tasks[i.dataset.task]; i.checked = !!s && s[i.dataset.rubric][i.dataset.criterion] === Number(i.value);
    });
    document.querySelectorAll('input[type=checkbox][data-flag]').forEach(i => { const s = state.tasks[i.dataset.task]; i.checked = !!s && s.flags.includes(i.dataset.flag); });
    document.querySelectorAll('textarea[data-comment]').forEach(ta => { const s = state.tasks[ta.dataset.task]; ta.value = s ? (s['comment_' + ta.dataset.comment] || '') : ''; });
    progress();
  }
  function show(i) {
    current = Math.max(0, Math.min(data.tasks.length - 1, i));
    data.tasks.forEach((t, j) => { $('task-' + t.task_id).hidden = j !== current; });
    $('task-select').value = data.tasks[current].task_id; window.scrollTo(0, 0);
  }
  const quote = v => /[",\r\n]|^\s|\s$/.test(v) ? '"' + v.replace(/"/g, '""') + '"' : v;
  function toCsv() {
    const lines = [HEADER.join(',')];
    data.tasks.forEach(t => {
      const s = state.tasks[t.task_id]; if (!s) return;
      ['A', 'B'].forEach(r => rub[r].forEach(c => {
        if (s[r][c.name] === undefined) return;
        const flags = r === 'A' ? FLAGS.filter(f => s.flags.includes(f)).join(';') : '';
        lines.push([t.task_id, data.reviewer, r, c.name, String(s[r][c.name]), flags, s['comment_' + r] || ''].map(quote).join(','));
      }));
    });
    return lines.join('\r\n') + '\r\n';
  }
  function parseCsv(text) {
    const rows = []; let row = [], field = '', i = 0, quoted = false;
    text = text.replace(/^\ufeff/, '');
    while (i < text.length) {
      const ch = text[i];
      if (quoted) {
        if (ch === '"' && text[i + 1] === '"') { field += '"'; i += 2; continue; }
        if (ch === '"') { quoted = false; i += 1; continue; }
        field += ch; i += 1; continue;
      }
      if (ch === '"') { quoted = true; i += 1; continue; }
      if (ch === ',') { row.push(field); field = ''; i += 1; continue; }
      if (ch === '\r' || ch === '\n') { row.push(field); rows.push(row); row = []; field = ''; i += (ch === '\r' && text[i + 1] === '\n') ? 2 : 1; continue; }
      field += ch; i += 1;
    }
    if (field !== '' || row.length) { row.push(field); rows.push(row); }
    return rows.filter(r => r.some(c => c !== ''));
  }
  function importCsv(text) {
    const rows = parseCsv(text); if (!rows.length) return 'the file is empty';
    const head = rows[0].map(h => h.trim()), col = {};
    HEADER.forEach(h => { col[h] = head.indexOf(h); });
    if (HEADER.some(h => col[h] < 0)) return 'not a ratings file: the header must be ' + HEADER.join(',');
    const fresh = {}; let used = 0, skipped = 0;
    rows.slice(1).forEach(r => {
      const get = h => (r[col[h]] || '').trim();
      const id = get('task_id'), rb = get('rubric'), crit = get('criterion'), score = get('score');
      const known = byId[id] && get('reviewer') === data.reviewer && rub[rb] && rub[rb].some(c => c.name === crit) && /^[012]$/.test(score);
      if (!known) { skipped += 1; return; }
      const s = (fresh[id] = fresh[id] || blank());
      s[rb][crit] = Number(score);
      if (rb === 'A') get('flags').split(';').map(f => f.trim()).filter(f => FLAGS.includes(f) && !s.flags.includes(f)).forEach(f => s.flags.push(f));
      if (r[col.comment]) s['comment_' + rb] = r[col.comment];
      used += 1;
    });
    Object.assign(state.tasks, fresh); save(); fill();
    return 'imported ' + used + ' ratings for ' + Object.keys(fresh).length + ' tasks' + (skipped ? '; skipped ' + skipped + ' rows of other reviewers or unknown tasks' : '');
  }
  const sel = $('task-select');
  data.tasks.forEach(t => { const o = el('option', '', t.task_id); o.value = t.task_id; sel.appendChild(o); });
  const main = $('tasks'); data.tasks.forEach((t, i) => main.appendChild(taskView(t, i)));
  sel.addEventListener('change', () => show(data.tasks.findIndex(t => t.task_id === sel.value)));
  $('prev').addEventListener('click', () => show(current - 1));
  $('next').addEventListener('click', () => show(current + 1));
  $('export').addEventListener('click', () => {
    const csv = toCsv(); $('csv-text').value = csv;
    const a = el('a'); a.href = URL.createObjectURL(new Blob([csv], {type: 'text/csv;charset=utf-8'}));
    a.download = data.export_name; document.body.appendChild(a); a.click(); a.remove();
    $('import-status').textContent = 'exported ' + (csv.split('\r\n').length - 2) + ' ratings to ' + data.export_name;
  });
  $('import').addEventListener('change', ev => {
    const file = ev.target.files[0]; if (!file) return;
    file.text().then(text => { $('import-status').textContent = importCsv(text); ev.target.value = ''; });
  });
  if (!storageOk) $('storage-warning').hidden = false;
  fill(); show(0);
  document.body.dataset.ready = '1';
})();
"""
