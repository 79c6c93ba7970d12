"""The report of an open-ended run (``medmis run --answer-format open``).

Its records are free text with no choice and no ``correct``: the multiple-choice tables
(accuracy, ASR, TASR, recovery, unparsed rate, the verdict) do not apply, and computing them
would count every answer as wrong and unparsed. The report says so, shows what the run did
(answers and errors per protocol, cost), and leaves the scores to the grading step.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from medmis.experiments.analysis import VerdictSettings
from medmis.experiments.grading import BESIDE_KEY, OpenAnalysis
from medmis.experiments.records import GRADE_HINT

from ._open_ended import render_open_ended
from ._run import RunData
from ._sections import (
    Section,
    join_sections,
    render_decoding_fact,
    render_prompt_fact,
    render_simulated_banner,
)

NOT_GRADED = f"Not graded here: the answers are free text; {GRADE_HINT}."
"""What an open-ended run's multiple-choice tables say instead of figures."""


def open_sections(run: RunData, graded: OpenAnalysis | None = None) -> list[Section]:
    """The sections of an open-ended run's report; ``graded``: the rubric jury's figures
    (:func:`medmis.experiments.grading.open_analysis`) when the run has been graded."""
    m = run.manifest
    dataset = m.get("dataset") or {}
    command = m.get("command")
    if isinstance(command, list):
        command = " ".join(map(str, command))
    records = run.records
    cells = list(dict.fromkeys((r.model, r.defender) for r in records))
    facts = [
        ("Records", str(len(records))),
        ("Answer format", "open (the question without its options; a free-text answer and its explanation)"),
        ("Models", ", ".join(f"`{x}`" for x in run.models) or "—"),
        ("Defenders", ", ".join(f"`{x}`" for x in dict.fromkeys(d for _, d in cells)) or "—"),
        ("Dataset", f"`{dataset.get('source') or '—'}`"),
        ("Dataset SHA-256", f"`{dataset.get('sha256') or '—'}`"),
        ("Prompt", render_prompt_fact(run)),
        ("Decoding", render_decoding_fact(m)),
        ("Run seed", str(m.get("seed", "—"))),
        ("Simulated", "yes" if run.simulated else "no"),
    ]
    if command:
        facts.append(("Command", f"`{command}`"))
    done: Counter[tuple[str, str, str]] = Counter()
    failed: Counter[tuple[str, str, str]] = Counter()
    tokens: Counter[tuple[str, str]] = Counter()
    calls: Counter[tuple[str, str]] = Counter()
    for r in records:
        (failed if r.error else done)[(r.model, r.defender, r.protocol)] += 1
        tokens[(r.model, r.defender)] += r.usage.input_tokens + r.usage.output_tokens
        calls[(r.model, r.defender)] += r.llm_calls
    protocols = [p for p in ("clean", "type1", "type2") if any(k[2] == p for k in done + failed)]
    head = ["Model", "Defender", *(f"{p} answers (errors)" for p in protocols), "Tokens/case", "LLM calls/case"]
    rows = []
    for model, defender in cells:
        n = sum(done[(model, defender, p)] + failed[(model, defender, p)] for p in protocols) or 1
        rows.append([f"`{model}`", f"`{defender}`",
                     *(f"{done[(model, defender, p)]} ({failed[(model, defender, p)]})" for p in protocols),
                     f"{tokens[(model, defender)] / n:.0f}", f"{calls[(model, defender)] / n:.2f}"])
    table = "\n".join(["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |",
                       *("| " + " | ".join(row) + " |" for row in rows)])
    return [s for s in [
        Section("title", f"# MedMisBench open-ended report: {run.run_dir.name}"),
        Section("simulated", render_simulated_banner(run)),
        Section("run", "## Run\n\n" + "\n".join(f"- **{k}:** {v}" for k, v in facts)),
        Section("answers", "## Answers\n\n" + table),
        Section("mcq", "## Multiple-choice metrics\n\n" + (
            NOT_GRADED + " Accuracy, ASR, TASR, Type 2 recovery and the verdict need a graded answer; a "
            "free-text answer is not counted as wrong or unparsed." if graded is None else
            "The answers are free text: the harness grades none of them. The rubric jury's reading "
            "below (`medmis grade`) is what the accuracy, ASR and verdict of this report are computed on.")),
        Section("open_ended", render_open_ended(graded)),
    ] if s.markdown]


def write_open_report(run: RunData, *, figures: bool, write_text: Callable[[Path, str], None],
                      baseline: str = "none", seed: int = 0, settings: VerdictSettings | None = None,
                      mcq_run: str | Path | None = None) -> dict[str, Path]:
    """Write ``report.md`` (and ``report.html`` with ``figures``) of an open-ended run; no
    ``metrics.json``, ``metrics.csv`` or ``verdict.json``: they hold graded figures. When the run
    has been graded (``medmis grade``), the rubric jury's section joins the report and its
    figures go to ``open_ended.json``; with ``mcq_run``, the MCQ run's figures beside them
    (its ``mcq_beside`` key)."""
    from medmis.experiments.grading import open_analysis

    graded = open_analysis(run.run_dir, baseline=baseline, seed=seed, simulated=run.simulated, settings=settings,
                           mcq_run=mcq_run)
    sections = open_sections(run, graded)
    paths = {"report.md": run.run_dir / "report.md"}
    if graded is not None:
        paths["open_ended.json"] = run.run_dir / "open_ended.json"
        data = {"grading": graded.grading, "metrics": graded.metrics, "graded": graded.report.to_json_dict(),
                "verdict": graded.verdict.to_json()}
        if graded.beside is not None:
            data[BESIDE_KEY] = graded.beside
        write_text(paths["open_ended.json"], json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    write_text(paths["report.md"], join_sections(sections))
    if figures:
        from ._html import write_html

        paths["report.html"] = write_html(run.run_dir, sections, title=run.run_dir.name, simulated=run.simulated)
    return paths
