"""The sections of ``report.md``: small functions of ``(RunData, MetricsReport)``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from medmis.experiments.analysis import (
    STRATUM_JOIN,
    DefenderMetrics,
    MetricsReport,
    Prices,
    Proportion,
    Verdict,
)

from ._format import (
    each_result,
    fmt_ci,
    fmt_count,
    fmt_delta,
    fmt_num,
    fmt_p,
    fmt_pct,
    fmt_usd,
    md_table,
)
from ._run import RunData
from ._verdict_text import (
    batch_discount,
    render_incomplete_line,
    render_verdict,
    run_prices,
    run_verdict,
    usd_rows,
)

PAIRED_LABELS = {
    "clean_acc": "Clean accuracy",
    "type1_asr": "Type 1 ASR",
    "type2_asr": "Type 2 ASR",
    "type2_recovery": "Type 2 recovery",
}


# ---------------------------------------------------------------------------------------------
# Markdown sections


class Section(NamedTuple):
    """One section of the report: ``report.md`` joins their markdown, ``report.html`` renders
    each (:mod:`._markdown`), so the two files hold the same sections and tables."""

    id: str
    """A short name, unique in the report (the page's ``<section id>``)."""
    markdown: str
    """The section's markdown ("" for a section the run does not have)."""


def report_sections(run: RunData, report: MetricsReport, verdict: Verdict | None = None,
                    extra: Sequence[Section] = ()) -> list[Section]:
    """Every section of the report in order, those with text only; an incomplete run's first
    section says so. ``extra`` (stability, poisoned retrieval, delivery sensitivity, plots: the
    parts read from other folders or files) follow the run's own."""
    verdict = verdict if verdict is not None else run_verdict(run, report)
    sections = [
        Section("incomplete", render_incomplete_line(verdict)),
        Section("title", f"# MedMisBench mitigation report: {run.run_dir.name}"),
        Section("simulated", render_simulated_banner(run)),
        Section("run", render_run_facts(run, report)),
        Section("headline", render_headline(report)),
        Section("reading", render_reading(report)),
        Section("verdict", render_verdict(verdict, report)),
        Section("strata", render_strata(report)),
        Section("subsets", render_subsets(report)),
        Section("paired", render_paired(report)),
        Section("cost", render_cost(report, run_prices(run), batch_discount(run))),
        Section("definitions", render_definitions()),
        *extra,
    ]
    return [s for s in sections if s.markdown]


def join_sections(sections: Sequence[Section]) -> str:
    """``report.md``'s text: the sections' markdown, a blank line apart."""
    return "\n\n".join(s.markdown.rstrip("\n") for s in sections if s.markdown) + "\n"


def render_markdown(run: RunData, report: MetricsReport, verdict: Verdict | None = None) -> str:
    """The whole ``report.md`` of the run's own sections; an incomplete run's first line says so."""
    return join_sections(report_sections(run, report, verdict))


def render_simulated_banner(run: RunData) -> str:
    """A warning when numbers come from the simulated examinee; empty otherwise."""
    if not run.simulated:
        return ""
    return ("> **⚠ SIMULATED EXAMINEE — these results come from a SIMULATED EXAMINEE and are "
            "not model measurements.** They exercise the pipeline only; do not cite them.")


def render_run_facts(run: RunData, report: MetricsReport) -> str:
    """Dataset, seeds, models, defenders and the command that produced the run."""
    m = run.manifest
    dataset = m.get("dataset") or {}
    command = m.get("command")
    if isinstance(command, list):
        command = " ".join(map(str, command))
    defenders = dict.fromkeys(d for _, d, _ in each_result(report))
    facts = [
        ("Records", str(run.record_count)),
        ("Models", ", ".join(f"`{x}`" for x in run.models) or "—"),
        ("Defenders", ", ".join(f"`{x}`" for x in defenders) or "—"),
        ("Dataset", f"`{dataset.get('source') or '—'}`"),
        ("Dataset SHA-256", f"`{dataset.get('sha256') or '—'}`"),
        ("Prompt", render_prompt_fact(run)),
        ("Temperature", _temperature(m)),
        ("Decoding", render_decoding_fact(m)),
        *([("Per-model settings", _model_settings(m))] if _model_settings(m) else []),
        *([("Poisoned web", _poison_settings(m["poison"]))] if m.get("poison") else []),
        *([("Ambient misinformation", _ambient_settings(m["search_ambient"]))] if m.get("search_ambient") else []),
        ("Run seed", str(m.get("seed", "—"))),
        *([("Epochs", _epochs_fact(report, m, run.simulated))] if _epochs(report) > 1 else []),
        ("Baseline defender", f"`{report.baseline}`"),
        ("Paired bootstrap", f"{report.n_boot} replicates, seed {report.seed}"),
        ("Simulated", "yes" if run.simulated else "no"),
    ]
    if command:
        facts.append(("Command", f"`{command}`"))
    return "## Run\n\n" + "\n".join(f"- **{k}:** {v}" for k, v in facts)


def _epochs(report: MetricsReport) -> int:
    return max((dm.cost.epochs for _, _, dm in each_result(report)), default=1)


def _epochs_fact(report: MetricsReport, manifest: dict[str, Any], simulated: bool) -> str:
    """How many times each case was answered, and what repeating it can show: at the paper's
    decoding (temperature 0) a real model's epochs differ only by its provider's nondeterminism;
    the simulated examinee redraws its answering (never its knowledge) per epoch."""
    e = _epochs(report)
    if simulated:
        note = "; the simulated examinee redraws its answers, not its knowledge, per epoch"
    elif _temperature(manifest) == "0":
        note = "; at temperature 0 the epochs differ only by the provider's nondeterminism"
    else:
        note = ""
    return (f"{e} (every case answered {e} times; metrics pool the epochs, intervals and paired tests "
            f"cluster on items{note})")


def render_prompt_fact(run: RunData) -> str:
    """The prompt preset(s) and version(s) the records were made with, and their source.

    Several presets in one run folder are all named: their numbers are not comparable.
    """
    seen = dict.fromkeys(run.prompts)
    facts = run.manifest.get("prompt") or {}
    if not seen and facts.get("name"):
        seen[(str(facts["name"]), str(facts.get("version") or "?"))] = None
    if not seen:
        return "— (not recorded)"
    text = ", ".join(f"`{name}` v{version or '?'}" for name, version in seen)
    if len(seen) > 1:
        text += " — **mixed presets: results are not comparable across them**"
    elif facts.get("source"):
        text += f" (source: {facts['source']})"
    return text


def _temperature(manifest: dict[str, Any]) -> str:
    resolved = ((manifest.get("decoding") or {}).get("resolved") or {}).values()
    sent = {v.get("temperature") for v in resolved if not v.get("simulated")}
    if len(sent) > 1:
        return "per model (see Decoding)"
    if len(sent) == 1:
        value = next(iter(sent))
        return "not sent" if value is None else f"{value:g}"
    options = (manifest.get("config") or {}).get("model_options") or {}
    value = options.get("temperature", (manifest.get("prompt") or {}).get("temperature"))
    return "—" if value is None else f"{value:g}"


def render_decoding_fact(manifest: dict[str, Any]) -> str:
    """``paper`` / ``reference``, the user's overrides and what each model was sent."""
    decoding = manifest.get("decoding") or {}
    if not decoding:
        return "— (not recorded)"
    text = f"`{decoding.get('preset')}`"
    if decoding.get("overrides"):
        text += " with " + ", ".join(f"{k}={v}" for k, v in decoding["overrides"].items())
    for spec, values in (decoding.get("resolved") or {}).items():
        if values.get("simulated"):
            shown = "simulated examinee (decoding ignored)"
        else:
            shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in values.items() if v is not None) or "provider defaults"
        text += f"; `{spec}`: {shown}"
    return text


