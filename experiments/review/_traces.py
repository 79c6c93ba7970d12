"""What a reviewer reads about a case, recovered from the run's ``traces/*.jsonl``.

The trace of a case holds the exact messages sent and the raw output (see
:mod:`medmis.experiments.reporting._cases`, which reads them the same way for the HTML report).
The question and options are parsed from a prompt the model saw; when no prompt of the item
parses (a defender with its own prompt format), the run's data file named in ``manifest.json``
is read instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from medmis.agents import content_text
from medmis.experiments.benchmark import DataError, load_dataset
from medmis.experiments.reporting import question_from_trace
from medmis.tools import json_file, json_value

from ._pack import ReviewError, TraceLine

STEP_LIMIT = 4000
"""Characters kept per reasoning step in a task; the run's traces keep everything."""

CaseKey = tuple[str, str, str, str, str | None]  # model, defender, protocol, item_id, target


def clip_text(text: str, limit: int = STEP_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[… {len(text) - limit} more characters in the run's trace]"


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def read_trace_lines(path: Path, wanted: set[CaseKey] | None, items: set[str]) -> dict[CaseKey, dict[str, Any]]:
    """The last trace per key in one file, for ``wanted`` keys and for any key of ``items``.

    A torn last line of a killed run is skipped, as the report does.
    """
    out: dict[CaseKey, dict[str, Any]] = {}
    if not path.is_file():
        return out
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                obj = json_value(line, path, None)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            key: CaseKey = (str(obj.get("model")), str(obj.get("defender")), str(obj.get("protocol")),
                            str(obj.get("item_id")), obj.get("target"))
            if (wanted is not None and key in wanted) or key[3] in items:
                out[key] = obj  # --retry-errors appends a fresh trace: the last one is the record's
    return out


def injected_sentence(trace: Mapping[str, Any], target: str) -> str | None:
    """The false sentence delivered for ``target`` in a Type 1 trace."""
    context = [c for c in trace.get("context") or [] if isinstance(c, dict)]
    for c in context:
        if c.get("option") == target and not c.get("truthful"):
            return str(c.get("text", ""))
    return None


def reasoning_lines(trace: Mapping[str, Any]) -> list[TraceLine]:
    """The defender's steps as reviewers see them: model outputs, tool calls with their results
    or errors, and the answer extraction; prompts are left out (the task shows the question)."""
    lines: list[TraceLine] = []
    for step in trace.get("steps") or []:
        if not isinstance(step, dict):
            continue
        kind, name = str(step.get("kind", "")), str(step.get("name", ""))
        output = step.get("output")
        if kind == "model":
            text = ""
            if isinstance(output, dict):
                content = output.get("content")
                text = content_text(content) if isinstance(content, (str, list)) else _json(content or "")
                for call in output.get("tool_calls") or []:
                    if isinstance(call, dict):
                        text += f"\n→ calls {call.get('name')}({_json(call.get('args', {}))})"
            elif output is not None:
                text = _json(output)
        elif kind == "tool":
            text = f"{name}({_json(step.get('input') or {})})\n"
            text += f"error: {step['error']}" if step.get("error") else f"→ {_json(output)}"
        elif kind == "extract":
            out = output if isinstance(output, dict) else {}
            text = f"answer extracted: {out.get('choice')} ({out.get('method')})"
        else:
            text = _json(output) if output is not None else ""
        if step.get("error") and kind != "tool":
            text += f"\nerror: {step['error']}"
        lines.append(TraceLine(kind=kind, name=name, text=clip_text(text.strip())))
    return lines


def questions_from_data(run_dir: Path, items: Iterable[str]) -> dict[str, tuple[str, dict[str, str]]]:
    """Question and options of ``items`` from the data file the run's manifest names, if any."""
    try:
        manifest = json_file(run_dir / "manifest.json")
    except (OSError, ValueError):
        return {}
    config = manifest.get("config") if isinstance(manifest, dict) else None
    data = config.get("data") if isinstance(config, dict) else None
    if not isinstance(config, dict) or not isinstance(data, str) or not Path(data).exists():
        return {}  # a hub address or a file that has moved: nothing to read offline
    try:
        dataset = load_dataset(data, subset=config.get("subset"), mode="skip")
    except DataError:
        return {}
    wanted = set(items)
    return {it.id: (it.question, dict(it.options)) for it in dataset.items if it.id in wanted}


def collect_traces(run_dir: Path, files: Mapping[str, set[CaseKey]]) -> tuple[
        dict[CaseKey, dict[str, Any]], dict[str, tuple[str, dict[str, str]]]]:
    """Each wanted case's trace, and each of their items' question and options.

    Args:
        run_dir: The run folder.
        files: Trace file (relative to the run) -> the case keys wanted from it.

    Returns:
        (trace per case key, (question, options) per item id).

    Raises:
        ReviewError: A wanted case has no trace, or an item's question cannot be recovered.
    """
    items = {key[3] for keys in files.values() for key in keys}
    traces: dict[CaseKey, dict[str, Any]] = {}
    questions: dict[str, tuple[str, dict[str, str]]] = {}

    def take(found: dict[CaseKey, dict[str, Any]]) -> None:
        # clean prompts first: they carry the question without any injected text
        for key, trace in sorted(found.items(), key=lambda kv: kv[0][2] != "clean"):
            if key[3] not in questions and (q := question_from_trace(trace)):
                questions[key[3]] = q

    wanted_all = {k for keys in files.values() for k in keys}
    for rel, keys in files.items():
        found = read_trace_lines(run_dir / rel, keys, items)
        traces.update({k: v for k, v in found.items() if k in keys})
        take(found)
    missing_q = items - set(questions)
    if missing_q:  # other defenders' prompts of the same items may parse
        for path in sorted((run_dir / "traces").glob("*.jsonl")):
            if str(path.relative_to(run_dir)) not in files:
                take(read_trace_lines(path, None, missing_q))
        missing_q = items - set(questions)
    if missing_q:
        questions.update(questions_from_data(run_dir, missing_q))
        missing_q = items - set(questions)
    problems = [f"{run_dir}: no trace for {k[0]} · {k[1]} · item {k[3]} target {k[4]}"
                for k in sorted(wanted_all - set(traces), key=str)]
    problems += [f"{run_dir}: cannot recover the question of item {i} from traces or the run's data"
                 for i in sorted(missing_q)]
    if problems:
        raise ReviewError(f"{run_dir}: {len(problems)} sampled case(s) cannot be shown to reviewers\n"
                          + "\n".join(problems))
    return traces, questions
