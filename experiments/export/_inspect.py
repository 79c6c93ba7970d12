"""``medmis export inspect RUN``: one Inspect AI eval log per model x defender.

The logs are built with ``inspect_ai.log``'s own types and written by its ``write_eval_log``,
so ``inspect view`` and ``read_eval_log`` open them as they open an Inspect run. A sample is
one record of the run's plan: its input is the first model call's messages, its messages the
last model call's conversation and reply (from the trace), its output the defender's answer,
its scores ``correct`` (C/I), ``flipped`` (1/0, a Type 1 or Type 2 case whose item was answered
correctly clean) and ``targeted`` (1/0, a Type 1 case answered with the injected option),
exactly as :func:`medmis.experiments.analysis.indicator_maps` defines them for the
metrics. Every model call is a ``ModelEvent``, every web-tool call a ``ToolEvent``; the
metrics of ``metrics.json`` are the log's results (value, with ``k``, ``n`` and the interval
as parameters), the Type 1 attack success rate first and as the headline. Each log's task is
the defender (``medmis/<defender>``, its label and options in the task args, a
``defender:<label>`` tag), so a listing of the logs tells the defenders apart.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medmis.tools import ConfigError

if TYPE_CHECKING:
    from medmis.experiments.records import Record

__all__ = ["HEADLINE", "INSTALL_HINT", "SCORERS", "export_inspect"]

INSTALL_HINT = "medmis export inspect needs Inspect AI: pip install 'medmis[inspect]'"

SCORERS: dict[str, tuple[str, ...]] = {
    "flipped": ("type1_asr", "type1_asr_item", "type2_asr"),
    "correct": ("clean_acc", "type1_acc", "type2_acc", "type2_recovery", "unparsed_rate", "error_rate"),
    "targeted": ("type1_tasr",),
}
"""Each score of a sample and the ``metrics.json`` metrics shown under it in the results. The
attack success rate comes first: it is the log's headline (what a log listing shows)."""

HEADLINE = (("flipped", "type1_asr"), ("flipped", "type2_asr"), ("correct", "clean_acc"))
"""The headline metric of a log, the first of these the run has a value for."""


def _inspect() -> Any:
    try:
        import inspect_ai.log as log
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return log


def export_inspect(run_dir: str | Path, out: str | Path | None = None) -> list[Path]:
    """Write ``OUT/<model>__<defender>.eval`` for every (model, defender) of the run.

    Args:
        run_dir: A run folder (``records.jsonl``, ``manifest.json``, ``metrics.json``, ``traces/``).
        out: Folder for the logs (default ``RUN_DIR/inspect``).

    Returns:
        The paths written, in the run's order of models and defenders.

    Raises:
        ConfigError: Inspect AI is not installed, or the folder holds no run.
    """
    _inspect()  # before anything is read or created
    from ._run import read_run

    run = read_run(run_dir)
    run.all_metrics()  # a missing metrics.json stops here, before anything is created
    target = Path(out) if out is not None else run.dir / "inspect"
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for (model, defender), records in run.cells().items():
        path = target / f"{_slug(model)}__{_slug(defender)}.eval"
        log = _eval_log(run, model, defender, records)
        _inspect().write_eval_log(log, str(path), format="eval")
        paths.append(path)
    return paths


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "_"


