"""The LangChain adapter of the record/replay store: a chat-model cache keyed by the call.

:class:`StoreCache` plugs a :class:`~medmis.tools._store.RecordStore` into LangChain as a
chat-model cache (kind ``"model"``); :func:`attach_cache` puts it on a model. The key
(:func:`model_cache_key`) is a normalised view of the call: :func:`normalize_llm_string` keeps the
provider, model and every output-relevant parameter and drops timeouts, clients and credentials;
:func:`normalize_prompt` keeps what the provider sees of the messages, minus run-specific ids.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
from langchain_core.language_models import BaseChatModel
from langchain_core.load import dumps
from langchain_core.outputs import Generation

from medmis.tools._redact import MASK, is_secret_name, redact, scrub_url
from medmis.tools._store import _RECORD_HINT, MODEL_KIND, RecordStore, key_digest
from medmis.tools._types import ReplayMissError

from ._generations import load_generations

# Call parameters that never change what the model says; everything else stays in the key
# (a denylist, so an unknown new parameter costs a cache miss rather than a wrong hit).
# Headers and keys are dropped too: they would put credentials into exported cassettes.
_VOLATILE_PARAMS = frozenset(
    {
        "timeout",
        "request_timeout",
        "max_retries",
        "retries",
        "http_client",
        "http_async_client",
        "client",
        "async_client",
        "root_client",
        "root_async_client",
        "callbacks",
        "callback_manager",
        "verbose",
        "streaming",
        "stream",
        "disable_streaming",
        "rate_limiter",
        "tags",
        "metadata",
        "cache",
        "name",
        "run_name",
        "run_id",
        "default_headers",
        "extra_headers",
        "headers",
        "client_args",
        "openai_organization",
        "organization",
        "openai_proxy",
    }
)
_MODEL_NAME_PARAMS = ("model", "model_name", "model_id", "deployment_name", "azure_deployment")
# Message fields that are run-specific or never sent to a provider.
_DROPPED_MESSAGE_FIELDS = frozenset(
    {"id", "response_metadata", "usage_metadata", "artifact", "tool_call_chunks", "chunk_position"}
)
_CHUNK_TYPES = {
    "AIMessageChunk": "ai",
    "HumanMessageChunk": "human",
    "SystemMessageChunk": "system",
    "ToolMessageChunk": "tool",
    "ChatMessageChunk": "chat",
    "FunctionMessageChunk": "function",
}
_ADDRESS_RE = re.compile(r" at 0x[0-9a-fA-F]+")
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")


def _is_empty(value: Any) -> bool:
    return value is None or value == {} or value == []


def _clean_param(value: Any) -> Any:
    """Strip unserialisable object reprs (memory addresses) from a serialised parameter."""
    if isinstance(value, dict):
        if value.get("lc") == 1 and value.get("type") == "not_implemented":
            return "not_implemented:" + ".".join(map(str, value.get("id") or []))
        return {k: _clean_param(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean_param(v) for v in value]
    if isinstance(value, str):
        return _ADDRESS_RE.sub("", value)
    return value


def _scrub_param(value: Any) -> Any:
    """A parameter without credentials: base URLs lose ``user:pass@`` and key-like query
    values, other text loses configured keys and key-shaped strings. Deterministic, so the key
    stays stable; credentials never change what a model says, so dropping them merges nothing.
    """
    if isinstance(value, dict):
        return {k: MASK if is_secret_name(k) else _scrub_param(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_param(v) for v in value]
    if isinstance(value, str):
        return scrub_url(value) if _URL_RE.match(value) else redact(value)
    return value


def _is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get("lc") == 1 and value.get("type") == "secret"


def _call_params(text: str) -> dict[str, Any]:
    """Parse LangChain's ``str(sorted(params.items()))`` back into a dict."""
    try:
        items = ast.literal_eval(text.strip())
        return {str(k): v for k, v in items}
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        # a parameter with no literal repr (a class, a client object): keep the text, minus
        # addresses, so the key is still deterministic; such calls just never share entries
        return {"_params_repr": _ADDRESS_RE.sub("", text)}


def normalize_llm_string(llm_string: str) -> dict[str, Any]:
    """Turn LangChain's ``llm_string`` into ``{"provider", "model", "params"}`` for a key.

    Serialisable models give ``<constructor JSON>---<repr of call params>``; the others give
    just the repr of their invocation params (``_type``, identifying params, call kwargs).
    Volatile parameters (timeouts, retries, clients, callbacks, headers, keys) are dropped,
    as are unset (``None``) ones.
    """
    provider: str | None = None
    params: dict[str, Any] = {}
    rest = llm_string
    try:
        manifest, end = json.JSONDecoder().raw_decode(llm_string)
    except ValueError:
        manifest, end = None, 0
    if isinstance(manifest, dict) and llm_string.startswith("---", end):
        provider = ".".join(map(str, manifest.get("id") or [])) or None
        params.update(manifest.get("kwargs") or {})
        rest = llm_string[end + 3 :]
    params.update(_call_params(rest))
    type_name = params.pop("_type", None)
    provider = provider or (str(type_name) if type_name is not None else None)
    model = next((params[k] for k in _MODEL_NAME_PARAMS if isinstance(params.get(k), str)), None)
    kept = {
        k: _scrub_param(_clean_param(v))
        for k, v in params.items()
        if k not in _VOLATILE_PARAMS
        and k not in _MODEL_NAME_PARAMS
        and "api_key" not in k
        and not is_secret_name(k)
        and not _is_secret(v)
        and v is not None
    }
    return {"provider": provider, "model": model, "params": kept}


