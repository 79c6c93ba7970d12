"""Token usage of model calls, summed per case (a defender's answer, a record's line)."""

from __future__ import annotations

from pydantic import BaseModel


class Usage(BaseModel):
    """Input and output tokens as the provider reports them (estimated by the mock models)."""

    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, other: Usage) -> None:
        """Add ``other``'s counts to this one's."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
