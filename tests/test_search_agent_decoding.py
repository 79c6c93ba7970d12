"""The paper's search agent over the real openai client (respx): the planner in JSON mode with
the reference harness's retry and fallback, and each call's temperature and output cap.

Source: AI-in-Health/MedMisBench ``medmisbench_tool_harness_eval.ipynb``, cell 6:
``UnifiedLLMClient.chat`` (``temperature=0.2``, ``max_tokens=4096`` defaults), ``chat_json``
(``response_format="json_object"``, then once more without it), ``_chat_openai_compat`` /
``_tools_openai_compat`` (``gpt-5``/``o*``: ``max_completion_tokens`` and
``reasoning_effort``, no temperature; otherwise ``max_tokens`` and ``temperature``),
``SimplifiedSearchHarness.build_plan`` (``chat_json(..., temperature=0.1)``, the fallback plan
on any failure), ``run`` (``chat_with_tools(temperature=0.1, max_tokens=4096)``) and
``_force_final_answer`` (``chat(temperature=0.0, max_tokens=2048)``). The whole bodies are
kept as a snapshot (``tests/snapshots/search_agent_paper_openai.json``; regenerate with
``MEDMIS_UPDATE_SNAPSHOTS=1``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from conftest import clear_provider_env

from medmis.experiments.cli import main
from medmis.graphs._search_paper import (
    FINALIZER_SYSTEM_PROMPT,
    PLANNER_SYSTEM_PROMPT,
    fallback_plan,
)

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "medmisbench_sample.jsonl"
SNAPSHOT = Path(__file__).resolve().parent / "snapshots" / "search_agent_paper_openai.json"
URL = r"https://api\.openai\.com/v1/chat/completions"
PLAN = {"objective": "GCS floor", "queries": ["glasgow coma scale lowest score"],
        "visit_focus": [], "success_criteria": ["a guideline"]}
Json = dict[str, Any]


@pytest.fixture(autouse=True)
def fake_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_provider_env(monkeypatch, "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def completion(content: str | None, tool_calls: list[Json] | None = None) -> Json:
    message: Json = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_760_000_000, "model": "m",
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }  # fmt: skip


def kind(body: Json) -> str:
    system = body["messages"][0]["content"]
    if system == PLANNER_SYSTEM_PROMPT:
        return "plan_json" if "response_format" in body else "plan"
    if system == FINALIZER_SYSTEM_PROMPT:
        return "final"
    assert "tools" in body
    return "agent"


def server(plan_json: Callable[[], httpx.Response], plan: Callable[[], httpx.Response]
           ) -> tuple[list[Json], Callable[[httpx.Request], httpx.Response]]:
    bodies: list[Json] = []

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        k = kind(body)
        if k == "plan_json":
            return plan_json()
        if k == "plan":
            return plan()
        if k == "agent":  # one search, then the budget (max_iterations=1) sends it to the finaliser
            call = {"id": "call_1", "type": "function",
                    "function": {"name": "search_web", "arguments": json.dumps({"query": "glasgow coma scale"})}}
            return httpx.Response(200, json=completion(None, [call]))
        return httpx.Response(200, json=completion("Each component scores at least 1. The answer is [3]"))

    return bodies, handle


def run(tmp_path: Path, respx_mock: respx.MockRouter, handle: Callable[[httpx.Request], httpx.Response],
        *extra: str, spec: str = "openai/gpt-test") -> list[Json]:
    respx_mock.post(url__regex=URL).mock(side_effect=handle)
    argv = ["run", "--data", str(DATA), "--subset", "MEDMISHLE", "--limit", "1", "--protocol", "type1",
            "--model", spec, "--defender", "search_agent",
            "--defender-option", "search_agent.preset=paper", "--defender-option", "search_agent.max_iterations=1",
            "--out", str(tmp_path / "run"), "--no-progress", "--max-retries", "0", "--max-connections", "1", *extra]
    assert main(argv) == 0
    return [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]


def settings(body: Json) -> Json:
    keep = ("temperature", "max_tokens", "max_completion_tokens", "reasoning_effort", "response_format", "seed")
    return {k: body[k] for k in keep if k in body}


def test_planner_json_mode_retry_and_per_call_settings(tmp_path: Path, respx_mock: respx.MockRouter) -> None:
    """JSON mode first; a reply with no JSON is asked again without it (the harness's
    chat_json), and that plan is used; each call carries the harness's settings."""
    bodies, handle = server(lambda: httpx.Response(200, json=completion("I will plan the research.")),
                            lambda: httpx.Response(200, json=completion("```json\n" + json.dumps(PLAN) + "\n```")))
    (record,) = run(tmp_path, respx_mock, handle)
    assert [kind(b) for b in bodies] == ["plan_json", "plan", "agent", "final"]
    assert [settings(b) for b in bodies] == [
        {"temperature": 0.1, "max_completion_tokens": 4096, "response_format": {"type": "json_object"}},
        {"temperature": 0.1, "max_completion_tokens": 4096},
        {"temperature": 0.1, "max_completion_tokens": 4096},
        {"temperature": 0.0, "max_completion_tokens": 2048},
    ]
    assert record["error"] is None and record["choice"] == "3"
    assert record["extra"]["plan"]["queries"] == PLAN["queries"]  # parsed from the second reply

    if os.environ.get("MEDMIS_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(json.dumps(bodies, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert bodies == json.loads(SNAPSHOT.read_text(encoding="utf-8"))


def test_planner_falls_back_after_two_failures(tmp_path: Path, respx_mock: respx.MockRouter) -> None:
    """A JSON-mode call the server refuses, then a reply with no JSON: the fallback plan."""
    refused = {"error": {"message": "response_format is not supported", "type": "invalid_request_error"}}
    bodies, handle = server(lambda: httpx.Response(400, json=refused),
                            lambda: httpx.Response(200, json=completion("no plan today")))
    (record,) = run(tmp_path, respx_mock, handle)
    assert [kind(b) for b in bodies] == ["plan_json", "plan", "agent", "final"]
    assert record["error"] is None and record["choice"] == "3"
    agent_user = json.loads(bodies[2]["messages"][1]["content"])
    assert record["extra"]["plan"] == agent_user["initial_plan"] == fallback_plan(agent_user["question"])
    (trace_file,) = (tmp_path / "run" / "traces").glob("*.jsonl")
    steps = json.loads(trace_file.read_text().splitlines()[0])["steps"]
    names = [s["name"] for s in steps if s["kind"] == "node"]
    assert names[:2] == ["plan_retry", "plan_fallback"]
    # the JSON-mode call's refusal, noted (LangChain names its openai.BadRequestError subclass)
    assert "Error code: 400 - response_format is not supported" in steps[1]["output"]["reason"]


def test_reasoning_model_gets_no_temperature_under_the_reference_preset(
    tmp_path: Path, respx_mock: respx.MockRouter
) -> None:
    """gpt-5.4 under --decoding reference: the harness's caps as max_completion_tokens, the
    preset's reasoning effort, no temperature (``_chat_openai_compat`` for ``gpt-5``)."""
    bodies, handle = server(lambda: httpx.Response(200, json=completion(json.dumps(PLAN))),
                            lambda: httpx.Response(500))
    run(tmp_path, respx_mock, handle, "--decoding", "reference", spec="openai/gpt-5.4")
    assert [kind(b) for b in bodies] == ["plan_json", "agent", "final"]
    assert [settings(b) for b in bodies] == [
        {"max_completion_tokens": 4096, "reasoning_effort": "medium", "response_format": {"type": "json_object"}},
        {"max_completion_tokens": 4096, "reasoning_effort": "medium"},
        {"max_completion_tokens": 2048, "reasoning_effort": "medium"},
    ]


def test_call_decoding_run_sends_the_runs_decoding(tmp_path: Path, respx_mock: respx.MockRouter) -> None:
    """``search_agent.call_decoding=run``: every call as the run's preset and flags say (the
    planner still asks for JSON mode)."""
    bodies, handle = server(lambda: httpx.Response(200, json=completion(json.dumps(PLAN))),
                            lambda: httpx.Response(500))
    run(tmp_path, respx_mock, handle, "--decoding", "reference",
        "--defender-option", "search_agent.call_decoding=run", spec="openai/gpt-4.1")
    assert [settings(b) for b in bodies] == [
        {"temperature": 1.0, "max_completion_tokens": 2048, "response_format": {"type": "json_object"}},
        {"temperature": 1.0, "max_completion_tokens": 2048},
        {"temperature": 1.0, "max_completion_tokens": 2048},
    ]


def test_gemini_and_claude_map_the_per_call_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemini: temperature, maxOutputTokens and JSON mode as response_mime_type (the harness
    reaches Gemini through its OpenAI-compatible endpoint with json_object); Claude: the cap
    and temperature, no JSON mode (the harness sends none), temperature 1 kept while thinking."""
    from langchain_core.messages import HumanMessage

    from medmis.agents import ModelOptions, load_model

    monkeypatch.setenv("GOOGLE_API_KEY", "k")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    gemini = load_model("google/gemini-3.1-pro-preview", ModelOptions(decoding="reference"))
    config = gemini.request_config(None, settings={"temperature": 0.1, "max_output_tokens": 4096, "json_mode": True})  # type: ignore[attr-defined]
    assert (config.temperature, config.max_output_tokens, config.response_mime_type) == (0.1, 4096, "application/json")
    assert config.thinking_config.thinking_level.value == "HIGH"  # the preset's, kept

    messages = [HumanMessage("plan")]
    plain = load_model("anthropic/claude-test", ModelOptions())
    body = plain._get_request_payload(messages, call_settings={"temperature": 0.0, "max_output_tokens": 2048, "json_mode": True})  # type: ignore[attr-defined]
    assert (body["temperature"], body["max_tokens"]) == (0.0, 2048) and "response_format" not in body
    thinking = load_model("anthropic/claude-sonnet-4-6", ModelOptions(decoding="reference"))
    body = thinking._get_request_payload(messages, call_settings={"temperature": 0.1, "max_output_tokens": 4096})  # type: ignore[attr-defined]
    # (langchain-anthropic carries a thinking model's temperature in extra_body: the wire body's top level)
    sent = {**body.get("extra_body", {}), **{k: v for k, v in body.items() if k != "extra_body"}}
    assert (sent["temperature"], sent["max_tokens"], sent["thinking"]) == (1.0, 4096, {"type": "adaptive"})
