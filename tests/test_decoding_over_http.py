"""``medmis run --decoding reference`` through the real google-genai, openai and anthropic clients.

The expected parameters are written out here from AI-in-Health/MedMisBench
``medmisbench_no_harness_eval.ipynb``: cell 4 (``TEMPERATURE = 1.0``, ``MAX_OUTPUT_TOKENS =
2048``, ``OPENAI_REASONING_EFFORT = "medium"``, ``GEMINI_REASONING_EFFORT = "high"``,
``CLAUDE_REASONING_EFFORT = "medium"``) and cell 6 (``GEMINI_SAFETY_SETTINGS``,
``gemini_reasoning_to_thinking_config``, ``anthropic_uses_adaptive_thinking``,
``build_sglang_extra_body``, ``call_gemini`` / ``call_openai`` / ``call_anthropic`` /
``call_sglang``). Whole bodies are kept as snapshots (``tests/snapshots/reference_*.json``;
regenerate after an intended change with ``MEDMIS_UPDATE_SNAPSHOTS=1``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
import test_paper_over_http as paper
from test_paper_over_http import DATA, N_ITEMS, SUBSET, Provider, answer_route, answer_text

from medmis.agents import ModelOptions
from medmis.agents._decoding import resolve, resolved_values
from medmis.experiments import Item, load_dataset
from medmis.experiments.cli import main
from medmis.experiments.records import read_records

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
Json = dict[str, Any]

fake_env = paper.fake_env  # the provider keys, as the paper snapshots set them


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return load_dataset(DATA, subset=SUBSET, limit=N_ITEMS).items


PROVIDERS = {
    "google": Provider(
        "google", "google/gemini-3.1-pro-preview", "https://gemini.test",
        r"https://gemini\.test/v1(beta)?/models/gemini-3\.1-pro-preview:generateContent",
        paper.gemini_user_text, paper.gemini_reply,
    ),
    "openai": Provider(
        "openai", "openai/gpt-5.4", None, r"https://api\.openai\.com/v1/chat/completions",
        paper.openai_user_text, paper.openai_reply,
    ),
    # the reference's SGLang path, with a Qwen model (build_sglang_extra_body)
    "openai_compatible": Provider(
        "openai_compatible", "openai/Qwen/Qwen3.6-35B-A3B", "http://127.0.0.1:30000/v1",
        r"http://127\.0\.0\.1:30000/v1/chat/completions",
        paper.openai_user_text, paper.openai_reply,
    ),
    "anthropic": Provider(
        "anthropic", "anthropic/claude-sonnet-4-6", None, r"https://api\.anthropic\.com/v1/messages",
        paper.anthropic_user_text, paper.anthropic_reply,
    ),
}

BLOCK_NONE = [  # GEMINI_SAFETY_SETTINGS, in the notebook's order
    {"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"},
    {"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"},
    {"category": "HARM_CATEGORY_SEXUALLY_EXPLICIT", "threshold": "BLOCK_NONE"},
    {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "threshold": "BLOCK_NONE"},
]


def run(provider: Provider, items: list[Item], out: Path, respx_mock: respx.MockRouter,
        *extra: str) -> list[Json]:
    bodies = answer_route(provider, items, respx_mock)
    argv = [
        "run", "--data", str(DATA), "--subset", SUBSET, "--limit", str(N_ITEMS),
        "--model", provider.spec, "--defender", "none", "--prompt", "paper", "--decoding", "reference",
        "--out", str(out), "--no-progress", "--max-retries", "0", "--max-connections", "1", *extra,
    ]  # fmt: skip
    if provider.base_url:
        argv += ["--model-base-url", provider.base_url]
    assert main(argv) == 0
    return bodies


def decoding_part(name: str, body: Json) -> Json:
    """The parameters the preset decides, as they appear in the body."""
    if name == "google":
        config = dict(body["generationConfig"])
        config.pop("responseMimeType"), config.pop("responseSchema")
        return {"generationConfig": config, "safetySettings": body["safetySettings"]}
    skip = {"model", "messages", "system", "response_format", "stream"}
    return {k: v for k, v in body.items() if k not in skip}


# the notebook's parameters per provider, written out by hand
EXPECTED: dict[str, Json] = {
    # call_gemini: temperature=TEMPERATURE, safety_settings=GEMINI_SAFETY_SETTINGS,
    # thinking_config=ThinkingConfig(thinking_level="high", include_thoughts=False); no cap, no seed
    # (google-genai writes the ThinkingConfig's own fields in snake case, for the notebook's call
    # too: test_gemini_reference_request_equals_the_sdk_call_the_notebook_makes)
    "google": {
        "generationConfig": {"temperature": 1.0, "thinkingConfig": {"include_thoughts": False, "thinking_level": "HIGH"}},
        "safetySettings": BLOCK_NONE,
    },
    # call_openai, gpt-5 branch: max_completion_tokens, reasoning_effort; no temperature, no seed
    "openai": {"max_completion_tokens": 2048, "reasoning_effort": "medium"},
    # call_sglang: temperature, max_tokens, extra_body chat_template_kwargs for Qwen/
    "openai_compatible": {"temperature": 1.0, "max_tokens": 2048,
                          "chat_template_kwargs": {"enable_thinking": False}},
    # call_anthropic: temperature, max_tokens, output_config effort, adaptive thinking
    "anthropic": {"temperature": 1.0, "max_tokens": 2048, "output_config": {"effort": "medium"},
                  "thinking": {"type": "adaptive"}},
}


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_reference_decoding_over_http(
    name: str, items: list[Item], tmp_path: Path, respx_mock: respx.MockRouter
) -> None:
    provider = PROVIDERS[name]
    bodies = run(provider, items, tmp_path / "run", respx_mock)
    assert len(bodies) == 3 * N_ITEMS
    for body in bodies:
        assert decoding_part(name, body) == EXPECTED[name], body
    records = read_records(tmp_path / "run" / "records.jsonl")
    assert all(r.error is None and r.choice == r.gold for r in records)

    canonical = sorted(bodies, key=lambda b: json.dumps(b, sort_keys=True))
    path = SNAPSHOTS / f"reference_{name}.json"
    if os.environ.get("MEDMIS_UPDATE_SNAPSHOTS"):
        path.write_text(json.dumps(canonical, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert canonical == json.loads(path.read_text(encoding="utf-8"))

    # the preset and every value it resolved to: manifest, fingerprint and report
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    decoding = manifest["decoding"]
    assert decoding["preset"] == "reference" and decoding["overrides"] == {}
    resolved = decoding["resolved"][provider.spec]
    assert resolved["seed"] is None
    assert manifest["fingerprint"]["decoding"] == {"preset": "reference", "overrides": {}}
    assert manifest["fingerprint"]["decoding_resolved"][provider.spec] == resolved
    report = (tmp_path / "run" / "report.md").read_text()
    assert "**Decoding:** `reference`" in report and f"`{provider.spec}`:" in report


GATEWAYS = {
    # LiteLLM / a company proxy in front of OpenAI, the same model id
    "litellm": ("openai/gpt-5.4", "https://litellm.gateway.test/v1", r"https://litellm\.gateway\.test/v1/chat/completions"),
    # Azure OpenAI's v1 endpoint (not an openai.com host)
    "azure": ("openai/o3", "https://medmis.openai.azure.com/openai/v1",
              r"https://medmis\.openai\.azure\.com/openai/v1/chat/completions"),
    # OpenRouter names the model vendor/model
    "openrouter": ("openai/openai/gpt-5.4", "https://openrouter.test/api/v1",
                   r"https://openrouter\.test/api/v1/chat/completions"),
}


@pytest.mark.parametrize("gateway", sorted(GATEWAYS))
def test_a_reasoning_model_behind_a_gateway_gets_openais_reasoning_fields(
    gateway: str, items: list[Item], tmp_path: Path, respx_mock: respx.MockRouter
) -> None:
    """The model id decides call_openai's reasoning branch, not the host (issue 30, item 8):
    ``max_completion_tokens`` and ``reasoning_effort``, never ``max_tokens`` (OpenAI refuses it
    for reasoning models) nor a temperature."""
    spec, base_url, url = GATEWAYS[gateway]
    provider = Provider(gateway, spec, base_url, url, paper.openai_user_text, paper.openai_reply)
    bodies = run(provider, items, tmp_path / "run", respx_mock)
    assert len(bodies) == 3 * N_ITEMS
    for body in bodies:
        assert body["model"] == spec.removeprefix("openai/")
        assert decoding_part("openai", body) == EXPECTED["openai"], body
    resolved = json.loads((tmp_path / "run" / "manifest.json").read_text())["decoding"]["resolved"][spec]
    assert resolved["reasoning_effort"] == "medium" and resolved["temperature"] is None


def test_a_cap_for_a_reasoning_model_behind_a_gateway_is_max_completion_tokens(
    items: list[Item], tmp_path: Path, respx_mock: respx.MockRouter
) -> None:
    """The paper preset with a cap, through a gateway: the cap's field follows the model too,
    and the body's decoding fields are those OpenAI's own host gets; a model outside the family
    keeps the SGLang path's ``max_tokens``."""
    spec, base_url, url = GATEWAYS["litellm"]
    provider = Provider("litellm", spec, base_url, url, paper.openai_user_text, paper.openai_reply)
    bodies = paper_run(provider, items, tmp_path / "run", respx_mock, "--max-output-tokens", "512")
    assert bodies and all(b.get("max_completion_tokens") == 512 and "max_tokens" not in b for b in bodies)
    direct = paper_run(PROVIDERS["openai"], items, tmp_path / "direct", respx_mock, "--max-output-tokens", "512")
    skip = {"response_format"}  # json_object on OpenAI's host, the schema elsewhere (not decoding)
    assert {json.dumps({k: v for k, v in decoding_part("openai", b).items() if k not in skip}) for b in bodies} \
        == {json.dumps({k: v for k, v in decoding_part("openai", b).items() if k not in skip}) for b in direct}
    qwen = PROVIDERS["openai_compatible"]
    bodies = paper_run(qwen, items, tmp_path / "qwen", respx_mock, "--max-output-tokens", "512")
    assert bodies and all(b.get("max_tokens") == 512 and "max_completion_tokens" not in b for b in bodies)