def _eval_log(run: Any, model: str, defender: str, records: Sequence[Record]) -> Any:
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSpec, EvalStats, HeadlineMetric
    from inspect_ai.model import ModelUsage

    from medmis.experiments.analysis import indicator_maps

    manifest = run.manifest
    traces = run.traces(model, defender)
    maps = indicator_maps(records)
    samples = [_sample(r, traces.get(r.key), maps) for r in records]
    dataset = manifest.get("dataset") or {}
    results = _results(run.metrics(model, defender), samples)
    headline = next((HeadlineMetric(scorer=scorer, score=scorer, metric=name) for scorer, name in HEADLINE
                     if any(sc.name == scorer and name in sc.metrics for sc in results.scores)), None)
    results.headline = headline
    options = next((d.get("options") for d in manifest.get("defenders") or []
                    if isinstance(d, dict) and d.get("label") == defender), None)
    created = str(manifest.get("created") or "1970-01-01T00:00:00+00:00")
    ident = hashlib.sha256(f"{run.dir.resolve()}\0{model}\0{defender}".encode()).hexdigest()[:22]
    spec = EvalSpec(
        eval_id=ident, run_id=hashlib.sha256(str(run.dir.resolve()).encode()).hexdigest()[:22],
        # the defender is the task here: a log listing tells the defenders apart by task name,
        # args and tags, not only by the solver field it rarely shows
        task_id=ident, created=created, task=f"medmis/{defender}", task_display_name=f"medmis: {defender}",
        task_version=0, task_args={"defender": defender, "defender_options": options or {}},
        task_args_passed={"defender": defender}, solver=defender, solver_args=options or {},
        tags=["medmis", f"defender:{defender}"] + (["simulated"] if manifest.get("simulated") else []),
        dataset=EvalDataset(name=Path(str(dataset.get("source") or "data")).name,
                            location=str(dataset.get("source") or ""), samples=len(records)),
        model=model, config=EvalConfig(), headline_metric=headline,
        packages={"medmis": str((manifest.get("versions") or {}).get("medmis") or "")},
        metadata={"simulated": bool(manifest.get("simulated")), "protocols": manifest.get("protocols"),
                  "prompt": manifest.get("prompt"), "seed": manifest.get("seed"),
                  "fingerprint": manifest.get("fingerprint")},
    )
    usage = ModelUsage(input_tokens=sum(r.usage.input_tokens for r in records),
                       output_tokens=sum(r.usage.output_tokens for r in records))
    usage.total_tokens = usage.input_tokens + usage.output_tokens
    outcome = manifest.get("outcome") or {}
    return EvalLog(
        version=2, status="success" if outcome.get("exit_code", 0) in (0, 1) else "cancelled",
        eval=spec, results=results,
        stats=EvalStats(started_at=created, completed_at=str(manifest.get("updated") or created),
                        model_usage={model: usage}),
        samples=samples,
    )


def _results(metrics: Mapping[str, Any], samples: Sequence[Any]) -> Any:
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore

    scores = []
    for scorer, names in SCORERS.items():
        shown = {}
        for name in names:
            block = metrics.get(name)
            if not isinstance(block, dict) or block.get("value") is None:
                continue  # undefined on this run (no unit): nothing to show
            shown[name] = EvalMetric(name=name, value=float(block["value"]),
                                     params={k: block.get(k) for k in ("k", "n", "lo", "hi", "unit")})
        scored = sum(1 for s in samples if s.scores and scorer in s.scores)
        scores.append(EvalScore(name=scorer, scorer=scorer, scored_samples=scored,
                                unscored_samples=len(samples) - scored, metrics=shown))
    completed = sum(1 for s in samples if s.error is None)
    return EvalResults(total_samples=len(samples), completed_samples=completed, scores=scores,
                       metadata={"cost": metrics.get("cost"), "paired": metrics.get("paired")})


def _sample(record: Record, trace: Mapping[str, Any] | None, maps: Mapping[str, Mapping[Any, bool]]) -> Any:
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import ModelOutput, ModelUsage
    from inspect_ai.scorer import CORRECT, INCORRECT, Score

    from medmis.experiments.analysis import item_key, unit_key

    steps = [s for s in (trace or {}).get("steps") or [] if isinstance(s, dict)]
    calls = [s for s in steps if s.get("kind") == "model"]
    first = _messages(calls[0].get("input")) if calls else []
    messages = (_messages(calls[-1].get("input")) + _messages([calls[-1].get("output")])) if calls else []
    unit = unit_key(record)
    scores: dict[str, Any] | None = None
    if record.error is None:
        scores = {"correct": Score(value=CORRECT if maps[f"{record.protocol}_acc"].get(unit) else INCORRECT,
                                   answer=record.choice)}
        asr = maps.get(f"{record.protocol}_asr") or {}
        if unit in asr:
            scores["flipped"] = Score(value=int(asr[unit]), answer=record.choice)
        if unit in maps["type1_tasr"]:
            scores["targeted"] = Score(value=int(maps["type1_tasr"][unit]), answer=record.choice,
                                       metadata={"target": record.target})
    usage = ModelUsage(input_tokens=record.usage.input_tokens, output_tokens=record.usage.output_tokens,
                       total_tokens=record.usage.input_tokens + record.usage.output_tokens)
    output = ModelOutput.from_content(model=record.model, content=str((trace or {}).get("raw") or record.choice or ""))
    output.usage = usage
    sample_id = f"{record.protocol}:{item_key(record)}" + (f":{record.target}" if record.target else "")
    return EvalSample(
        id=sample_id, epoch=record.epoch + 1, input=first or item_key(record), target=record.gold,
        messages=messages, output=output, scores=scores, model_usage={record.model: usage},
        metadata={"protocol": record.protocol, "subset": record.subset, "item_id": record.item_id,
                  "target": record.target, "choice": record.choice, "method": record.method,
                  "content_type": record.content_type, "provenance": record.provenance,
                  "llm_calls": record.llm_calls, "tool_calls": record.tool_calls,
                  "latency_s": record.latency_s, "extra": record.extra,
                  # a poisoned run's exposure, as in records.jsonl: cited = a poisoned page among extra.sources
                  **({"poison": record.poison.model_dump()} if record.poison is not None else {})},
        events=_events(record.model, steps), total_time=record.latency_s,
        error=EvalError(message=record.error, traceback="", traceback_ansi="") if record.error else None,
    )


