"""Answer extraction, part 1: the statement patterns and the checks a candidate key must pass.

Patterns run on the ASCII-lowered reply without ``re.IGNORECASE`` and each starts with a
literal: both let the regex engine skip ahead to candidate positions (a case-insensitive
alternation at the start costs ~20x on a 2 KB reply). The key's case is read back from the
original text. See :mod:`._extract` for the order in which the strategies use them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple


class _Rule(NamedTuple):
    """A statement read forwards: a head phrase, then the key.

    The pattern runs only when ``needle`` occurs in the lowered reply.
    """

    method: str
    final: bool
    needle: str
    pattern: re.Pattern[str]


class _Verdict(NamedTuple):
    """A statement read backwards: find the verdict ("is correct", "正确"), then the key
    just before it (within 40 characters)."""

    needles: tuple[str, ...]
    verdict: re.Pattern[str]
    key_before: re.Pattern[str]


# --- patterns ----------------------------------------------------------------------------------
# Patterns run on the ASCII-lowered reply without re.IGNORECASE and each starts with a literal:
# both let the regex engine skip ahead to candidate positions (a case-insensitive alternation
# at the start costs ~20x on a 2 KB reply). The key's case is read back from the original text.

# A key is one letter or a one/two-digit number standing alone (not inside "B12", "Vit").
_KEY = r"(?P<key>[a-z]|\d{1,2})(?![a-z0-9])"
_MARKUP = r"[\s*_`\"'“”‘’]*"
# Between a statement and its key: markdown, quotes, \boxed{ / \text{, "option", a bracket.
_OPEN = (
    _MARKUP
    + r"(?:\$?\\(?:boxed|fbox)\s*\{\s*)?"
    + r"(?:\\(?:text|textbf|mathrm|mathbf)\s*\{\s*)?"
    + r"(?:(?:option|choice|letter|选项)\s*)?"
    + _MARKUP
    + r"[(\[【{]?\s*"
)
# Words models put before the key that do not hedge it ("is clearly B", "…: I think B").
_FILLER = (
    r"(?:(?:clearly|definitely|probably|likely|most\s+likely|therefore|thus|actually|indeed|"
    r"still|i\s+(?:think|believe)|it\s+is|it['’]s|that\s+is)[\s,:]+)*"
)
_SEP = r"[\s*_:=\-–—\"'“”]*"
_SEP_ZH = r"[\s*_:：]*(?:应该是|应该选|应是|应为|应选|就是|是|为|选)?[\s*_:：]*"
_VERB = r"(?:is|would\s+be|should\s+be|will\s+be)\b"


def _word(w: str) -> str:
    """``w`` not preceded by a letter (a look-behind after the literal keeps the fast scan)."""
    return f"{w}(?<![a-z]{w})"


def _rules(method: str, final: bool, tail: str, *heads: tuple[str, str]) -> tuple[_Rule, ...]:
    return tuple(_Rule(method, final, needle, re.compile(head + tail)) for needle, head in heads)


_RULES: tuple[_Rule, ...] = (
    *_rules(
        "final_answer", True, _OPEN + _KEY,
        ("final", _word("final") + r"\s+(?:answer|choice|option|selection)s?\b"
                  + _SEP + r"(?:" + _VERB + _SEP + r")?" + _FILLER),
        ("最", r"最(?:终|后)的?(?:答案|选择|结论|回答)" + _SEP_ZH),
    ),
    *_rules(
        "boxed", True, r"[(\[]?\s*" + _KEY,
        ("box", r"\\(?:boxed|fbox)\s*\{[\s*]*(?:\\(?:text|textbf|mathrm|mathbf)\s*\{\s*)?"),
    ),
    *_rules(
        "answer_is", False, r"[\s*_:：\"'“”]*" + _FILLER + _OPEN + _KEY,
        ("answer", _word("answer") + r"\s*(?:" + _VERB + r"|=)"),
        ("option", _word("option") + r"\s+" + _VERB),
        ("choice", _word("choice") + r"\s+" + _VERB),
        ("choose", _word("choose") + r"\b"),
        ("select", _word("select") + r"\b"),
        ("pick", _word("pick") + r"\b"),
        ("go with", _word("go") + r"\s+with\b"),
        ("opt for", _word("opt") + r"\s+for\b"),
        ("答案", r"答案\s*(?:应该|应当|应)?\s*(?:是|为|选)"),
        ("选", r"(?:正确|最佳|最合适的?|最恰当的?)(?:选项|选择)\s*(?:应该|应)?\s*(?:是|为)"),
        # 选B / 故选B, but not 选项 (option), 首选 (first-line) or 可选 (optional)
        ("选", r"选(?<![首可]选)择?(?!项)"),
    ),
    *_rules(
        "answer_label", False, _OPEN + _KEY,
        ("answer", _word("answer") + r"[*_]*\s*:"),
        ("ans", _word("ans") + r"\b[*_]*\s*:"),
        ("答", r"答案?\s*[:：]"),
    ),
)  # fmt: skip

_VERDICTS: tuple[_Verdict, ...] = (
    # The key must follow "option", a bracket, or start a line/sentence: "Vitamin C is correct"
    # names vitamin C, not option C.
    _Verdict(
        ("correct", "right", "best"),
        re.compile(
            r"is\s+(?:the\s+)?(?:most\s+|only\s+|single\s+)?(?:correct|right|best)(?![-\w])"
            r"(?!\s+(?:only|if|when|in|for)\b)"
        ),
        re.compile(
            r"(?:\b(?:option|choice|answer)\s+[(\[]?|^[ \t]*(?:[-*>#]+[ \t]*)?[*_]*[(\[]?|"
            r"(?<=[.!?;:])[ \t]*[*_]*[(\[]?|[(\[])" + _KEY + r"[)\]]?[*_]*\s+\Z",
            re.MULTILINE,
        ),
    ),
    # "B项正确", "选项B正确" — but not "维生素C正确" (vitamin C) nor "A项不正确".
    _Verdict(
        ("正确", "对的", "最佳", "最合适", "最恰当"),
        re.compile(r"(?:正确|对的|最佳|最合适|最恰当)(?!与否)"),
        re.compile(
            r"(?:选项\s*[(\[【]?|(?<![a-z0-9\u4e00-\u9fff])[(\[【]?)"
            + _KEY
            + r"[)\]】]?\s*(?:项|选项)?\s*(?:是|为)?\s*\Z"
        ),
    ),
)

_JSON_FIELDS = tuple(
    re.compile(
        q + r"(?:final[_\s-]?(?:answer|choice)|answer(?:[_\s-]?(?:letter|key|option|choice))?|"
        r"choice|option|selected[_\s-]?(?:answer|option|choice)|"
        r"correct[_\s-]?(?:answer|option|choice)|最终答案|答案)" + q + r"\s*:\s*"
        r"(?:\"(?P<dq>[^\"\n]{0,200})\"|'(?P<sq>[^'\n]{0,200})'|(?P<num>\d{1,2})(?![\d.]))"
    )
    for q in ('"', "'")
)
_JSON_VALUE = re.compile(r"\s*[(\[【]?\s*" + _KEY)

# --- candidate checks --------------------------------------------------------------------------

_CONNECTORS = (
    "because", "since", "as", "is", "was", "which", "here", "for", "given", "due", "over",
    "rather", "instead", "with", "and", "or", "but", "seems", "appears", "fits", "matches",
    "would", "should", "remains", "best",
)  # fmt: skip
# "A 45-year-old", "A rare cause", "I think": an article / pronoun, not a key (case-sensitive).
_ARTICLE_USE = re.compile(r"[ \t]+(?!(?:" + "|".join(_CONNECTORS) + r")\b)[a-z0-9]")
_CLOSED = re.compile(r"\s*[)\]】}]")
_LINE_END = re.compile(r"[ \t]*[.:。]?[ \t*_]*(?:\n|$)")
_GLUED = re.compile(r"[-'’][A-Za-z]|[.,]\d|[%°]|/\d|[ \t*_)\]]*\?")
_CONDITIONAL_AFTER = re.compile(r"\W{0,3}\s+(?:only\s+)?(?:if|unless)\b", re.IGNORECASE)
_ALTERNATIVE = re.compile(
    r"[ \t]*[)\]】}]?[*_]*[ \t]*,?[ \t]*(?:(?i:or|and)|/|、|或|和|与|及)[ \t]*"
    r"(?:(?i:possibly|maybe|perhaps|option)[ \t]+)?[(\[]?(?P<other>[A-Z]|\d{1,2})(?![A-Za-z0-9])"
)
# A statement that is conditional, negated or attributed to someone else, judged on the words
# just before it ("if the answer is A", "I don't think the answer is A", "the context suggests
# that the answer is A"). A clause break (",", ":", ".") or "but" ends the look-back.
_HEDGED_BEFORE = re.compile(
    r"(?:\b(?:if|whether|unless|suppose|supposing|assume|assuming|not|never|nor|cannot|"
    r"suggests?|suggesting|suggested|claims?|claimed|claiming|implies|implied|argues|argued|"
    r"asserts?|asserted|thinks|believes|says|said|states|stated)|n['’]t)"
    r"\s+(?:that\s+)?(?:(?!(?:but|however|though|although|yet|so)\b)[\w'’]+\s+){0,3}\Z"
    r"|(?:如果|假如|假设|倘若|若是|若|并非|不认为|不觉得|并不是|不是|声称|是否)[^\n。！？，,]{0,4}\Z",
    re.IGNORECASE,
)


def _accept(text: str, m: re.Match[str], keymap: Mapping[str, str]) -> str | None:
    """The option key named by ``m``'s ``key`` group, or None when it is not a real answer.

    ``m`` comes from the lowered copy of ``text``; the key's case is read from ``text``.
    """
    start, end = m.span("key")
    raw = text[start:end]
    key = keymap.get(raw.upper())
    if key is None:
        return None
    after = text[end : end + 80]
    bracketed = start > 0 and text[start - 1] in "([【{"
    closed = _CLOSED.match(after) is not None
    # A bare lowercase "a" is far more often the article than an option.
    if raw.islower() and not (bracketed or closed or _LINE_END.match(after)):
        return None
    if (
        not (bracketed or closed)
        and (raw in ("A", "I") or raw.isdigit())
        and _ARTICLE_USE.match(after)
    ):
        return None
    if _GLUED.match(after) or _CONDITIONAL_AFTER.match(after):
        return None
    alternative = _ALTERNATIVE.match(after)
    if alternative and keymap.get(alternative.group("other")) not in (None, key):
        return None
    if _HEDGED_BEFORE.search(text, max(0, m.start() - 60), m.start()):
        return None
    return key
