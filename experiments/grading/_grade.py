"""``medmis grade RUN_DIR``: every criterion of every answer, graded by every judge, resumably.

Writes ``RUN_DIR/grades.jsonl`` (one line per record x judge x criterion) and a ``grading`` block
in ``RUN_DIR/manifest.json`` (the rubric file's sha256, the judges, the threshold, the judge
prompt's version). A second ``medmis grade`` on the folder grades only what is missing (or whose
judge reply could not be read); changing the rubric file, the judges, the threshold or the
prompt version is refused, as the run's fingerprint refuses a changed run. Judge calls go through
the run's record/replay store (``--cache``), with the toolkit's retry policy.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medmis.experiments.records import Record, answer_format_of, read_records
from medmis.tools import ConfigError, InputError, json_file, json_value

from ._defaults import DEFAULT_THRESHOLD, GRADES_FILE
from ._prompt import JUDGE_PROMPT_VERSION, judge_prompt, read_verdict
from ._rubrics import Criterion, RubricSet, load_rubrics

GradeKey = tuple[str, str, str, str, str | None, str, str]
"""model, defender, protocol, item key, target, judge, criterion id."""


@dataclass(frozen=True)
class GradeSettings:
    """What ``medmis grade`` is told (see the module docstring)."""

    run_dir: Path
    rubrics: Path
    judges: tuple[str, ...]
    threshold: float = DEFAULT_THRESHOLD
    cache: str = "live"
    cache_dir: Path | None = None
    max_connections: int = 8
    max_retries: int = 4
    judge_base_urls: dict[str, str] = field(default_factory=dict)


def judge_endpoints(settings: GradeSettings) -> dict[str, str | None]:
    """Each judge's server (flag or environment; credentials, query and fragment stripped), as
    the run fingerprint records a model's: the same spec at another server is another judge."""
    from medmis.agents import ModelOptions, effective_base_url
    from medmis.experiments.harness import bare_url

    return {spec: bare_url(effective_base_url(spec, ModelOptions(base_url=settings.judge_base_urls.get(spec))))
            for spec in settings.judges}


def grading_block(settings: GradeSettings, rubrics: RubricSet) -> dict[str, Any]:
    """The manifest's ``grading`` block: what a resume must match."""
    return {"rubrics": {"file": Path(settings.rubrics).name, "sha256": rubrics.sha256},
            "judges": list(settings.judges), "endpoints": judge_endpoints(settings), "threshold": settings.threshold,
            "judge_prompt": JUDGE_PROMPT_VERSION,
            "simulated_judges": [j for j in settings.judges if j.startswith("mock/")]}


