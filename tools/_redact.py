"""Keeping credentials off disk: scrub URLs, redact key-shaped strings and configured secrets.

Everything a run writes (manifest, records, traces, reports, cache keys, cassettes) passes
through these functions where it may carry a credential: a base URL with ``user:pass@``, a
query parameter such as ``?key=``, a provider error body that echoes the key it rejected.
Redaction is by pattern (the shapes of the providers' keys and auth headers) and by value
(every key the process was configured with, read from the providers' environment variables).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"

# environment variables whose values are credentials (the providers' own names)
SECRET_ENV = (
    "GOOGLE_API_KEY", "GEMINI_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN", "TAVILY_API_KEY", "SERPER_API_KEY", "JINA_API_KEY",
)
_CREDENTIAL_PARAM = re.compile(
    r"^(?:key|api[-_]?key|apikey|access[-_]?token|token|auth|authorization|password|passwd|pwd|"
    r"secret|client[-_]?secret|sig|signature|x[-_]goog[-_]api[-_]key|code)$",
    re.IGNORECASE,
)
# shapes of credentials as providers issue or echo them; the shortest body keeps false
# positives (ordinary words, hashes of cache keys) out
_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bsk-(?:ant-|proj-|svcacct-)?[A-Za-z0-9_\-]{16,}"),  # OpenAI, Anthropic
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"),  # Google API keys
    re.compile(r"\btvly-[A-Za-z0-9_\-]{12,}"),  # Tavily
    re.compile(r"\bjina_[A-Za-z0-9_\-]{16,}"),  # Jina
    re.compile(r"(?i)\bBearer\s+[A-Za-z0-9._~+/\-]{8,}=*"),
    re.compile(r"(?i)\b(x-goog-api-key|x-api-key|api[-_]?key|authorization)(\"?\s*[:=]\s*\"?)"
               r"(?!\*\*\*)[^\s\"',;&}]{6,}"),
    re.compile(r"(?i)([?&](?:key|api[-_]?key|access_token|token)=)[^&\s\"']+"),
)
# a field named like a credential: the whole name or its last part (``openai_api_key``,
# ``auth_token``), never a count such as ``max_tokens`` or ``input_tokens``
_SECRET_NAME = re.compile(
    r"(?i)(?:^|[_\-.])(?:api[_\-]?key|apikey|token|access[_\-]?token|secret|password|passwd|"
    r"authorization|credentials?)$|^(?:auth|key|pwd)$"
)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@:]+(?::[^/\s@]*)?@")


# Something every pattern above needs (the case-insensitive ones under the same flag, so the
# same Unicode look-alikes count): text without any of these is left as it is, unscanned.
_MAY_HOLD = ("sk-", "AIza", "tvly-", "jina_", "=", "@")
_MAY_HOLD_WORDS = ("bearer", "api", "authorization")  # matched case-insensitively
_MAY_HOLD_I = re.compile("(?i)" + "|".join(_MAY_HOLD_WORDS))


def _may_hold_key(text: str) -> bool:
    return any(s in text for s in _MAY_HOLD) or _MAY_HOLD_I.search(text) is not None


# Field names :func:`is_secret_name` may accept, as lowered JSON text shows them (a key's
# closing quote marks where the name ends; ``$`` also matches before a final newline, written
# ``\n``). It over-matches (any mention of "secret"), which only sends a text to the full pass.
_SECRET_KEY_HINTS = ("secret", "passwd", "password",
                     *(f'{name}{end}"' for name in ("token", "credential", "credentials") for end in ("", "\\n")),
                     *(f'"{name}{end}"' for name in ("auth", "key", "pwd") for end in ("", "\\n")))
# The only characters outside ASCII that a case-insensitive pattern matches to an ASCII letter
# (İ, ı -> i; ſ -> s; Kelvin sign -> k): folded first, a case-insensitive search for an ASCII
# word is a search in the lowered text.
_FOLD_TO_ASCII = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})
_LOWER_HINTS = (*_MAY_HOLD_WORDS, *_SECRET_KEY_HINTS)


def json_needs_redaction(text: str, secrets: Iterable[str]) -> bool:
    """Whether :func:`redact_obj` could change the value ``text`` is the JSON of.

    False means the structure holds no configured secret, no text any key pattern could
    match and no field with a credential-like name: it can be written as it is, without the
    walk over every string. ``text`` is JSON as ``json.dumps(..., ensure_ascii=False)`` or
    pydantic's ``model_dump_json`` write it (non-ASCII characters unescaped).
    """
    for value in secrets:
        if value and len(value) >= 8 and (value in text or json.dumps(value, ensure_ascii=False)[1:-1] in text):
            return True
    if any(s in text for s in _MAY_HOLD):
        return True
    # a few substring searches beat the case-insensitive expressions over a whole record
    lowered = (text.translate(_FOLD_TO_ASCII) if not text.isascii() else text).lower()
    return any(s in lowered for s in _LOWER_HINTS)


def configured_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The credential values this process was given (non-trivial ones only)."""
    env = os.environ if environ is None else environ
    return sorted({v for name in SECRET_ENV if len(v := env.get(name, "").strip()) >= 8},
                  key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with configured secrets, key-shaped strings and URL credentials masked.

    Args:
        text: Any text that may be written to disk (an error message, a URL, a command line).
        secrets: Literal values to mask; default: :func:`configured_secrets`.
    """
    if not text:
        return text
    for value in configured_secrets() if secrets is None else secrets:
        if value and len(value) >= 8:
            text = text.replace(value, MASK)
    if not _may_hold_key(text):
        return text
    text = _USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    for pattern in _PATTERNS:
        if pattern.groups == 2:
            text = pattern.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
        elif pattern.groups == 1:
            text = pattern.sub(lambda m: m.group(1) + MASK, text)
        else:
            text = pattern.sub(MASK, text)
    return text


def scrub_url(url: str) -> str:
    """``url`` without userinfo and with credential-like query parameters masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    if not parts.scheme or not parts.netloc:
        return redact(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "") if "@" in parts.netloc else parts.netloc
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_CREDENTIAL_PARAM.match(k) for k, _ in pairs):
            query = urlencode([(k, MASK if _CREDENTIAL_PARAM.match(k) else v) for k, v in pairs], safe="*")
    return redact(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))


