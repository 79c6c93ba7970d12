"""The text of a chat message, and a rough token count: plain functions, no LangChain import.

Kept apart from the scripted model (:mod:`._mock`) so that readers of traces (the report's
case browser, ``medmis review``) can use them without loading LangChain's model stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage


def estimate_tokens(text: str) -> int:
    """A rough, deterministic token count (about four characters a token)."""
    return max(1, (len(text) + 3) // 4) if text else 0


def content_text(content: str | list[Any]) -> str:
    """The text of a message's content (a string, or a list of text / other blocks)."""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
    return "".join(parts)


def message_text(message: BaseMessage) -> str:
    """The text of ``message``'s content."""
    return content_text(message.content)
