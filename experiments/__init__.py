"""Data, delivery protocols, answer extraction, the paired harness, metrics, reports and the CLI."""

from ._types import (
    CONTENT_TYPES,
    PROTOCOLS,
    PROVENANCES,
    SUBSETS,
    Answer,
    Case,
    ContextSentence,
    Item,
    ProtocolName,
    Record,
    TraceStep,
    Usage,
)

__all__ = [
    "CONTENT_TYPES",
    "PROTOCOLS",
    "PROVENANCES",
    "SUBSETS",
    "Answer",
    "Case",
    "ContextSentence",
    "Item",
    "ProtocolName",
    "Record",
    "TraceStep",
    "Usage",
]
