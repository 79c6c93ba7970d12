"""The report's open-ended section: free-text answers graded by the rubric jury (``medmis grade``).

Shown when the run folder holds ``grades.jsonl``; the figures come from
:func:`medmis.experiments.grading.open_analysis` (the HealthBench score rule, the jury rule, and
the MCQ metrics' definitions, intervals, paired tests, Holm and guards over the jury-graded
records). The wording of the verdict is the MCQ verdict's (:func:`render_verdict`).
"""

from __future__ import annotations

from typing import Any

from medmis.experiments.analysis import MetricsReport, Proportion
from medmis.experiments.grading import OpenAnalysis

from ._format import each_result, fmt_ci, fmt_delta, fmt_p, md_table
from ._verdict_text import render_verdict


def _score(block: dict[str, Any] | None) -> str:
    if not block:
        return "—"
    return f"{block['value']:.3f} ± {block['bootstrap_std']:.3f} (n={block['n']})"


def _interval(block: dict[str, Any] | None, scale: float = 1.0, unit: str = "") -> str:
    if not block:
        return "—"
    return f"{scale * block['value']:.3g}{unit} [{scale * block['lo']:.3g}, {scale * block['hi']:.3g}]"


def _verdict_title(markdown: str) -> str:
    # the MCQ verdict's own section, retitled so the page holds one "## Verdict"
    return markdown.replace("## Verdict", "### Open-ended verdict", 1)


_BESIDE_LABEL = {"clean_acc": "accuracy / scored correct", "type1_asr": "ASR Type 1", "type2_asr": "ASR Type 2"}


def _render_beside(beside: dict[str, Any] | None) -> list[str]:
    """The MCQ run's figures beside the open-ended ones (``open_ended.json``'s ``mcq_beside``)."""
    if not beside:
        return []
    rows = []
    for model, defenders in beside["metrics"].items():
        for defender, cell in defenders.items():
            for protocol, b in cell.items():
                a = b.get("agreement")
                rows.append([f"`{model}`", f"`{defender}`", protocol, _BESIDE_LABEL.get(b["metric"], b["metric"]),
                             fmt_ci(Proportion(**b["open"])) if b.get("open") else "—",
                             fmt_ci(Proportion(**b["mcq"])) if b.get("mcq") else "—",
                             str(a["both_graded"]) if a else "0",
                             (f"{a['open_correct_mcq_correct']} of {a['open_correct_mcq_correct'] + a['open_correct_mcq_incorrect']}"
                              if a else "—"),
                             (f"{a['open_incorrect_mcq_correct']} of {a['open_incorrect_mcq_correct'] + a['open_incorrect_mcq_incorrect']}"
                              if a else "—")])
    return ["", f"Beside the multiple-choice run of the same items (`{beside['run']}`): each figure is the same "
                "MCQ definition on each run (clean: MCQ accuracy beside the share of clean answers scored "
                "correct; Type 1 / Type 2: the ASR of each). Paired, per answer both runs graded (same item, "
                "protocol and target): how often the MCQ answer was correct where the jury scored the "
                "free-text answer correct, and where it scored it incorrect (counts).", "",
            md_table(["Model", "Defender", "Protocol", "Figure", "Open-ended", "MCQ", "Both graded",
                      "MCQ correct where open correct", "MCQ correct where open incorrect"], rows)]


def render_open_ended(analysis: OpenAnalysis | None) -> str:
    """The open-ended section (empty without grades)."""
    if analysis is None:
        return ""
    g = analysis.grading
    judges = ", ".join(f"`{j}`" for j in g.get("judges", []))
    simulated = g.get("simulated_judges") or []
    lines = ["## Open-ended answers graded by a rubric jury", ""]
    if simulated:
        lines += ["> **⚠ SIMULATED JUDGES** (" + ", ".join(f"`{j}`" for j in simulated) + "): word-overlap "
                  "stand-ins, not graders. These grades exercise the pipeline only; do not cite them.", ""]
    lines += [f"Judges: {judges}. Rubric file `{g.get('rubrics', {}).get('file')}` "
              f"(sha256 `{str(g.get('rubrics', {}).get('sha256', ''))[:12]}…`), judge prompt "
              f"`{g.get('judge_prompt')}`, threshold {g.get('threshold')}.", ""]
    report: MetricsReport = analysis.report
    rows = []
    for model, defender, dm in each_result(report):
        m = analysis.metrics.get(model, {}).get(defender, {})
        rows.append([f"`{model}`", f"`{defender}`", _score(m.get("score_clean")), _score(m.get("score_type1")),
                     _score(m.get("score_type2")), _interval(m.get("score_drop_type1")),
                     _interval(m.get("score_drop_type2")), _interval(m.get("uptake"), 100, "%"),
                     fmt_ci(dm.metrics["clean_acc"]), fmt_ci(dm.metrics["type1_asr"]), fmt_ci(dm.metrics["type2_asr"])])
    lines.append(md_table(["Model", "Defender", "Score clean", "Score Type 1", "Score Type 2", "Drop → Type 1",
                           "Drop → Type 2", "Uptake", "Scored correct (clean)", "Open-ended ASR Type 1",
                           "Open-ended ASR Type 2"], rows))
    paired = [[f"`{model}`", f"`{defender}`", metric, str(c.n), fmt_delta(c), fmt_p(c), c.test or "—"]
              for model, defender, dm in each_result(report) for metric, c in dm.paired.items()]
    if paired:
        lines += ["", f"Paired against `{report.baseline}` on shared units (the MCQ comparisons over the "
                      "jury-graded answers):", "", md_table(["Model", "Defender", "Metric", "Units", "Δ (pts) [95% CI]",
                                                             "p", "Test"], paired)]
    kinds = sorted({k for d in analysis.metrics.values() for m in d.values() for k in m.get("disagreement", {})})
    if kinds:
        dis = [[f"`{model}`", f"`{defender}`",
                *(f"{100 * m['disagreement'][k]['value']:.1f}% (n={m['disagreement'][k]['n']})"
                  if k in m.get("disagreement", {}) else "—" for k in kinds)]
               for model, d in analysis.metrics.items() for defender, m in d.items()]
        lines += ["", "Jury disagreement (share of answer x criterion verdicts on which the judges differ):", "",
                  md_table(["Model", "Defender", *kinds], dis)]
    lines += _render_beside(analysis.beside)
    lines += ["", _verdict_title(render_verdict(analysis.verdict, report)), "",
              "Definitions. An answer's score is HealthBench's (points of the criteria met, negative ones "
              "subtracting, over the positive points possible; simple-evals `healthbench_eval.py`), one per "
              "judge; the jury score is the mean of its judges'. Score columns: HealthBench's clipped mean "
              "± its bootstrap std (1,000 seeded resamples). Drop: mean paired (clean − injected) jury score "
              "with a 95% interval resampling questions. An answer is scored correct when its jury score is "
              f"at least the threshold ({g.get('threshold')}); the open-ended ASR is the MCQ ASR over that "
              "reading (clean-correct units scored incorrect under injection), with the MCQ intervals, tests, "
              "Holm adjustment and guards. Uptake: share of Type 1 answers whose injected claim's "
              "`endorses_injection` criterion a strict majority of the judges find met."]
    return "\n".join(lines)
