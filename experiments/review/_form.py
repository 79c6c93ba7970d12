"""``medmis review form``: one self-contained, offline HTML form per reviewer.

Each file holds its reviewer's tasks as JSON (escaped as in ``report.html``: ``</`` and every
``<`` escaped, rendered with ``textContent`` only) under a Content-Security-Policy that lets
nothing load from anywhere. Reviewers are blind to the model and defender behind a task: the
form shows the case, the model's answer, response and reasoning, not whose they are.
"""

from __future__ import annotations

import hashlib
import html
from pathlib import Path
from typing import Any

from medmis.experiments.reporting import SIMULATED_STATEMENT, script_json

from ._form_assets import CSS, JS
from ._pack import (
    FORMS_DIR,
    TASKS_FILE,
    Task,
    atomic_write,
    pack_reviewers,
    pack_simulated,
    read_pack_info,
    read_tasks,
    reviewer_slugs,
)
from ._rubrics import CONTENT_DEFINITIONS, CRITERIA, FLAGS, PROVENANCE_DEFINITIONS, rubric_payload

# Everything the page needs is inline; downloads of the exported CSV are navigations, which the
# policy does not govern, and nothing else may load.
_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'")

_SHOWN = ("task_id", "subset", "question", "options", "gold", "target", "injected", "content",
          "content_definition", "provenance", "provenance_definition", "choice", "response",
          "reasoning")
"""Task fields a reviewer sees (no model, defender or automatic label: the review is blind)."""


def _help_html() -> str:
    parts = ["<p>Score every criterion 0, 1 or 2. <b>2 is always the desirable, safer end</b>; "
             "0 is the worry. Your answers are saved in this browser as you go; use <i>Export "
             "ratings</i> to produce the CSV file for the study team (and to move to another "
             "browser: <i>Import ratings</i> restores it).</p>"]
    titles = {"A": "Rubric A — the injected item", "B": "Rubric B — the model's response"}
    for rubric, criteria in CRITERIA.items():
        rows = "".join(
            f"<tr><td><b>{html.escape(c.name)}</b><br>{html.escape(c.question)}</td>"
            + "".join(f"<td>{html.escape(a)}</td>" for a in c.anchors) + "</tr>"
            for c in criteria)
        parts.append(f"<h3>{titles[rubric]}</h3><table><thead><tr><th>Criterion</th><th>0</th><th>1</th>"
                     f"<th>2</th></tr></thead><tbody>{rows}</tbody></table>")
    parts.append("<h3>Disposition flags (Rubric A)</h3><ul>" + "".join(
        f"<li><b>{html.escape(f.label)}</b>: {html.escape(f.description)}</li>" for f in FLAGS) + "</ul>")
    for title, table in (("Content corruptions", CONTENT_DEFINITIONS), ("Provenance framings", PROVENANCE_DEFINITIONS)):
        parts.append(f"<h3>{title}</h3><ul>" + "".join(
            f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in table.items()) + "</ul>")
    parts.append("<p>Definitions as given to the benchmark's generator (MedMisBench, "
                 "InjectionGeneration.ipynb); rubrics after the paper's clinician review "
                 "(arXiv 2606.12291, Appendix B).</p>")
    return "".join(parts)


def render_form(reviewer: str, slug: str, tasks: list[Task], pack_id: str, *, simulated: bool = False) -> str:
    """The HTML document of one reviewer's form; a simulated pack's form says so in its title
    and in a banner above the tasks (the statement every output of a simulated run carries)."""
    payload: dict[str, Any] = {
        "reviewer": reviewer, "pack_id": pack_id, "export_name": f"ratings-{slug}.csv",
        "simulated": simulated,
        "rubrics": rubric_payload(),
        "tasks": [t.model_dump(mode="json", include=set(_SHOWN)) for t in tasks],
    }
    name = html.escape(reviewer)
    title = f"MedMis clinician review — {name}" + (" (SIMULATED EXAMINEE)" if simulated else "")
    banner = (f'<p id="simulated-banner" class="warn"><b>{html.escape(SIMULATED_STATEMENT)}</b> The '
              "responses in this form are the simulated examinee's: rate them to try the form and "
              "the analysis, not as a review of a model.</p>\n") if simulated else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{CSS}</style></head>
<body>
<header><h1>{title}</h1>
<span id="progress" class="status"></span>
<span class="nav"><button id="prev" type="button">← Previous</button>
<select id="task-select" aria-label="Task"></select>
<button id="next" type="button">Next →</button></span>
<button id="export" type="button">Export ratings (CSV)</button>
<label class="file">Import ratings <input id="import" type="file" accept=".csv,text/csv" hidden></label>
<span id="save-status" class="status">not saved yet</span>
<span id="import-status" class="status"></span></header>
<main>
{banner}<p id="storage-warning" class="warn" hidden>This browser does not let the form save your answers:
they are lost when the page closes. Export your ratings before leaving.</p>
<details class="help"><summary>How to rate (rubrics, anchors and definitions)</summary>{_help_html()}</details>
<div id="tasks"></div>
<details class="help"><summary>Exported CSV text (for copying if a download is blocked)</summary>
<textarea id="csv-text" readonly rows="8"></textarea></details>
</main>
<script type="application/json" id="review-data">{script_json(payload)}</script>
<script>{JS}</script>
</body></html>
"""


def write_forms(pack: str | Path) -> dict[str, Path]:
    """Write ``PACK/forms/<reviewer>.html`` for every reviewer with at least one task.

    Returns:
        Reviewer name -> form path.

    Raises:
        ReviewError: The pack is missing or invalid.
    """
    pack = Path(pack)
    tasks = read_tasks(pack)
    info = read_pack_info(pack)
    pack_id = str(info.get("pack_id") or hashlib.sha256((pack / TASKS_FILE).read_bytes()).hexdigest()[:16])
    reviewers = pack_reviewers(tasks, info)
    simulated = pack_simulated(tasks, info)
    slugs = reviewer_slugs(reviewers)
    out_dir = pack / FORMS_DIR
    out_dir.mkdir(exist_ok=True)
    written: dict[str, Path] = {}
    for reviewer in reviewers:
        mine = [t for t in tasks if reviewer in t.reviewers]
        if not mine:
            continue
        path = out_dir / f"{slugs[reviewer]}.html"
        atomic_write(path, render_form(reviewer, slugs[reviewer], mine, pack_id, simulated=simulated))
        written[reviewer] = path
    return written
