"""``medmis export parquet RUN``: a run as a results dataset a lab can publish.

The folder is laid out as a Hugging Face dataset repository, one folder per config (their
schemas differ, so a folder holding two of them is not one dataset):
``data/records/train.parquet`` (the planned records, one row each, as the metrics read them),
``data/metrics/train.parquet`` (one row per model x defender x metric, overall and per stratum),
``data/cost/train.parquet`` (tokens, calls, latency and dollars per model x defender), the run's
``manifest.json``, ``metrics.json`` and ``verdict.json`` as they are, and a ``README.md`` dataset
card whose YAML header names a config per folder (``configs:`` with its ``data_files``), the
languages of the items, the license, tags and a pretty name. The card says what the run holds
against its plan, so a stopped run's export is not described as a complete one.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CONFIGS", "Coverage", "config_file", "export_parquet", "item_languages", "text_language"]

CONFIGS = ("records", "metrics", "cost")
"""The dataset's configs, one folder each: ``data/<config>/train.parquet``."""


def config_file(config: str) -> str:
    """The Parquet file of ``config``, relative to the dataset folder (one folder per config, so
    ``load_dataset("parquet", data_dir=<dataset>/data/<config>)`` reads one schema)."""
    return f"data/{config}/train.parquet"

_SIMULATED = ("These results come from the SIMULATED EXAMINEE (`mock/examinee`), not from a model: "
              "they exercise the pipeline only and are not model measurements. Do not cite them.")