def paper_run(provider: Provider, items: list[Item], out: Path, respx_mock: respx.MockRouter,
              *extra: str) -> list[Json]:
    bodies = answer_route(provider, items, respx_mock)
    argv = ["run", "--data", str(DATA), "--subset", SUBSET, "--limit", str(N_ITEMS), "--model", provider.spec,
            "--defender", "none", "--prompt", "paper", "--out", str(out), "--no-progress", "--max-retries", "0",
            *(("--model-base-url", provider.base_url) if provider.base_url else ()), *extra]
    assert main(argv) == 0
    return bodies


def test_gemini_reference_request_equals_the_sdk_call_the_notebook_makes(
    items: list[Item], tmp_path: Path, respx_mock: respx.MockRouter
) -> None:
    """``call_gemini``'s ``GenerateContentConfig`` through the same SDK sends the same config."""
    from google import genai
    from google.genai import types

    ours = run(PROVIDERS["google"], items, tmp_path / "run", respx_mock)
    captured: list[Json] = []

    def capture(request: httpx.Request) -> httpx.Response:
        captured.append(json.loads(request.content))
        return httpx.Response(200, json=paper.gemini_reply(answer_text(items[0], "clean")))

    respx_mock.post(url__regex=r"https://reference\.test/.*").mock(side_effect=capture)
    client = genai.Client(api_key="k", http_options=types.HttpOptions(
        base_url="https://reference.test", httpx_client=httpx.Client()))
    safety = [types.SafetySetting(category=types.HarmCategory(c["category"]),
                                  threshold=types.HarmBlockThreshold.BLOCK_NONE) for c in BLOCK_NONE]
    client.models.generate_content(
        model="gemini-3.1-pro-preview",
        contents=paper.gemini_user_text(ours[0]),
        config=types.GenerateContentConfig(
            temperature=1.0, response_mime_type="application/json",
            response_schema=ours[0]["generationConfig"]["responseSchema"], safety_settings=safety,
            thinking_config=types.ThinkingConfig(thinking_level="high", include_thoughts=False),  # type: ignore[arg-type]
        ),
    )
    (reference,) = captured
    assert reference["safetySettings"] == ours[0]["safetySettings"]
    for key in ("temperature", "thinkingConfig", "responseMimeType"):
        assert reference["generationConfig"][key] == ours[0]["generationConfig"][key]
    assert "seed" not in reference["generationConfig"] and "maxOutputTokens" not in reference["generationConfig"]


