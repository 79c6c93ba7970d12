"""Agentic defenders (LangGraph state machines from graphs/); filled in by the Defenders issue."""
