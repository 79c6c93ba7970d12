"""Provider errors, classified once so that retry decisions never parse messages."""

from __future__ import annotations

from medmis.tools import ConfigError


class ModelError(Exception):
    """Base class for failures of a model call."""


class MissingKeyError(ModelError, ConfigError):
    """No API key for a provider. The CLI prints this message as one line, no traceback."""

    def __init__(self, provider: str, variables: tuple[str, ...]) -> None:
        names = " or ".join(variables)
        super().__init__(f"{provider}: no API key found; set {names}")
        self.provider = provider
        self.variables = variables


class ModelConfigError(ModelError, ConfigError, ValueError):
    """A model spec or option the provider cannot honour (an effort level it does not know, a
    LangChain integration that is not installed). Raised while building the model, before any
    request; the CLI prints it as one line."""


class BlockedResponseError(ModelError):
    """The provider refused or returned no usable candidate (safety block, empty candidate).
    Not retried: the same request is blocked again. Recorded as an error, never graded."""


class MalformedResponseError(ModelError):
    """The provider answered with something that cannot be parsed. Retried."""


class TransientModelError(ModelError):
    """A retryable failure raised by our own code (e.g. the examinee's injected faults)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def raise_size_cap(exc: BaseException) -> None:
    """Raise the size-cap failure behind an SDK's connection error, if that is what it is.

    The SDKs wrap whatever their HTTP client raises in their own connection error (retried,
    and reading only "Connection error."); a reply over the size cap is neither transient nor
    a connection failure, so the call fails with the cap's own error instead.
    """
    from medmis.tools import ResponseTooLargeError

    seen = 0
    cause = exc.__cause__ or exc.__context__
    while cause is not None and seen < 8:
        if isinstance(cause, ResponseTooLargeError):
            raise ResponseTooLargeError(cause.request, cause.max_bytes) from None
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