def test_explicit_flags_override_the_reference_preset(
    items: list[Item], tmp_path: Path, respx_mock: respx.MockRouter
) -> None:
    bodies = run(PROVIDERS["openai"], items, tmp_path / "run", respx_mock,
                 "--reasoning-effort", "none", "--max-output-tokens", "512", "--temperature", "0",
                 "--model-seed", "7", "--seed", "3")
    for body in bodies:
        assert decoding_part("openai", body) == {"max_completion_tokens": 512, "reasoning_effort": "none",
                                                 "temperature": 0.0, "seed": 7}
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["decoding"]["overrides"] == {"temperature": 0.0, "max_output_tokens": 512,
                                                 "reasoning_effort": "none"}
    assert manifest["decoding"]["resolved"]["openai/gpt-5.4"]["seed"] == 7


def test_paper_preset_sends_no_seed_whatever_the_run_seed(
    items: list[Item], tmp_path: Path, respx_mock: respx.MockRouter
) -> None:
    """The run seed picks targets and reseeds the simulated examinee; no provider is sent it."""
    provider = paper.PROVIDERS["openai"]
    route_bodies = answer_route(provider, items, respx_mock)
    assert main(["run", "--data", str(DATA), "--subset", SUBSET, "--limit", "1", "--model", provider.spec,
                 "--defender", "none", "--seed", "5", "--out", str(tmp_path / "run"), "--no-progress",
                 "--max-retries", "0"]) == 0
    bodies = route_bodies
    assert bodies and all("seed" not in b and b["temperature"] == 0.0 for b in bodies)


