"""Credentials never reach disk: URL userinfo, query keys, key-shaped strings, configured keys."""

from __future__ import annotations

import pytest

from medmis.tools import configured_secrets, redact, redact_obj, scrub_url


@pytest.mark.parametrize(
    ("text", "leak"),
    [
        # shapes as the providers echo them in 401 bodies and SDK errors
        ('Error code: 401 - {"error": {"message": "Incorrect API key provided: '
         'sk-proj-abcdefghijklmnop1234. You can find your API key"}}', "sk-proj-abcdefghijklmnop1234"),
        ("API key not valid. Please pass a valid API key. key=AIzaSyA1234567890abcdefghijklmnopqrstu",
         "AIzaSyA1234567890abcdefghijklmnopqrstu"),
        ("{'x-goog-api-key': 'AIzaSyBxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}", "AIzaSyBxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
        ("Authorization: Bearer tvly-abcdefghijklmnopq", "tvly-abcdefghijklmnopq"),
        ('{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key: '
         'sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWXYZ"}}', "sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
        ("Authorization: Bearer jina_abcdefghijklmnopqrstuvwx", "jina_abcdefghijklmnopqrstuvwx"),
        ("GET https://google.serper.dev/search?apiKey=0123456789abcdef", "0123456789abcdef"),
        ("connect to http://alice:s3cr3t-pw@gateway.internal:8000/v1 failed", "s3cr3t-pw"),
    ],
)
def test_key_shapes_are_masked(text: str, leak: str) -> None:
    out = redact(text, [])
    assert leak not in out
    assert "***" in out


def test_configured_values_are_masked_whatever_their_shape() -> None:
    env = {"SERPER_API_KEY": "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "OPENAI_API_KEY": "short"}
    secrets = configured_secrets(env)
    assert "0f1e2d3c4b5a69788796a5b4c3d2e1f0" in secrets
    assert "MGYxZTJkM2M0YjVhNjk3ODg3OTZhNWI0YzNkMmUxZjA=" in secrets  # its base64 form
    assert not any("short" in s for s in secrets)  # too-short values are not masked
    assert redact("bad key 0f1e2d3c4b5a69788796a5b4c3d2e1f0 (401)", secrets) == "bad key *** (401)"


def test_ordinary_text_is_left_alone() -> None:
    text = "The guideline's authorization section says sk-ing is fine; tokens=5, key point: B."
    assert redact(text, []) == text


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://user:pass@host:8000/v1", "http://host:8000/v1"),
        ("https://gw.example/v1?api_key=abc123&x=1", "https://gw.example/v1?api_key=***&x=1"),
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ],
)
def test_scrub_url(url: str, expected: str) -> None:
    assert scrub_url(url) == expected


def test_redact_obj_walks_json() -> None:
    obj = {"error": "401 sk-abcdefghijklmnopqrstu", "n": 3, "steps": [{"url": "http://u:p@h/x"}]}
    assert redact_obj(obj, []) == {"error": "401 ***", "n": 3, "steps": [{"url": "http://***@h/x"}]}


def test_redact_obj_masks_values_under_credential_names() -> None:
    obj = {"model_options": {"extra": {"api_key": "plain-value", "auth_token": "abc", "key": "k1"}},
           "usage": {"input_tokens": 5, "max_tokens": "10"}, "tokenizer": "bpe", "keys": "a"}
    assert redact_obj(obj, []) == {
        "model_options": {"extra": {"api_key": "***", "auth_token": "***", "key": "***"}},
        "usage": {"input_tokens": 5, "max_tokens": "10"}, "tokenizer": "bpe", "keys": "a",
    }


def test_the_quick_pass_skips_only_text_no_pattern_can_match(monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    from medmis.tools import _redact

    pieces = ["sk-", "sk-proj-", "AIza", "tvly-", "jina_", "Bearer ", "BEARER\t", "apı_key=", "APİ-KEY: ",
              "x-api-key", "Authorization: ", "?key=", "&token=", "https://", "user:pw@", "@", "=", "K",
              "ſ", "a" * 20, "Z9_-" * 9, " ", "\n", "é", "Final answer: B", '"', ":",
           "Basic ", "basic\t", "dXNlcjpwYXNz", "c2NpZW5jZQ==", "c2VjcmV0LXZhbHVlLTE", "x"]
    rng = random.Random(4)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    monkeypatch.setattr(_redact, "_may_hold_key", lambda text: True)
    full = [_redact.redact(t, []) for t in texts]
    monkeypatch.undo()
    assert [_redact.redact(t, []) for t in texts] == full
    assert sum(f != t for f, t in zip(full, texts, strict=True)) > 300  # the patterns did fire
    assert not _redact._may_hold_key("Reasoning filler.\nFinal answer: C")