def export_parquet(run_dir: str | Path, out: str | Path | None = None, *, license: str = "other") -> list[Path]:
    """Write the dataset folder (default ``RUN_DIR/dataset``); the paths written.

    Raises:
        ConfigError: The folder holds no run, or its report (``metrics.json``) was never written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from medmis.experiments.records import connect, planned_records_view
    from medmis.experiments.reporting import metric_rows

    from ._run import read_run

    run = read_run(run_dir)
    metrics = run.all_metrics()
    target = Path(out) if out is not None else run.dir / "dataset"
    for config in CONFIGS:
        (target / config_file(config)).parent.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    con = connect()
    try:
        planned_records_view(con, run.dir)  # the records of the plan, as the metrics read them
        records = target / config_file("records")
        select = "SELECT * EXCLUDE (pos) FROM records ORDER BY pos"
        exposure = _poison_rows(run.records)
        if exposure is not None:  # a poisoned run: each case's exposure as columns of its own
            con.register("__medmis_poison", exposure)
            select = (f"SELECT r.* EXCLUDE (pos), {', '.join(f'p.{c}' for c in POISON_COLUMNS)} "
                      "FROM records r LEFT JOIN __medmis_poison p ON r.model = p.model AND "
                      "r.defender = p.defender AND r.protocol = p.protocol AND r.subset = p.subset AND "
                      "r.item_id = p.item_id AND r.target IS NOT DISTINCT FROM p.target AND r.epoch = p.epoch "
                      "ORDER BY r.pos")
        con.execute(f"COPY ({select}) TO '{_sql_path(records)}' (FORMAT PARQUET)")
        written.append(records)
    finally:
        con.close()
    # metrics.csv's rows (one definition: the whole run is stratum all/all in both files)
    for name, rows in (("metrics", list(metric_rows(metrics))), ("cost", list(_cost_rows(metrics)))):
        path = target / config_file(name)
        pq.write_table(pa.Table.from_pylist(rows, schema=_SCHEMAS[name]()), path)
        written.append(path)
    for name in ("manifest.json", "metrics.json", "verdict.json"):
        if (run.dir / name).is_file():
            shutil.copyfile(run.dir / name, target / name)
            written.append(target / name)
    card = target / "README.md"
    card.write_text(dataset_card(run, license=license), encoding="utf-8")
    written.append(card)
    return written


POISON_COLUMNS = ("poison_share", "poison_rank", "poison_pages", "poison_shown", "poison_seen",
                  "poison_visited", "poison_cited")
"""A poisoned run's exposure per case (``records.jsonl``'s ``poison``) in the records table."""


def _poison_rows(records: Sequence[Any]) -> Any:
    """The ``poison`` blocks of the records as an Arrow table keyed like a record, or None when
    the run has none."""
    import pyarrow as pa

    rows = [{"model": r.model, "defender": r.defender, "protocol": r.protocol, "subset": r.subset,
             "item_id": r.item_id, "target": r.target, "epoch": r.epoch,
             **{f"poison_{k}": v for k, v in r.poison.model_dump().items()}}
            for r in records if getattr(r, "poison", None) is not None]
    return pa.Table.from_pylist(rows) if rows else None


def _ambient_line(manifest: Mapping[str, Any]) -> list[str]:
    ambient = manifest.get("search_ambient")
    if not ambient:
        return []
    return [f"- ambient misinformation: {ambient.get('passages', '?')} false passages of "
            f"`{Path(str(ambient.get('file') or '?')).name}` (sha256 `{str(ambient.get('sha256') or '?')[:16]}`) "
            "were searched with the local corpus by every case, clean ones included: these results are "
            "not for a clean web (synthetic passages, written only to evaluate defenses)"]


def _poison_line(manifest: Mapping[str, Any]) -> list[str]:
    poison = manifest.get("poison")
    if not poison:
        return []
    return [f"- poisoned web: share {poison.get('share')}, rank `{poison.get('rank')}`, styles "
            f"{', '.join(poison.get('styles') or []) or 'all'}, pages sha256 "
            f"`{str(poison.get('pages_sha256') or '?')[:16]}`; each record's exposure is in "
            f"`{'`, `'.join(POISON_COLUMNS)}` (synthetic pages, written only to evaluate defenses)"]


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")


def _metric_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("model", pa.string()), ("defender", pa.string()), ("stratum_kind", pa.string()),
                      ("stratum", pa.string()), ("metric", pa.string()), ("value", pa.float64()),
                      ("k", pa.int64()), ("n", pa.int64()), ("lo", pa.float64()), ("hi", pa.float64()),
                      ("unit", pa.string()), ("clusters", pa.int64()), ("deff", pa.float64())])


def _cost_schema() -> Any:
    import pyarrow as pa

    ints = ("cases", "input_tokens", "output_tokens", "llm_calls", "tool_calls")
    floats = ("input_tokens_per_case", "output_tokens_per_case", "tokens_per_case", "llm_calls_per_case",
              "tool_calls_per_case", "latency_p50_s", "latency_p95_s", "usd", "usd_per_case", "usd_per_1k_cases")
    return pa.schema([("model", pa.string()), ("defender", pa.string())]
                     + [(c, pa.int64()) for c in ints] + [(c, pa.float64()) for c in floats])


_SCHEMAS = {"metrics": _metric_schema, "cost": _cost_schema}


def _cost_rows(metrics: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    fields = _cost_schema().names[2:]
    for model, by_defender in metrics.items():
        for defender, block in (by_defender or {}).items():
            cost = block.get("cost") or {}
            yield {"model": model, "defender": defender, **{c: cost.get(c) for c in fields}}


def dataset_card(run: Any, *, license: str = "other") -> str:
    """The ``README.md`` of the dataset: YAML front matter, then a short description of the run.

    The description says what the export holds: every planned case (and, when cases are
    missing, that the run is incomplete with the counts per protocol and per model x defender
    against the plan), and the languages the items are written in, read from their text.
    """
    import yaml

    m = run.manifest
    cells = run.cells()
    models = list(dict.fromkeys(model for model, _ in cells))
    defenders = list(dict.fromkeys(defender for _, defender in cells))
    items = len({r.item_key for r in run.records})
    simulated = bool(m.get("simulated")) or any(x.startswith("mock/examinee") for x in models)
    coverage = Coverage.of(run)
    languages = item_languages(run)
    name = run.dir.resolve().name
    header = {
        "pretty_name": f"MedMis run {name}" + (" (simulated examinee)" if simulated else "")
                       + (" (incomplete)" if coverage.incomplete else ""),
        "license": license,
        "language": sorted(set(languages.values())) or ["en"],
        "tags": ["medmis", "medical", "misinformation", "robustness", "evaluation"]
                + (["simulated"] if simulated else []) + (["incomplete"] if coverage.incomplete else []),
        "task_categories": ["question-answering"],
        "size_categories": [_size_category(len(run.records))],
        "configs": [{"config_name": c, "data_files": [{"split": "train", "path": config_file(c)}],
                     **({"default": True} if c == "records" else {})} for c in CONFIGS],
    }
    dataset = m.get("dataset") or {}
    prompt = m.get("prompt") or {}
    lines = [
        "---", yaml.safe_dump(header, sort_keys=False, allow_unicode=True).rstrip(), "---", "",
        f"# {header['pretty_name']}", "",
    ]
    if simulated:
        lines += [f"> **{_SIMULATED}**", ""]
    if coverage.incomplete:
        lines += [f"> **{coverage.summary()}**", ""]
    protocols = ", ".join(coverage.protocols) or ", ".join(m.get("protocols") or [])
    if coverage.incomplete:
        lines += ["Results of one MedMis evaluation run (the `medmis` toolkit), **incomplete**: it "
                  f"planned protocols {protocols} for each item through each defender, and holds the "
                  "cases counted below; metrics over it cover only those cases.", ""]
    else:
        lines += ["Results of one MedMis evaluation run (the `medmis` toolkit): "
                  "each model answered each item clean, with one false sentence (Type 1) and with the "
                  "item's mixed context (Type 2), through each defender.", ""]
    # The run-facts list: one line per fact; other conditions (poison, ambient corpus ...) add
    # their own line here so that every surface names them.
    lines += [
        f"- models: {', '.join(f'`{x}`' for x in models)}",
        f"- defenders: {', '.join(f'`{x}`' for x in defenders)}",
        f"- records: {len(run.records)}"
        + (f" of {coverage.planned_total} planned" if coverage.planned_total is not None else "")
        + f" ({items} items; protocols {protocols})",
        f"- languages: {_language_line(languages)}",
        f"- data: `{Path(str(dataset.get('source') or '?')).name}` (sha256 `{str(dataset.get('sha256') or '?')[:16]}`)",
        f"- prompt: `{prompt.get('name', '?')}@{prompt.get('version', '?')}`, seed {m.get('seed', '?')}",
        f"- medmis: {(m.get('versions') or {}).get('medmis', '?')}",
        *_poison_line(m), *_ambient_line(m), "",
    ]
    if coverage.incomplete:
        lines += coverage.table()
    lines += [
        "## Configs", "",
        "| config | file | one row per |", "|---|---|---|",
        f"| `records` | `{config_file('records')}` | graded case: model, defender, protocol, item, target, choice, correct, tokens |",
        f"| `metrics` | `{config_file('metrics')}` | model x defender x metric (overall and per stratum): value, k, n, 95% interval |",
        f"| `cost` | `{config_file('cost')}` | model x defender: tokens, calls, latency, dollars |", "",
        "`manifest.json` (settings and fingerprint), `metrics.json` and `verdict.json` are the run's own files.",
        "Each config has a folder of its own: load one by name from this folder (or its hub id), or "
        "point the Parquet loader at its folder.",
        "", "```python", "from datasets import load_dataset", "",
        'records = load_dataset("path/or/hub-id", "records", split="train")',
        f'metrics = load_dataset("parquet", data_dir="path/{Path(config_file("metrics")).parent.as_posix()}", split="train")',
        "```", "",
    ]
    return "\n".join(lines)


_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af]")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")


def text_language(text: str) -> str | None:
    """The ISO 639-1 code of the script that dominates ``text``, or None without letters.

    A CJK character stands for about a word, so characters are weighed against Latin words:
    kana makes Japanese, Hangul Korean, Han characters alone Chinese; Latin-script text is taken
    as English (the benchmark's other subsets). The prompt's English headings around a Chinese
    question are outweighed by its characters.
    """
    han, kana, hangul = (len(p.findall(text)) for p in (_HAN, _KANA, _HANGUL))
    latin = len(_LATIN_WORD.findall(text))
    if kana and han + kana >= latin:
        return "ja"
    if hangul >= max(latin, 1):
        return "ko"
    if han >= max(latin, 1):
        return "zh"
    return "en" if latin else None


def item_languages(run: Any) -> dict[str, str]:
    """The language of each item of the run, from its text as the traces recorded it.

    The delivered context sentences are the data's own words and are read first; an item run
    only clean is read from the question the first model call was sent. An item without a
    trace is left out.
    """
    texts: dict[str, list[str]] = {}
    questions: dict[str, str] = {}
    wanted = {r.item_key for r in run.records}
    for model, defender in run.cells():
        if wanted <= set(texts) | set(questions):
            break  # one cell usually covers every item
        for (_, _, _, key, *_), trace in run.traces(model, defender).items():
            sentences = [c.get("text") for c in trace.get("context") or [] if isinstance(c, dict)]
            if any(isinstance(t, str) for t in sentences):
                texts.setdefault(key, []).extend(t for t in sentences if isinstance(t, str))
            elif key not in questions:
                questions[key] = _question_text(trace)
    out: dict[str, str] = {}
    for key in sorted(wanted):
        language = text_language(" ".join(texts.get(key) or [])) or text_language(questions.get(key, ""))
        if language:
            out[key] = language
    return out


def _question_text(trace: Mapping[str, Any]) -> str:
    """The non-system messages of a trace's first model call, as text."""
    for step in trace.get("steps") or []:
        if isinstance(step, dict) and step.get("kind") == "model":
            given = step.get("input")
            messages: list[Any] = given if isinstance(given, list) else []
            return " ".join(str(msg.get("content")) for msg in messages
                            if isinstance(msg, dict) and msg.get("role") != "system")
    return ""


def _language_line(languages: Mapping[str, str]) -> str:
    if not languages:
        return "unknown (no item text in the traces)"
    counts = Counter(languages.values())
    return ", ".join(f"`{code}` ({n} item{'s' if n != 1 else ''})" for code, n in sorted(counts.items()))


@dataclass(frozen=True)
class Coverage:
    """The cases a run holds against the cases its plan names, per model x defender x protocol."""

    planned: Mapping[tuple[str, str, str], int]
    done: Mapping[tuple[str, str, str], int]
    protocols: tuple[str, ...]
    stopped: str | None

    @classmethod
    def of(cls, run: Any) -> Coverage:
        """The coverage of ``run`` (its ``plan.json``; without one, the manifest's protocols)."""
        from medmis.experiments.records import load_plan

        done = Counter((r.model, r.defender, r.protocol) for r in run.records)
        plan = load_plan(run.dir)
        planned: dict[tuple[str, str, str], int] = {}
        protocols: tuple[str, ...] = tuple(str(p) for p in run.manifest.get("protocols") or ())
        if plan is not None:
            per_protocol = Counter(protocol for protocol, _, _ in plan.cases)
            protocols = tuple(p for p in ("clean", "type1", "type2") if per_protocol.get(p)) or protocols
            # the run's own order of defenders (plan.json keeps them sorted)
            order = [d.get("label") for d in run.manifest.get("defenders") or [] if isinstance(d, dict)]
            defenders = sorted(plan.defenders, key=lambda d: (order.index(d) if d in order else len(order), d))
            for model in plan.models:
                for defender in defenders:
                    for protocol in protocols:
                        planned[(model, defender, protocol)] = per_protocol.get(protocol, 0)
        stopped = run.manifest.get("stopped")
        return cls(planned, dict(done), protocols, str(stopped) if stopped else None)

    @property
    def planned_total(self) -> int | None:
        return sum(self.planned.values()) if self.planned else None

    @property
    def incomplete(self) -> bool:
        """Stopped early, or a planned cell holds fewer cases than planned."""
        return bool(self.stopped) or any(self.done.get(k, 0) < n for k, n in self.planned.items())

    def summary(self) -> str:
        """One sentence: incomplete, how many cases of how many, why it stopped."""
        held = sum(self.done.get(k, 0) for k in self.planned) if self.planned else sum(self.done.values())
        of = f" of {self.planned_total} planned" if self.planned_total is not None else ""
        why = f" (stopped early: {self.stopped})" if self.stopped else ""
        return (f"Incomplete run{why}: it holds {held}{of} cases. Rates over it describe the cases "
                "that ran, not the plan; the counts per protocol and defender are below.")

    def table(self) -> list[str]:
        """The ``## Coverage`` section: cases held / planned per model x defender x protocol."""
        cells = list(dict.fromkeys((m, d) for m, d, _ in self.planned)) or \
            list(dict.fromkeys((m, d) for m, d, _ in self.done))
        lines = ["## Coverage", "", "Cases held / planned:", "",
                 "| model | defender | " + " | ".join(self.protocols) + " | all |",
                 "|---|---|" + "---|" * (len(self.protocols) + 1)]
        for model, defender in cells:
            row = []
            for protocol in self.protocols:
                key = (model, defender, protocol)
                row.append(f"{self.done.get(key, 0)} / {self.planned[key]}" if key in self.planned
                           else str(self.done.get(key, 0)))
            held = sum(self.done.get((model, defender, p), 0) for p in self.protocols)
            plan = sum(self.planned.get((model, defender, p), 0) for p in self.protocols)
            row.append(f"{held} / {plan}" if self.planned else str(held))
            lines.append(f"| `{model}` | `{defender}` | " + " | ".join(row) + " |")
        totals = []
        for protocol in self.protocols:
            held = sum(n for (_, _, p), n in self.done.items() if p == protocol)
            plan = sum(n for (_, _, p), n in self.planned.items() if p == protocol)
            totals.append(f"{held} / {plan}" if self.planned else str(held))
        totals.append(f"{sum(self.done.values())} / {self.planned_total}" if self.planned
                      else str(sum(self.done.values())))
        lines += ["| all | | " + " | ".join(totals) + " |", ""]
        return lines


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "n>1M"