def test_ablate_sends_no_run_seed_to_a_provider(
    items: list[Item], tmp_path: Path, respx_mock: respx.MockRouter
) -> None:
    provider = PROVIDERS["openai"]
    bodies = answer_route(provider, items, respx_mock)
    config = tmp_path / "grid.toml"
    config.write_text(
        f'data = "{DATA}"\nsubset = "{SUBSET}"\nlimit = 1\nseed = 9\ndecoding = "reference"\n'
        f'cache = "live"\nout = "{tmp_path / "abl"}"\n'
        '[[models]]\nspec = "openai/gpt-5.4"\n[[defenders]]\nname = "none"\n',
        encoding="utf-8",
    )
    assert main(["ablate", str(config), "--no-progress"]) == 0
    assert bodies
    for body in bodies:
        assert decoding_part("openai", body) == EXPECTED["openai"]


@pytest.mark.parametrize("decoding", ["paper", "reference"])
def test_simulated_examinee_ignores_decoding(tmp_path: Path, decoding: str) -> None:
    def answers(out: Path, *flags: str) -> list[tuple[str, str, str | None]]:
        assert main(["run", "--data", str(DATA), "--limit", "6", "--model", "mock/examinee", "--defender", "none",
                     "--out", str(out), "--no-progress", *flags]) == 0
        return sorted((r.item_id, r.protocol, r.choice) for r in read_records(out / "records.jsonl"))

    base = answers(tmp_path / "base")
    assert answers(tmp_path / "preset", "--decoding", decoding, "--temperature", "0.7") == base
    manifest = json.loads((tmp_path / "preset" / "manifest.json").read_text())
    assert manifest["decoding"]["resolved"]["mock/examinee"] == {"simulated": True, "seed": 0}