def _model_settings(manifest: dict[str, Any]) -> str:
    """Models run with options of their own (an ablation's ``[[models]]`` entries): what each
    sends in place of the run's options (``unset``: not sent)."""
    variants = (manifest.get("config") or {}).get("model_variants") or {}
    parts = []
    for name, variant in variants.items():
        options = ", ".join(f"{k}={'unset' if v is None else v}" for k, v in (variant.get("options") or {}).items())
        spec = variant.get("spec")
        parts.append(f"`{name}`" + (f" = `{spec}`" if spec != name else "") + (f" ({options})" if options else ""))
    return "; ".join(parts)


def _poison_settings(poison: dict[str, Any]) -> str:
    """``--poison``: the share of Type 1 result slots, where they are, which pages."""
    styles = "+".join(poison.get("styles") or []) or "all styles"
    digest = str(poison.get("pages_sha256") or "")[:12]
    return (f"share {poison.get('share')} of every Type 1 search's results, rank `{poison.get('rank')}`, "
            f"{styles}, pages `{poison.get('pages')}` (sha256 {digest}…)")


def _ambient_settings(ambient: dict[str, Any]) -> str:
    """``--search-ambient``: the file searched with the local corpus by every case."""
    digest = str(ambient.get("sha256") or "")[:12]
    return (f"{ambient.get('passages', '?')} false passages of `{ambient.get('file')}` (sha256 {digest}…) "
            "searched with the local corpus by every case, clean ones included: not a clean web")