class _IdAliases:
    """Replace run-specific ids (tool-call ids, content-block ids) by positional aliases.

    Links survive (a tool result still names the call it answers) but two runs whose
    provider minted different ids produce the same key.
    """

    def __init__(self) -> None:
        self._names: dict[str, str] = {}

    def __call__(self, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if value not in self._names:
            self._names[value] = f"id{len(self._names)}"
        return self._names[value]

    def scrub(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: self(v) if k in ("id", "tool_call_id") else self.scrub(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.scrub(v) for v in value]
        return value


def normalize_prompt(prompt: str) -> list[Any]:
    """Turn LangChain's serialised message list into what the provider actually sees.

    Drops message ids, response/usage metadata and tool artifacts; aliases tool-call ids;
    maps message chunks to their message types so streamed and plain histories match.
    """
    try:
        messages = json.loads(prompt)
    except ValueError:
        return [prompt]
    if not isinstance(messages, list):
        messages = [messages]
    aliases = _IdAliases()
    out: list[Any] = []
    for message in messages:
        if not (isinstance(message, dict) and isinstance(message.get("kwargs"), dict)):
            out.append(aliases.scrub(message))
            continue
        kwargs = message["kwargs"]
        kind = kwargs.get("type") or str((message.get("id") or ["?"])[-1])
        view: dict[str, Any] = {"type": _CHUNK_TYPES.get(kind, kind)}
        for field, value in kwargs.items():
            if field in _DROPPED_MESSAGE_FIELDS or field == "type" or _is_empty(value):
                continue
            if field == "tool_call_id":
                view[field] = aliases(value)
            else:
                view[field] = aliases.scrub(value)
        out.append(view)
    return out


def model_cache_key(prompt: str, llm_string: str) -> dict[str, Any]:
    """The store key for a LangChain model call (see :class:`StoreCache`)."""
    return {**normalize_llm_string(llm_string), "messages": normalize_prompt(prompt)}


def _strip_message_id(generation: Generation) -> Generation:
    # LangChain stamps each reply with a run id; storing it would make every re-recording
    # differ from the last and leak one run's id into another run's trace
    message = getattr(generation, "message", None)
    if message is not None and getattr(message, "id", None) is not None:
        return generation.model_copy(update={"message": message.model_copy(update={"id": None})})
    return generation


class StoreCache(BaseCache):
    """A LangChain chat-model cache backed by a :class:`RecordStore` (kind ``"model"``).

    The key is built from a normalised view of the call (:func:`model_cache_key`): provider,
    model name, base URL and every output-relevant parameter (temperature, tools,
    tool_choice, reasoning settings, seed, max tokens, stop, …), and the messages without
    ids. LangChain only calls :meth:`update` after a successful generation, so failures are
    never stored. In ``replay`` mode a miss raises from :meth:`lookup` so no live call is made.

    Only ``invoke``/``ainvoke``/``generate`` go through a LangChain cache; ``stream`` and
    ``astream`` bypass it.
    """

    def __init__(self, store: RecordStore, *, kind: str = MODEL_KIND, sample: int = 0) -> None:
        RecordStore.check_kind(kind)
        self.store = store
        self.kind = kind
        self.sample = sample

    def key(self, prompt: str, llm_string: str) -> dict[str, Any]:
        """The store key of a call (:func:`model_cache_key`), with the sample when it is a
        later one: a repeated sample (``--epochs``) of a model at a temperature is another
        draw, never the recording of the first; the first sample keys as every call always did."""
        key = model_cache_key(prompt, llm_string)
        return {**key, "sample": self.sample} if self.sample else key

    def lookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        """Return the stored generations, or ``None`` to let LangChain call the model.

        Raises:
            ReplayMissError: ``replay`` mode and the call was never recorded.
        """
        if self.store.mode == "live":
            return None
        key = self.key(prompt, llm_string)
        try:
            entry = self.store.lookup(self.kind, key)
        except ReplayMissError:
            # the generic message would print the whole conversation; name the model instead
            digest = key_digest(self.kind, key).split(":", 1)[1]
            raise ReplayMissError(
                f"replay miss: {self.kind} {key['model']!r} via {key['provider']} "
                f"({len(key['messages'])} messages, key {digest[:16]}): {_RECORD_HINT}"
            ) from None
        if entry is None:
            return None
        return load_generations(entry.value)

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        """Store the generations of a successful call (a no-op in ``live``/``replay``)."""
        if self.store.mode not in ("record", "refresh"):
            return
        generations = [json.loads(dumps(_strip_message_id(g))) for g in return_val]
        self.store.put(self.kind, self.key(prompt, llm_string), {"generations": generations})

    def clear(self, **kwargs: Any) -> None:
        """Remove every entry of this cache's kind from the store."""
        self.store.prune(kind=self.kind)

    # The store answers in microseconds (see :mod:`medmis.tools._store`), so the async variants
    # run inline rather than paying for an executor hop as BaseCache's defaults would.
    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        """Async :meth:`lookup`."""
        return self.lookup(prompt, llm_string)

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        """Async :meth:`update`."""
        self.update(prompt, llm_string, return_val)

    async def aclear(self, **kwargs: Any) -> None:
        """Async :meth:`clear`."""
        self.clear(**kwargs)


def attach_cache(model: BaseChatModel, store: RecordStore, *, sample: int = 0) -> BaseChatModel:
    """A copy of ``model`` whose calls go through ``store``; ``model`` itself in ``live`` mode.

    The copy shares the original's clients; tools bound afterwards (``bind_tools``) are part
    of each call's key. ``sample`` (a later epoch of ``--epochs``) keys its calls apart from
    the first sample's.
    """
    if store.mode == "live":
        return model
    return model.model_copy(update={"cache": StoreCache(store, sample=sample)})
