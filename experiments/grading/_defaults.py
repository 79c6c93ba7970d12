"""Constants the ``medmis grade`` parser needs without importing the grading machinery."""

GRADES_FILE = "grades.jsonl"
DEFAULT_THRESHOLD = 0.5
"""Jury score at or above which an answer counts as correct for the open-ended ASR."""
