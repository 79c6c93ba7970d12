"""Keeping credentials off disk: scrub URLs, redact key-shaped strings and configured secrets.

Everything a run writes (manifest, records, traces, reports, cache keys, cassettes) passes
through these functions where it may carry a credential: a base URL with ``user:pass@``, a
query parameter such as ``?key=``, a provider error body that echoes the key it rejected.
Redaction is by pattern (the shapes of the providers' keys and auth headers, a ``Basic``
header's ``user:pass``) and by value: every key the process was configured with (the
providers' environment variables) and the ``user:pass`` of every base URL it knows (the
providers' base URL variables and the URLs given to it, see :func:`remember_url`), each in
every form it travels in: as given, percent-encoded, and base64-encoded (a ``user:pass@`` URL
goes out as ``Authorization: Basic base64(user:pass)``, which a server may echo).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlencode, urlsplit, urlunsplit

MASK = "***"

# environment variables whose values are credentials (the providers' own names)
SECRET_ENV = (
    "GOOGLE_API_KEY", "GEMINI_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN", "TAVILY_API_KEY", "SERPER_API_KEY", "JINA_API_KEY",
)
# environment variables whose value is a base URL that may carry ``user:pass@``
URL_ENV = (
    "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "ANTHROPIC_BASE_URL", "TAVILY_BASE_URL",
    "SERPER_BASE_URL", "JINA_BASE_URL",
)
_MIN_SECRET = 8  # shorter values would mask ordinary words
_REMEMBERED: set[str] = set()  # userinfo of base URLs given to this process
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
# an HTTP Basic credential: masked when its base64 decodes to ``user:pass`` (so "basic
# science" and the like stay)
_BASIC = re.compile(r"(?i)\b(basic\s+)([A-Za-z0-9+/]{4,}={0,2})")

# the same in JSON text, where the whitespace may be an escape (``\n``) and a word boundary is
# not to be trusted (``\nBasic``): it may over-match, as a quick check may
_BASIC_IN_JSON = re.compile(r"(?i)basic(?:\s|\\[nrt])+([A-Za-z0-9+/]{4,}={0,2})")


def _basic_sub(match: re.Match[str]) -> str:
    return match.group(1) + MASK if _is_basic_pair(match.group(2)) else match.group(0)


def _is_basic_pair(token: str) -> bool:
    if len(token) % 4:
        return False
    try:
        decoded = base64.b64decode(token, validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded and all(32 <= b < 127 or b >= 128 for b in decoded)


# Something every pattern above needs (the case-insensitive ones under the same flag, so the
# same Unicode look-alikes count): text without any of these is left as it is, unscanned.
_MAY_HOLD = ("sk-", "AIza", "tvly-", "jina_", "=", "@")
_MAY_HOLD_WORDS = ("bearer", "api", "authorization", "basic")  # matched case-insensitively
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
_LOWER_HINTS = (*(w for w in _MAY_HOLD_WORDS if w != "basic"), *_SECRET_KEY_HINTS)


def json_needs_redaction(text: str, secrets: Iterable[str]) -> bool:
    """Whether :func:`redact_obj` could change the value ``text`` is the JSON of.

    False means the structure holds no configured secret, no text any key pattern could
    match and no field with a credential-like name: it can be written as it is, without the
    walk over every string. ``text`` is JSON as ``json.dumps(..., ensure_ascii=False)`` or
    pydantic's ``model_dump_json`` write it (non-ASCII characters unescaped).
    """
    if any(needle in text for needle in _needles(tuple(secrets))):
        return True
    if any(s in text for s in _MAY_HOLD):
        return True
    # a few substring searches beat the case-insensitive expressions over a whole record
    lowered = (text.translate(_FOLD_TO_ASCII) if not text.isascii() else text).lower()
    if any(s in lowered for s in _LOWER_HINTS):
        return True
    # "basic" is an ordinary word: only a Basic credential's shape sends the text on
    return "basic" in lowered and any(_is_basic_pair(m.group(1)) for m in _BASIC_IN_JSON.finditer(text))


@functools.lru_cache(maxsize=64)
def _needles(secrets: tuple[str, ...]) -> tuple[str, ...]:
    """The fewest substrings whose absence from a JSON text proves no secret is in it.

    Each secret as it is and as it appears inside a JSON string; a form that contains another
    (a padded base64, ``user:pass`` around ``pass``) needs no search of its own.
    """
    forms = {v for value in secrets if value and len(value) >= _MIN_SECRET
             for v in (value, json.dumps(value, ensure_ascii=False)[1:-1])}
    return tuple(f for f in forms if not any(o != f and o in f for o in forms))


def configured_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The credentials this process knows, in every form they travel in, longest first.

    The values of the providers' key variables (:data:`SECRET_ENV`) and the ``user:pass`` of
    the base URLs in :data:`URL_ENV` and given to :func:`remember_url`; each as given,
    percent-encoded and base64-encoded (a ``user:pass`` also as its ``Authorization: Basic``
    token). Forms shorter than 8 characters are left out (they would mask ordinary words).
    """
    env = os.environ if environ is None else environ
    keys = tuple(env.get(name, "") for name in SECRET_ENV)
    urls = tuple(env.get(name, "") for name in URL_ENV)
    return list(_known_forms(keys, urls, frozenset(_REMEMBERED)))


