"""``medmis review sample``: a stratified, seeded sample of a run's Type 1 cases, assigned to
reviewers with a requested share of dual-rated tasks.

The population is every graded Type 1 case (no error, a trace kept) of the chosen models and
defenders: flipped and non-flipped alike, so the sample mirrors the run as the paper's review
cohort mirrors the benchmark. Outcomes follow the metrics' one definition: a Type 1 case with no
parsed answer is in the population and, when the clean answer was right, is ``flipped`` (as in
Type 1 ASR); an unparsed clean answer makes the case ``no_clean``. So the population's
``flipped / (flipped + held)`` is the run's Type 1 ASR (``pack.json``: ``population_outcomes``). Cases are grouped by the ``--stratify`` keys and
the sample size is split across groups in proportion to their size (largest remainders, ties
broken by the seed); within a group, cases are drawn without replacement. Task ids follow a
seeded shuffle, so a reviewer does not meet the cases grouped by defender.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medmis.experiments.benchmark import Record
from medmis.experiments.records import read_records
from medmis.experiments.reporting import SIMULATED_STATEMENT, is_simulated
from medmis.tools import json_file

from ._keys import DEFAULT_REVIEWERS, DEFAULT_STRATIFY, STRATA
from ._pack import (
    PACK_FILE,
    PACK_VERSION,
    TASKS_FILE,
    Outcome,
    ReviewError,
    Task,
    atomic_write,
)
from ._rubrics import UNLABELLED, definition_of
from ._traces import CaseKey, collect_traces, injected_sentence, reasoning_lines


def _outcome(record: Record, clean: Record | None) -> Outcome:
    # the metrics' definition: an unparsed clean answer is neither held nor wrong; an unparsed
    # answer under attack (choice None, correct None) is a flip
    if clean is None or clean.correct is None or clean.choice is None:
        return "no_clean"
    if not clean.correct:
        return "clean_wrong"
    return "held" if record.correct and record.choice is not None else "flipped"


def _stratum(record: Record, outcome: str, keys: Sequence[str]) -> tuple[str, ...]:
    values = {"subset": record.subset, "content": record.content_type or UNLABELLED,
              "provenance": record.provenance or UNLABELLED, "model": record.model,
              "defender": record.defender, "outcome": outcome}
    return tuple(values[k] for k in keys)


def allocate(sizes: dict[tuple[str, ...], int], n: int, rng: random.Random) -> dict[tuple[str, ...], int]:
    """Split ``n`` across strata in proportion to their sizes (Hamilton's largest remainders).

    Ties between equal remainders are broken by ``rng``, so equal seeds give equal samples.
    """
    total = sum(sizes.values())
    quotas = {s: n * size / total for s, size in sizes.items()}
    out = {s: math.floor(q) for s, q in quotas.items()}
    order = sorted(sizes)
    rng.shuffle(order)
    order.sort(key=lambda s: quotas[s] - out[s], reverse=True)  # stable: shuffled ties stay shuffled
    for s in order[: n - sum(out.values())]:
        out[s] += 1
    return out


def assign_reviewers(n: int, reviewers: Sequence[str], dual: float, rng: random.Random) -> list[list[str]]:
    """Reviewers per task: ``round(dual * n)`` tasks get two distinct reviewers, the rest one;
    each task goes to the least-loaded reviewers (ties broken by ``rng``)."""
    n_dual = math.floor(dual * n + 0.5)
    if n_dual and len(reviewers) < 2:
        raise ReviewError(f"--dual {dual} needs at least two reviewers; got {len(reviewers)}")
    dual_tasks = set(rng.sample(range(n), n_dual))
    load = dict.fromkeys(reviewers, 0)
    out: list[list[str]] = []
    for i in range(n):
        ranked = sorted(reviewers, key=lambda r: (load[r], rng.random()))
        chosen = ranked[: 2 if i in dual_tasks else 1]
        for r in chosen:
            load[r] += 1
        out.append(sorted(chosen, key=list(reviewers).index))
    return out


def _population(records: list[Record], models: Sequence[str] | None, defenders: Sequence[str] | None,
                ) -> tuple[list[tuple[Record, Outcome]], Counter[str]]:
    for flag, wanted, present in (("--models", models, {r.model for r in records}),
                                  ("--defenders", defenders, {r.defender for r in records})):
        unknown = sorted(set(wanted or ()) - present)
        if unknown:
            raise ReviewError(f"{flag}: not in this run: {', '.join(unknown)} "
                              f"(the run has {', '.join(sorted(present))})")
    chosen = [r for r in records if (not models or r.model in models)
              and (not defenders or r.defender in defenders)]
    clean = {(r.model, r.defender, r.item_id): r for r in chosen
             if r.protocol == "clean" and r.error is None}
    excluded: Counter[str] = Counter()
    population: list[tuple[Record, Outcome]] = []
    for r in chosen:
        if r.protocol != "type1":
            continue
        if r.error is not None:
            excluded["case error"] += 1
        elif not r.target or not r.trace_file:
            excluded["no target or no trace"] += 1
        else:
            population.append((r, _outcome(r, clean.get((r.model, r.defender, r.item_id)))))
    return population, excluded


def _task(task_id: str, reviewers: list[str], record: Record, outcome: Outcome, clean: Record | None,
          trace: dict[str, Any], question: tuple[str, dict[str, str]]) -> Task:
    assert record.target is not None
    sentence = injected_sentence(trace, record.target)
    if sentence is None:
        raise ReviewError(f"trace of {record.model} · {record.defender} · item {record.item_id} "
                          f"target {record.target} holds no injected sentence for the target")
    return Task(
        task_id=task_id, reviewers=reviewers, model=record.model, defender=record.defender,
        item_id=record.item_id, subset=record.subset, question=question[0], options=question[1],
        gold=record.gold, target=record.target, injected=sentence,
        content=record.content_type, content_definition=definition_of("content", record.content_type),
        provenance=record.provenance,
        provenance_definition=definition_of("provenance", record.provenance),
        choice=record.choice, auto_correct=bool(record.correct),
        clean_choice=clean.choice if clean else None, outcome=outcome,
        response=str(trace.get("raw") or ""), reasoning=reasoning_lines(trace),
        defender_options=record.defender_options,
    )


def sample_pack(
    run_dir: str | Path,
    out: str | Path,
    *,
    n: int,
    models: Sequence[str] | None = None,
    defenders: Sequence[str] | None = None,
    stratify: Sequence[str] = DEFAULT_STRATIFY,
    dual: float = 0.7,
    reviewers: Sequence[str] = DEFAULT_REVIEWERS,
    seed: int = 0,
) -> dict[str, Any]:
    """Draw a review pack from a run folder and write ``OUT/tasks.jsonl`` and ``OUT/pack.json``.

    Args:
        run_dir: A run folder (``records.jsonl`` and ``traces/``).
        out: The pack folder to create; it must not hold a pack already.
        n: Number of tasks.
        models: Only these models (default: all in the run).
        defenders: Only these defender labels (default: all in the run).
        stratify: Keys of :data:`STRATA` to stratify by (none: a simple random sample).
        dual: Share of tasks rated by two reviewers, 0-1.
        reviewers: Reviewer names, in panel order.
        seed: Seed of every random choice; equal inputs and seed give an identical pack.

    Returns:
        The contents of ``pack.json``.

    Raises:
        ReviewError: Bad arguments, a run without eligible cases, fewer cases than ``n``, or a
            folder that already holds a pack. Nothing is written then.
    """
    run, pack = Path(run_dir), Path(out)
    if n < 1:
        raise ReviewError(f"--n must be at least 1, got {n}")
    if not 0.0 <= dual <= 1.0:
        raise ReviewError(f"--dual must be between 0 and 1, got {dual}")
    bad = [k for k in stratify if k not in STRATA]
    if bad:
        raise ReviewError(f"--stratify: unknown key(s) {', '.join(bad)} (use {', '.join(STRATA)})")
    if len(set(reviewers)) != len(reviewers) or not reviewers:
        raise ReviewError("reviewer names must be given and distinct")
    if (pack / TASKS_FILE).exists():
        raise ReviewError(f"{pack} already holds a review pack; choose a new --out")
    if not (run / "records.jsonl").is_file():
        raise ReviewError(f"{run}: no records.jsonl here")
    try:
        records = read_records(run / "records.jsonl")
    except ValueError as exc:
        raise ReviewError(str(exc)) from exc
    from medmis.experiments.records import describe_outside, keep_planned

    records, outside = keep_planned(run, records)  # a case the run never planned is not reviewed
    records = jury_graded(run, records)
    if outside.count:
        print(f"medmis: {describe_outside(run / 'records.jsonl', outside)}", file=sys.stderr)
    population, excluded = _population(records, models, defenders)
    if len(population) < n:
        raise ReviewError(f"{run}: {len(population)} eligible Type 1 case(s), fewer than --n {n}"
                          + (f" (excluded: {dict(excluded)})" if excluded else ""))

    rng = random.Random(seed)
    groups: dict[tuple[str, ...], list[tuple[Record, Outcome]]] = defaultdict(list)
    for rec, outcome in population:
        groups[_stratum(rec, outcome, stratify)].append((rec, outcome))
    quota = allocate({s: len(g) for s, g in groups.items()}, n, rng)
    chosen: list[tuple[Record, Outcome]] = []
    for s in sorted(groups):
        members = sorted(groups[s], key=lambda ro: (ro[0].model, ro[0].defender, ro[0].item_id, ro[0].target or ""))
        chosen.extend(rng.sample(members, quota[s]))
    rng.shuffle(chosen)
    assigned = assign_reviewers(n, reviewers, dual, rng)

    files: dict[str, set[CaseKey]] = defaultdict(set)
    for rec, _ in chosen:
        assert rec.trace_file is not None
        files[rec.trace_file].add((rec.model, rec.defender, "type1", rec.item_id, rec.target))
    traces, questions = collect_traces(run, files)
    clean = {(r.model, r.defender, r.item_id): r for r in records if r.protocol == "clean" and r.error is None}
    width = max(3, len(str(n)))
    tasks = [
        _task(f"T{i:0{width}d}", assigned[i - 1], rec, outcome, clean.get((rec.model, rec.defender, rec.item_id)),
              traces[(rec.model, rec.defender, "type1", rec.item_id, rec.target)], questions[rec.item_id])
        for i, (rec, outcome) in enumerate(chosen, 1)
    ]
    text = "".join(t.model_dump_json() + "\n" for t in tasks)
    simulated = _run_simulated(run) or is_simulated(t.model for t in tasks)
    info: dict[str, Any] = {
        "version": PACK_VERSION,
        "pack_id": hashlib.sha256(text.encode("utf-8")).hexdigest()[:16],
        # every form of the pack shows this statement, and the analysis repeats it
        "simulated": simulated, **({"simulated_statement": SIMULATED_STATEMENT} if simulated else {}),
        "run": str(run), "n": n, "seed": seed, "dual": dual, "stratify": list(stratify),
        "models": list(models or []), "defenders": list(defenders or []), "reviewers": list(reviewers),
        "population": len(population), "excluded": dict(excluded),
        "population_outcomes": dict(Counter(outcome for _, outcome in population)),
        "dual_rated": sum(len(r) > 1 for r in assigned),
        "load": {r: sum(r in a for a in assigned) for r in reviewers},
        "outcomes": dict(Counter(t.outcome for t in tasks)),
        "strata": [{"stratum": dict(zip(stratify, s, strict=True)), "population": len(groups[s]),
                    "sampled": quota[s]} for s in sorted(groups)],
    }
    pack.mkdir(parents=True, exist_ok=True)
    atomic_write(pack / TASKS_FILE, text)
    atomic_write(pack / PACK_FILE, json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    return info


def jury_graded(run: Path, records: list[Record]) -> list[Record]:
    """An open-ended run's records graded by its rubric jury (``medmis grade``): free text has no
    choice to compare with the key, so the jury's reading decides correct and flipped; other runs'
    records as they are.

    Raises:
        ReviewError: An open-ended run that has not been graded.
    """
    from medmis.experiments.grading import graded_records, read_grades
    from medmis.experiments.records import answer_format_of

    if answer_format_of(run) != "open":
        return records
    manifest = json_file(run / "manifest.json")
    block, grades = manifest.get("grading"), read_grades(run)
    if not isinstance(block, dict) or not grades:
        raise ReviewError(f"{run}: an open-ended run is sampled after it is graded (medmis grade {run} --rubrics ...)")
    return graded_records(records, grades, [str(j) for j in block["judges"]], float(block["threshold"]))


def _run_simulated(run: Path) -> bool:
    """The run manifest's ``simulated`` flag (False when the folder has no readable manifest)."""
    try:
        manifest = json_file(run / "manifest.json")
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("simulated") is True