def _differs(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    checks = {"rubric file": (old.get("rubrics", {}).get("sha256"), new["rubrics"]["sha256"]),
              "judges": (old.get("judges"), new["judges"]), "threshold": (old.get("threshold"), new["threshold"]),
              # a block written before endpoints were recorded is not compared on them
              "judge endpoints": (old.get("endpoints", new["endpoints"]), new["endpoints"]),
              "judge prompt": (old.get("judge_prompt"), new["judge_prompt"])}
    return [name for name, (a, b) in checks.items() if a != b]


def answer_text(run_dir: Path, record: Record, traces: dict[str, dict[tuple[Any, ...], str]]) -> str | None:
    """The free-text answer of ``record``: its ``raw`` field (an open-ended run's records hold
    it), else the ``raw`` of its trace in the run's ``traces/`` file (the last one for its key)."""
    if record.raw is not None:
        return record.raw
    if not record.trace_file:
        return None
    if record.trace_file not in traces:
        found: dict[tuple[Any, ...], str] = {}
        path = run_dir / record.trace_file
        if path.is_file():
            with path.open(encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        obj = json_value(line, path, None)
                    except ValueError:
                        continue  # a torn last line of a killed run
                    if isinstance(obj, dict) and isinstance(obj.get("raw"), str):
                        found[(obj.get("model"), obj.get("defender"), obj.get("protocol"), obj.get("item_id"),
                               obj.get("target"))] = obj["raw"]
        traces[record.trace_file] = found
    return traces[record.trace_file].get(
        (record.model, record.defender, record.protocol, record.item_id, record.target))


def grade_key(line: dict[str, Any]) -> GradeKey:
    return (str(line["model"]), str(line["defender"]), str(line["protocol"]),
            f"{line['subset']}/{line['item_id']}", line.get("target"), str(line["judge"]), str(line["criterion"]))


def read_grades(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every grade line of a run folder, the last per key (a regraded unreadable reply replaces
    the first); a torn last line is skipped."""
    path = Path(run_dir) / GRADES_FILE
    if not path.is_file():
        return []
    out: dict[GradeKey, dict[str, Any]] = {}
    lines = path.read_bytes().split(b"\n")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = json_value(raw, path, number)
        except ValueError:
            if number == len(lines) or (number == len(lines) - 1 and not lines[-1].strip()):
                continue
            raise
        out[grade_key(obj)] = obj
    return list(out.values())


@dataclass
class _Job:
    record: Record
    answer: str
    question: str | None
    criterion: Criterion
    judge: str


def plan(settings: GradeSettings) -> tuple[RubricSet, dict[str, Any], list[_Job], int]:
    """Check everything and list what is left to grade; nothing is written.

    Returns:
        The rubrics, the grading block, the jobs, and how many records were left out (errors).

    Raises:
        ConfigError: Fewer than two judges, a threshold outside [0, 1], a changed grading.
        InputError: Not a finished open-ended run folder, or an item without a rubric.
    """
    run_dir = settings.run_dir
    if len(set(settings.judges)) < 2:
        raise ConfigError("a jury needs at least two different judges (--judge SPEC --judge SPEC)")
    if not 0.0 <= settings.threshold <= 1.0:
        raise ConfigError(f"--threshold {settings.threshold:g} is outside [0, 1]")
    manifest_path = run_dir / "manifest.json"
    if not manifest_path.is_file():
        raise InputError(f"{run_dir} is not a run folder (no manifest.json)")
    manifest = json_file(manifest_path)
    if answer_format_of(run_dir) != "open":
        raise InputError(f"{run_dir} is not an open-ended run (answer_format is not \"open\"); only free-text answers are graded")
    rubrics = load_rubrics(settings.rubrics)
    block = grading_block(settings, rubrics)
    previous = manifest.get("grading")
    if isinstance(previous, dict):
        diff = _differs(previous, block)
        if diff:
            raise ConfigError(f"{run_dir} was graded with another {', '.join(diff)}; grade a copy of the run folder "
                              f"or remove {GRADES_FILE} and the manifest's grading block")
    records = read_records(run_dir / "records.jsonl")
    if not records:
        raise InputError(f"{run_dir} has no records to grade")
    missing = sorted({r.item_id for r in records if r.item_id not in rubrics.items})
    if missing:
        raise InputError(f"{settings.rubrics}: no rubric for {len(missing)} item(s) of the run, e.g. {missing[0]!r}")
    done = {k for k, g in ((grade_key(g), g) for g in read_grades(run_dir)) if g.get("met") is not None}
    jobs: list[_Job] = []
    skipped = 0
    traces: dict[str, dict[tuple[Any, ...], str]] = {}
    for record in records:
        if record.error is not None:
            skipped += 1  # errors are never graded as answers
            continue
        text = answer_text(run_dir, record, traces)
        if text is None:
            raise InputError(f"{run_dir}: no free-text answer for {record.key} (neither the record nor its trace holds one)")
        rubric = rubrics.items[record.item_id]
        for criterion in rubric.for_case(record.protocol, record.target):
            for judge in settings.judges:
                key = (*record.case_key, judge, criterion.id)  # an open run has one epoch
                if key not in done:
                    jobs.append(_Job(record, text, rubric.question, criterion, judge))
    return rubrics, block, jobs, skipped


def _order_grades(settings: GradeSettings, rubrics: RubricSet) -> None:
    """Rewrite ``grades.jsonl`` in a fixed order (records as in ``records.jsonl``, then criteria
    as in the rubric, then judges as given), one line per key, atomically: calls finish in any
    order, and a replayed grading must write the same bytes as the recorded one."""
    run_dir = settings.run_dir
    position = {r.case_key: n for n, r in enumerate(read_records(run_dir / "records.jsonl"))}
    judge = {j: n for n, j in enumerate(settings.judges)}

    def rank(line: dict[str, Any]) -> tuple[int, int, int, str]:
        key = grade_key(line)
        rubric = rubrics.items.get(str(line["item_id"]))
        crit = [c.id for c in rubric.criteria] if rubric else []
        return (position.get(key[:5], len(position)),
                crit.index(key[6]) if key[6] in crit else len(crit), judge.get(key[5], len(judge)), repr(key))

    lines = sorted(read_grades(run_dir), key=rank)
    path = run_dir / GRADES_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(g, ensure_ascii=False) + "\n" for g in lines), encoding="utf-8")
    os.replace(tmp, path)


def _write_block(run_dir: Path, block: dict[str, Any]) -> None:
    path = run_dir / "manifest.json"
    manifest = json_file(path)
    manifest["grading"] = block
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _judges(settings: GradeSettings) -> dict[str, Any]:
    from medmis.agents import ModelOptions, load_model
    from medmis.tools import RecordStore, attach_cache

    store = None
    if settings.cache != "live":
        store = RecordStore(settings.cache_dir or settings.run_dir / "cache", settings.cache)  # type: ignore[arg-type]
    models = {}
    for spec in settings.judges:
        # judges grade at temperature 0, as HealthBench's grader samples deterministically where it can
        chat = load_model(spec, ModelOptions(temperature=0.0, base_url=settings.judge_base_urls.get(spec)))
        models[spec] = attach_cache(chat, store) if store is not None else chat
    return models


async def _grade(settings: GradeSettings, jobs: Sequence[_Job], models: dict[str, Any]) -> int:
    from langchain_core.messages import HumanMessage

    from medmis.agents import AdaptiveLimiter, RetryPolicy, content_text, retry_async

    policy = RetryPolicy(max_retries=settings.max_retries)
    # the harness's limiter: at most --max-connections judge calls in flight, fewer after 429s
    limiter = AdaptiveLimiter(max(1, settings.max_connections))
    errors = 0
    path = settings.run_dir / GRADES_FILE

    async def one(job: _Job, fh: Any) -> None:
        nonlocal errors
        prompt = judge_prompt(job.question, job.answer, job.criterion.text, job.criterion.points)
        model = models[job.judge]
        usage: dict[str, int] = {}
        try:
            message = await retry_async(lambda: limiter.run(lambda: model.ainvoke([HumanMessage(prompt)])), policy)
            reply, error = content_text(message.content), None
            meta = getattr(message, "usage_metadata", None) or {}
            usage = {"input_tokens": int(meta.get("input_tokens", 0)), "output_tokens": int(meta.get("output_tokens", 0))}
        except Exception as exc:  # provider and SDK failures after the retry policy gave up: on the line, never a verdict
            reply, error = "", f"{type(exc).__name__}: {exc}"[:300]
        verdict = read_verdict(reply) if error is None else None
        r = job.record
        line = {"model": r.model, "defender": r.defender, "protocol": r.protocol, "item_id": r.item_id,
                "subset": r.subset, "target": r.target, "judge": job.judge, "criterion": job.criterion.id,
                "kind": job.criterion.kind, "points": job.criterion.points,
                "met": verdict.met if verdict else None,
                "explanation": verdict.explanation if verdict else "",
                "reply": reply, "error": error or (verdict.error if verdict else None),
                "judge_prompt": JUDGE_PROMPT_VERSION, "usage": usage}
        errors += line["error"] is not None
        fh.write(json.dumps(line, ensure_ascii=False) + "\n")
        fh.flush()

    try:
        with path.open("a", encoding="utf-8") as fh:
            await asyncio.gather(*(one(j, fh) for j in jobs))
    finally:
        from medmis.agents import aclose_transports

        await aclose_transports()
    return errors


def grade(settings: GradeSettings) -> tuple[int, str]:
    """Grade a run folder; returns ``(exit code, one-line summary)``.

    Raises:
        ConfigError, InputError, UserFileError: Before anything is written (exit 2).
    """
    return asyncio.run(grade_async(settings))


async def grade_async(settings: GradeSettings) -> tuple[int, str]:
    """:func:`grade` inside a running event loop (``medmis ablate``'s ``[grading]``)."""
    from medmis.experiments.harness import RunLock

    _rubrics, block, jobs, skipped = plan(settings)
    models = _judges(settings)  # a bad spec or a missing key stops here, before any write
    # the run's own lock: no second `medmis grade`, and no `medmis run` appending records, meanwhile
    with RunLock(settings.run_dir):
        _rubrics, block, jobs, skipped = plan(settings)  # again, under the lock
        _write_block(settings.run_dir, block)
        errors = await _grade(settings, jobs, models) if jobs else 0
        if jobs:
            _order_grades(settings, _rubrics)
    note = f"; {skipped} record(s) with errors not graded" if skipped else ""
    sim = " (simulated judges)" if block["simulated_judges"] else ""
    if errors:
        return 1, f"graded {len(jobs) - errors} of {len(jobs)} criterion verdicts{sim}; {errors} failed (run medmis grade again){note}"
    return 0, f"graded {len(jobs)} criterion verdicts{sim} into {settings.run_dir / GRADES_FILE}{note}"


def judges_of(lines: Iterable[dict[str, Any]]) -> list[str]:
    """The judges named in grade lines, in first-appearance order."""
    return list(dict.fromkeys(str(g["judge"]) for g in lines))