def remember_url(url: str | None) -> None:
    """Mask the ``user:pass`` of ``url`` (a configured base URL) from now on, in every form."""
    userinfo = _userinfo(url)
    if userinfo:
        _REMEMBERED.add(userinfo)


def _userinfo(url: str | None) -> str:
    if not url or "@" not in url:
        return ""
    try:
        netloc = urlsplit(url.strip()).netloc
    except ValueError:
        return ""
    return netloc.rpartition("@")[0] if "@" in netloc else ""


def _encoded_forms(value: str) -> set[str]:
    raw = value.encode("utf-8")
    b64 = base64.b64encode(raw).decode("ascii")
    forms = {value, quote(value, safe=""), quote_plus(value, safe=""), b64, b64.rstrip("="),
             base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")}
    return forms


@functools.lru_cache(maxsize=64)
def _known_forms(keys: tuple[str, ...], urls: tuple[str, ...], remembered: frozenset[str]) -> tuple[str, ...]:
    forms: set[str] = set()
    for key in keys:
        if len(key := key.strip()) >= _MIN_SECRET:
            forms |= _encoded_forms(key)
    for userinfo in {*(_userinfo(u) for u in urls), *remembered} - {""}:
        # the URL holds the percent-encoded form; the Basic header is built from the decoded one
        user, _, password = userinfo.partition(":")
        pair = f"{unquote(user)}:{unquote(password)}"
        forms |= {userinfo} | _encoded_forms(pair) | _encoded_forms(unquote(password)) | {password}
    return tuple(sorted((f for f in forms if len(f) >= _MIN_SECRET), key=lambda f: (-len(f), f)))


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
    text = _BASIC.sub(_basic_sub, text)
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


def redact_file_text(name: str, text: str, secrets: Iterable[str] | None = None) -> str:
    """The text of a file named ``name`` about to be written, with credentials masked.

    JSON (``.json``, written with ``indent=2``) and JSON Lines (``.jsonl``) are masked value by
    value, so they stay valid (a key-shaped pattern must not eat a closing quote), and are
    returned unchanged when their text could hold nothing to mask; any other text is masked
    as text (:func:`redact`).
    """
    values = list(configured_secrets() if secrets is None else secrets)
    if name.endswith(".jsonl"):
        return "".join(_redact_json_line(line, values) for line in text.splitlines(keepends=True))
    if name.endswith(".json"):
        if not json_needs_redaction(text, values):
            return text
        tail = "\n" if text.endswith("\n") else ""
        return json.dumps(_redact_tree(json.loads(text), values), indent=2, ensure_ascii=False) + tail
    return redact(text, values)


def _redact_json_line(line: str, values: list[str]) -> str:
    body = line.rstrip("\n")
    if not body.strip() or not json_needs_redaction(body, values):
        return line
    return json.dumps(_redact_tree(json.loads(body), values), ensure_ascii=False) + line[len(body):]