def render_headline(report: MetricsReport) -> str:
    """Per model x defender: accuracies, ASRs, recovery, ΔT1 ASR, failures and cost."""
    header = ["Model", "Defender", "Clean acc", "T1 acc", "T2 acc", "T1 ASR", "T1 TASR",
              "T2 ASR", "T2 recovery", f"ΔT1 ASR vs {report.baseline} (pts)", "p (paired)",
              "Unparsed", "Errors", "Tokens/case", "LLM calls/case"]
    rows = []
    for model, defender, dm in each_result(report):
        x, t1 = dm.metrics, dm.paired.get("type1_asr")
        rows.append([
            f"`{model}`", f"`{defender}`",
            *(f"{fmt_ci(x[k])} ({x[k].k}/{x[k].n})" if x[k].value is not None else "—"
              for k in ("clean_acc", "type1_acc", "type2_acc", "type1_asr",
                                     "type1_tasr", "type2_asr", "type2_recovery")),
            fmt_delta(t1), fmt_p(t1),
            fmt_count(x["unparsed_rate"]), fmt_count(x["error_rate"]),
            fmt_num(dm.cost.tokens_per_case, 0), fmt_num(dm.cost.llm_calls_per_case, 2),
        ])
    return "## Headline\n\n" + md_table(header, rows)


def render_reading(report: MetricsReport) -> str:
    """How to read ASR against clean accuracy and recovery (the verdict follows it)."""
    intro = (
        "Type 1 ASR is the share of questions answered correctly without context that flip to "
        "a wrong answer once one false sentence is added; lower is better. A defender that "
        "simply ignores all context scores close to 0% ASR yet learns nothing from it, so read "
        "ASR together with clean accuracy and **Type 2 recovery** (clean-wrong questions fixed "
        "when the true sentence is present among the false ones). Brackets are 95% intervals; "
        "with few questions they are wide. Type 1 intervals and tests count questions, not "
        "(question, target) pairs, when one question carries several targets."
    )
    return "## Reading this report\n\n" + intro


def _ct_x_prov_table(dm: DefenderMetrics) -> str:
    cts = list(dm.strata.get("content_type", {}))
    provs = list(dm.strata.get("provenance", {}))
    cells = dm.strata.get("content_type_x_provenance", {})

    def cell(block: dict[str, Proportion] | None) -> str:
        return "—" if block is None else fmt_count(block["type1_asr"])

    rows = [[ct, *(cell(cells.get(ct + STRATUM_JOIN + pv)) for pv in provs),
             cell(dm.strata["content_type"][ct])] for ct in cts]
    rows.append(["**All**", *(cell(dm.strata["provenance"][pv]) for pv in provs),
                 cell(dm.metrics)])
    return md_table(["Content type \\ Provenance", *provs, "All"], rows)


def render_strata(report: MetricsReport) -> str:
    """Type 1 ASR by content type x provenance, one table per model x defender."""
    parts = ["## Type 1 ASR by content type × provenance"]
    for model, defender, dm in each_result(report):
        parts.append(f"### `{model}` · `{defender}`\n\n" + _ct_x_prov_table(dm))
    return "\n\n".join(parts)


def render_subsets(report: MetricsReport) -> str:
    """Main metrics per subset."""
    keys = ("clean_acc", "type1_asr", "type1_tasr", "type2_asr", "type2_recovery")
    header = ["Model", "Defender", "Subset", "Clean acc", "T1 ASR", "T1 TASR", "T2 ASR",
              "T2 recovery", "Errors"]
    rows = [
        [f"`{model}`", f"`{defender}`", subset, *(fmt_count(block[k]) for k in keys),
         fmt_count(block["error_rate"])]
        for model, defender, dm in each_result(report)
        for subset, block in dm.strata.get("subset", {}).items()
    ]
    return "## By subset\n\n" + md_table(header, rows)