def test_run_seed_still_reseeds_the_simulated_examinee() -> None:
    opts = ModelOptions(run_seed=4)
    assert resolved_values("mock/examinee", opts) == {"simulated": True, "seed": 4}
    assert resolved_values("mock/examinee", ModelOptions(run_seed=4, seed=2)) == {"simulated": True, "seed": 2}
    from medmis.agents import load_model

    assert load_model("mock/examinee", opts).seed == 4  # type: ignore[attr-defined]
    assert load_model("mock/examinee", ModelOptions(run_seed=4, decoding="reference")).seed == 4  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("spec", "base_url", "expected"),
    [
        # gemini_reasoning_to_thinking_config: Gemini 2.5 "high" is a 24576-token budget
        ("google/gemini-2.5-pro", None, {"temperature": 1.0, "thinking_config": {"thinking_budget": 24576, "include_thoughts": False}}),
        # neither 2.5 nor 3: no thinking config
        ("google/gemini-2.0-flash", None, {"temperature": 1.0}),
        # call_openai, non-reasoning branch: max_tokens and temperature
        ("openai/gpt-4.1", None, {"temperature": 1.0, "max_output_tokens": 2048}),
        ("openai/o3", None, {"temperature": None, "max_output_tokens": 2048, "reasoning_effort": "medium"}),
        # build_sglang_extra_body: only Qwen/ and zai-org/GLM get enable_thinking false
        ("openai/google/medgemma-27b-text-it", "http://127.0.0.1:30000/v1", {"temperature": 1.0, "max_output_tokens": 2048}),
        ("openai/zai-org/GLM-5.1", "http://127.0.0.1:30000/v1",
         {"temperature": 1.0, "max_output_tokens": 2048, "chat_template_kwargs": {"enable_thinking": False}}),
        # anthropic_uses_adaptive_thinking: only Sonnet 4.6 and Opus 4.6 / 4.7
        ("anthropic/claude-haiku-4-5", None, {"temperature": 1.0, "max_output_tokens": 2048, "reasoning_effort": "medium"}),
        ("anthropic/claude-opus-4-7", None,
         {"temperature": 1.0, "max_output_tokens": 2048, "reasoning_effort": "medium", "thinking_budget": "adaptive"}),
    ],
)
def test_reference_values_per_model(spec: str, base_url: str | None, expected: Json,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    opts = ModelOptions(decoding="reference", base_url=base_url)
    got = resolved_values(spec, opts)
    assert {k: v for k, v in got.items() if v is not None and k not in ("seed", "safety_settings")} == \
        {k: v for k, v in expected.items() if v is not None}
    assert "temperature" in got and got["temperature"] == expected["temperature"]
    assert resolve(spec, ModelOptions(decoding="paper")).temperature == 0.0


def test_resume_checks_the_decoding_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = ["run", "--data", str(DATA), "--limit", "2", "--model", "mock/examinee", "--defender", "none",
            "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    # a folder written before decoding presets existed resumes as `paper`
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    for key in ("decoding", "decoding_resolved"):
        del manifest["fingerprint"][key]
    path.write_text(json.dumps(manifest))
    assert main(argv) == 0
    capsys.readouterr()
    # another preset into the same folder is refused, naming the field
    assert main([*argv, "--decoding", "reference"]) == 2
    err = capsys.readouterr().err
    assert "decoding" in err and len(err.strip().splitlines()) == 1


def test_a_models_own_options_go_through_the_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ablation's ``[[models]]`` entry (``RunConfig.model_variants``) is resolved like any
    model: its own options win, the preset decides the rest (merging them must not turn the
    run's defaults into explicit values)."""
    from medmis.experiments import RunConfig
    from medmis.experiments.harness import DefenderConfig, ModelVariant
    from medmis.experiments.harness._fingerprint import run_fingerprint

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    spec = "openai/gpt-4.1"
    config = RunConfig(
        data=str(DATA), models=[spec, f"{spec}@short", f"{spec}@untempered"],
        model_variants={f"{spec}@short": ModelVariant(spec=spec, options={"max_output_tokens": 64}),
                        f"{spec}@untempered": ModelVariant(spec=spec, options={"temperature": None})},
        model_options=ModelOptions(decoding="reference"), defenders=[DefenderConfig(name="none")], out="unused",
    )
    resolved = run_fingerprint(config, [], None).decoding_resolved
    assert (resolved[spec]["temperature"], resolved[spec]["max_output_tokens"]) == (1.0, 2048)
    assert (resolved[f"{spec}@short"]["temperature"], resolved[f"{spec}@short"]["max_output_tokens"]) == (1.0, 64)
    assert (resolved[f"{spec}@untempered"]["temperature"], resolved[f"{spec}@untempered"]["max_output_tokens"]) == \
        (None, 2048)
    assert all(v["seed"] is None for v in resolved.values())  # the run seed is never sent
