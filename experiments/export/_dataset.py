"""``medmis export parquet RUN``: a run as a results dataset a lab can publish.

The folder is laid out as a Hugging Face dataset repository: ``data/records.parquet`` (the
planned records, one row each, as the metrics read them), ``data/metrics.parquet`` (one row per
model x defender x metric, overall and per stratum), ``data/cost.parquet`` (tokens, calls,
latency and dollars per model x defender), the run's ``manifest.json``, ``metrics.json`` and
``verdict.json`` as they are, and a ``README.md`` dataset card whose YAML header names a config
per table (``configs:`` with its ``data_files``), the license, tags and a pretty name.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CONFIGS", "export_parquet"]

CONFIGS = ("records", "metrics", "cost")
"""The dataset's configs, one Parquet file each under ``data/``."""

_SIMULATED = ("These results come from the SIMULATED EXAMINEE (`mock/examinee`), not from a model: "
              "they exercise the pipeline only and are not model measurements. Do not cite them.")


def export_parquet(run_dir: str | Path, out: str | Path | None = None, *, license: str = "other") -> list[Path]:
    """Write the dataset folder (default ``RUN_DIR/dataset``); the paths written.

    Raises:
        CliError: The folder holds no run, or its report (``metrics.json``) was never written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from medmis.experiments.harness import connect, planned_records_view

    from ._run import read_run

    run = read_run(run_dir)
    metrics = run.all_metrics()
    target = Path(out) if out is not None else run.dir / "dataset"
    (target / "data").mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    con = connect()
    try:
        planned_records_view(con, run.dir)  # the records of the plan, as the metrics read them
        records = target / "data" / "records.parquet"
        select = "SELECT * EXCLUDE (pos) FROM records ORDER BY pos"
        exposure = _poison_rows(run.records)
        if exposure is not None:  # a poisoned run: each case's exposure as columns of its own
            con.register("__medmis_poison", exposure)
            select = (f"SELECT r.* EXCLUDE (pos), {', '.join(f'p.{c}' for c in POISON_COLUMNS)} "
                      "FROM records r LEFT JOIN __medmis_poison p ON r.model = p.model AND "
                      "r.defender = p.defender AND r.protocol = p.protocol AND r.subset = p.subset AND "
                      "r.item_id = p.item_id AND r.target IS NOT DISTINCT FROM p.target ORDER BY r.pos")
        con.execute(f"COPY ({select}) TO '{_sql_path(records)}' (FORMAT PARQUET)")
        written.append(records)
    finally:
        con.close()
    for name, rows in (("metrics", list(_metric_rows(metrics))), ("cost", list(_cost_rows(metrics)))):
        path = target / "data" / f"{name}.parquet"
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
             "item_id": r.item_id, "target": r.target,
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


def _proportions(block: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for name, value in block.items():
        if isinstance(value, dict) and "value" in value and "n" in value:
            yield name, value


def _metric_rows(metrics: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for model, by_defender in metrics.items():
        for defender, block in (by_defender or {}).items():
            scopes = [(None, None, block)] + [
                (kind, name, sub) for kind, groups in (block.get("strata") or {}).items()
                for name, sub in (groups or {}).items()]
            for kind, name, scope in scopes:
                for metric, p in _proportions(scope):
                    yield {"model": model, "defender": defender, "stratum_kind": kind, "stratum": name,
                           "metric": metric, **{c: p.get(c) for c in
                                                ("value", "k", "n", "lo", "hi", "unit", "clusters", "deff")}}


def _cost_rows(metrics: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    fields = _cost_schema().names[2:]
    for model, by_defender in metrics.items():
        for defender, block in (by_defender or {}).items():
            cost = block.get("cost") or {}
            yield {"model": model, "defender": defender, **{c: cost.get(c) for c in fields}}


def dataset_card(run: Any, *, license: str = "other") -> str:
    """The ``README.md`` of the dataset: YAML front matter, then a short description of the run."""
    import yaml

    m = run.manifest
    cells = run.cells()
    models = list(dict.fromkeys(model for model, _ in cells))
    defenders = list(dict.fromkeys(defender for _, defender in cells))
    items = len({r.item_key for r in run.records})
    simulated = bool(m.get("simulated")) or any(x.startswith("mock/examinee") for x in models)
    name = run.dir.resolve().name
    header = {
        "pretty_name": f"MedMis run {name}" + (" (simulated examinee)" if simulated else ""),
        "license": license,
        "language": ["en"],
        "tags": ["medmis", "medical", "misinformation", "robustness", "evaluation"]
                + (["simulated"] if simulated else []),
        "task_categories": ["question-answering"],
        "size_categories": [_size_category(len(run.records))],
        "configs": [{"config_name": c, "data_files": [{"split": "train", "path": f"data/{c}.parquet"}],
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
    lines += [
        "Results of one MedMis evaluation run (the `medmis` toolkit): "
        "each model answered each item clean, with one false sentence (Type 1) and with the item's "
        "mixed context (Type 2), through each defender.", "",
        f"- models: {', '.join(f'`{x}`' for x in models)}",
        f"- defenders: {', '.join(f'`{x}`' for x in defenders)}",
        f"- records: {len(run.records)} ({items} items; protocols {', '.join(m.get('protocols') or [])})",
        f"- data: `{Path(str(dataset.get('source') or '?')).name}` (sha256 `{str(dataset.get('sha256') or '?')[:16]}`)",
        f"- prompt: `{prompt.get('name', '?')}@{prompt.get('version', '?')}`, seed {m.get('seed', '?')}",
        f"- medmis: {(m.get('versions') or {}).get('medmis', '?')}",
        *_poison_line(m), *_ambient_line(m), "",
        "## Configs", "",
        "| config | file | one row per |", "|---|---|---|",
        "| `records` | `data/records.parquet` | graded case: model, defender, protocol, item, target, choice, correct, tokens |",
        "| `metrics` | `data/metrics.parquet` | model x defender x metric (overall and per stratum): value, k, n, 95% interval |",
        "| `cost` | `data/cost.parquet` | model x defender: tokens, calls, latency, dollars |", "",
        "`manifest.json` (settings and fingerprint), `metrics.json` and `verdict.json` are the run's own files.",
        "", "```python", "from datasets import load_dataset", "",
        'records = load_dataset("path/or/hub-id", "records", split="train")', "```", "",
    ]
    return "\n".join(lines)


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "n>1M"