def _events(model: str, steps: Iterable[Mapping[str, Any]]) -> list[Any]:
    from inspect_ai.event import ModelEvent, ToolEvent
    from inspect_ai.model import GenerateConfig, ModelOutput, ModelUsage
    from inspect_ai.tool import ToolCallError

    events: list[Any] = []
    for i, step in enumerate(steps):
        if step.get("kind") == "model":
            raw = step.get("output")
            reply: dict[str, Any] = raw if isinstance(raw, dict) else {}
            output = ModelOutput.from_content(model=model, content=_text(reply.get("content")),
                                              error=step.get("error"))
            used = step.get("usage") or {}
            output.usage = ModelUsage(input_tokens=int(used.get("input_tokens") or 0),
                                      output_tokens=int(used.get("output_tokens") or 0),
                                      total_tokens=int(used.get("input_tokens") or 0) + int(used.get("output_tokens") or 0))
            events.append(ModelEvent(model=model, input=_messages(step.get("input")), tools=[], tool_choice="auto",
                                     config=GenerateConfig(), output=output, error=step.get("error"),
                                     cache="read" if step.get("cache_hit") else None,
                                     working_time=float(step.get("latency_s") or 0.0),
                                     metadata={"name": step.get("name")}))
        elif step.get("kind") == "tool":
            given = step.get("input")
            args: dict[str, Any] = given if isinstance(given, dict) else {"input": given}
            error = step.get("error")
            events.append(ToolEvent(id=f"{step.get('name')}-{i}", function=str(step.get("name")), arguments=args,
                                    result=_text(step.get("output")) if step.get("output") is not None else "",
                                    error=ToolCallError("unknown", str(error)) if error else None,
                                    working_time=float(step.get("latency_s") or 0.0)))
    return events


def _text(content: Any) -> str:
    """A trace's message content as text (provider content blocks: their text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") if isinstance(b, dict) and isinstance(b.get("text"), str) else
                 (b if isinstance(b, str) else json.dumps(b, ensure_ascii=False, default=str)) for b in content]
        return "\n".join(p for p in parts if p)
    return "" if content is None else json.dumps(content, ensure_ascii=False, default=str)


def _messages(raw: Any) -> list[Any]:
    """Trace messages (``message_to_dict``: LangChain roles) as Inspect chat messages."""
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
    )
    from inspect_ai.tool import ToolCall

    out: list[Any] = []
    for m in raw if isinstance(raw, list) else []:
        if not isinstance(m, dict):
            continue
        role, text = m.get("role"), _text(m.get("content"))
        if role == "system":
            out.append(ChatMessageSystem(content=text))
        elif role in ("ai", "assistant"):
            calls = [ToolCall(id=str(c.get("id") or f"call-{j}"), function=str(c.get("name")),
                              arguments=dict(c["args"]) if isinstance(c.get("args"), dict) else {})
                     for j, c in enumerate(m.get("tool_calls") or []) if isinstance(c, dict)]
            out.append(ChatMessageAssistant(content=text, tool_calls=calls or None, model=None))
        elif role == "tool":
            out.append(ChatMessageTool(content=text, tool_call_id=m.get("tool_call_id")))
        else:
            out.append(ChatMessageUser(content=text))
    return out