def is_secret_name(name: object) -> bool:
    """Whether a field name says its value is a credential (``api_key``, ``auth_token``, …)."""
    return isinstance(name, str) and _secret_name(name)


@functools.lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:
    # field names come from a small vocabulary (record and trace keys), so one search each
    return bool(_SECRET_NAME.search(name))


def redact_obj(obj: Any, secrets: Iterable[str] | None = None) -> Any:
    """A JSON-like structure with every string redacted (keys kept).

    A text value under a credential-like name (:func:`is_secret_name`) is masked whole,
    whatever its shape: ``--model-option api_key=…`` lands in the manifest as ``{"api_key": …}``.
    """
    return _redact_tree(obj, list(configured_secrets() if secrets is None else secrets))


def redact_json(obj: Any, secrets: Iterable[str] | None = None) -> Any:
    """:func:`redact_obj` for a JSON-able structure that is usually clean: ``obj`` itself
    (not a copy) when its JSON text holds nothing to mask (:func:`json_needs_redaction`),
    otherwise the redacted copy. Values ``json`` cannot encode are judged by their ``str()``."""
    values = list(configured_secrets() if secrets is None else secrets)
    if not json_needs_redaction(json.dumps(obj, ensure_ascii=False, default=str), values):
        return obj
    return _redact_tree(obj, values)


def _redact_tree(obj: Any, values: list[str]) -> Any:
    if isinstance(obj, str):
        return redact(obj, values)
    if isinstance(obj, Mapping):
        return {
            k: MASK if isinstance(v, str) and v and is_secret_name(k) else _redact_tree(v, values)
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [_redact_tree(v, values) for v in obj]
    return obj