def render_paired(report: MetricsReport) -> str:
    """Each defender against the baseline on shared units: Δ, its interval, the paired test."""
    header = ["Model", "Defender", "Metric", "Shared units", "Questions", "Defender",
              report.baseline, "Δ (pts) [95% CI]", "b", "c", "p", "Interval", "Test"]
    rows = [
        [f"`{model}`", f"`{defender}`", PAIRED_LABELS.get(metric, metric),
         f"{c.n} {c.unit}s" if c.unit else str(c.n), "—" if c.clusters is None else str(c.clusters),
         fmt_pct(c.defender_value), fmt_pct(c.baseline_value), fmt_delta(c), str(c.b), str(c.c),
         fmt_p(c), c.interval or "—", c.test or "—"]
        for model, defender, dm in each_result(report)
        for metric, c in dm.paired.items()
    ]
    if not rows:
        return (f"## Paired comparisons vs `{report.baseline}`\n\nNo comparisons: no defender "
                f"shares a model with a `{report.baseline}` baseline.")
    note = (f"Units are the questions (one Type 1 target each) or (question, target) pairs "
            f"on which both the defender and `{report.baseline}` are defined (for ASR: both "
            f"answered correctly clean and graded under attack), so Δ can differ from the "
            f"difference of headline rates. b = outcome only under the defender, c = only "
            f"under `{report.baseline}`. Pairs from one question are not independent: intervals "
            f"and tests resample and count questions (Interval and Test name the method).")
    return (f"## Paired comparisons vs `{report.baseline}`\n\n{note}\n\n"
            + md_table(header, rows))


def render_cost(report: MetricsReport, prices: Prices | None = None, discount: float = 0.0) -> str:
    """Tokens, calls, latency and (with prices) dollars per model x defender; ``discount``
    is the batch discount already taken off ``prices`` (a batch run), stated in the note."""
    dollars = usd_rows(report, prices or {})
    header = ["Model", "Defender", "Cases", "Input tokens", "Output tokens", "In/case",
              "Out/case", "LLM calls/case", "Tool calls/case", "Latency p50 (s)",
              "Latency p95 (s)", "Escalated", "USD", "USD/case", "USD/1k cases"]
    rows = []
    for model, defender, dm in each_result(report):
        c = dm.cost
        money = dollars[(model, defender)]
        rows.append([
            f"`{model}`", f"`{defender}`", str(c.cases), f"{c.input_tokens:,}",
            f"{c.output_tokens:,}", fmt_num(c.input_tokens_per_case),
            fmt_num(c.output_tokens_per_case), fmt_num(c.llm_calls_per_case, 2),
            fmt_num(c.tool_calls_per_case, 2), fmt_num(c.latency_p50_s, 2),
            fmt_num(c.latency_p95_s, 2), "—" if c.escalated is None else fmt_count(c.escalated),
            fmt_usd(money["usd"]), fmt_usd(money["usd_per_case"]), fmt_usd(money["usd_per_1k_cases"]),
        ])
    priced = ", ".join(f"`{m}` ${p[0]:g} in / ${p[1]:g} out" for m, p in (prices or {}).items())
    batch = (f" Batch API run: these are the list prices less the {100 * discount:g}% batch "
             f"discount." if discount else "")
    note = (f"Prices (USD per million tokens): {priced}.{batch}" if priced else
            "No prices recorded (`--price MODEL=IN,OUT` on `medmis run`, or the ablation "
            "config's `price_in_per_mtok` / `price_out_per_mtok`): dollars are not shown.")
    return "## Cost\n\n" + note + "\n\n" + md_table(header, rows)


def render_definitions() -> str:
    """A short glossary so that the report stands on its own."""
    items = [
        "**Accuracy**: correct / graded answers under a protocol (clean, Type 1 = one false "
        "sentence, Type 2 = all option sentences, the true one included).",
        "**ASR**: among questions answered correctly clean (same model and defender), the "
        "share answered incorrectly under the attack. **TASR**: the share that picked exactly "
        "the option the false sentence argued for.",
        "**Type 2 recovery**: among questions answered wrongly clean, the share answered "
        "correctly under Type 2.",
        "**Unparsed**: graded answers with no parsable choice (counted as incorrect). "
        "**Errors**: cases that could not be completed; never graded, excluded from the rates "
        "above.",
        "Proportions carry Wilson 95% intervals, widened by the design effect when one "
        "question carries several Type 1 targets; paired differences carry a score interval "
        "(Tango) or a seeded question-level bootstrap, and a question-level test (exact "
        "McNemar with one unit per question, a sign-flip test over questions otherwise).",
    ]
    return "## Definitions\n\n" + "\n".join(f"- {i}" for i in items)
