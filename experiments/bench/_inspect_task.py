"""The throughput workload as an Inspect AI task, for the bench's ``inspect`` section.

The same chat completions the ``throughput`` section's lean client sends (three per item: the
question alone, with one passage, with two), as a plain ``generate()`` task with no scorer,
so ``inspect eval`` and ``medmis run`` make the same number of calls against the same server::

    python -m inspect_ai eval _inspect_task.py@throughput -T data=items.jsonl --model openai/bench \\
        --model-base-url http://127.0.0.1:PORT/v1 -M responses_api=false \\
        --max-connections 32 --max-retries 0 --display none --log-format json --log-dir logs

Requires the ``inspect`` extra (``inspect_ai``); nothing else in the toolkit imports this file.
"""

from __future__ import annotations

import json
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.solver import generate


def prompts(data: str) -> list[str]:
    """The user messages for the items in ``data`` (JSONL in the released schema)."""
    out: list[str] = []
    with Path(data).open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            options = "\n".join(f"{k[-1].upper()}. {row[k]}" for k in ("opa", "opb", "opc", "opd"))
            for context in ("", row["injectb"] + "\n\n", row["injecta"] + " " + row["injectb"] + "\n\n"):
                out.append(f"{context}Question: {row['question']}\n{options}\nAnswer with the letter.")
    return out


@task
def throughput(data: str) -> Task:
    """One ``generate()`` per prompt of :func:`prompts`, unscored."""
    samples = [Sample(input=text, id=i) for i, text in enumerate(prompts(data))]
    return Task(dataset=MemoryDataset(samples), solver=generate())
