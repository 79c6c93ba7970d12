"""Answer extraction, part 2: text normalisation and comparison helpers."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping

# Full-width ASCII forms (Ｂ, ：, （）) and the ideographic space, mapped directly: Chinese
# replies almost always contain them, and full NFKC of CJK text is ~30x slower than this.
_FULL_WIDTH = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _normalise(text: str) -> str:
    """NFKC, with the common full-width forms taken care of on the fast path."""
    text = text.translate(_FULL_WIDTH)
    return text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)


def _ascii_lower(s: str) -> str:
    low = s.lower()
    # str.lower() lowers more than ASCII (harmless: keys are read from the original) but can
    # change the length ("İ" -> "i̇"); positions must stay aligned.
    return low if len(low) == len(s) else s.translate(_ASCII_LOWER)


def _fold(s: str) -> str:
    """Casefolded, whitespace-collapsed text without a trailing full stop, for comparisons."""
    return " ".join(unicodedata.normalize("NFKC", s).casefold().split()).rstrip(".。 ")


def _strip_markup(line: str) -> str:
    line = line.strip().strip("*_#>`$ \t")
    return line[2:].strip() if line.startswith("- ") else line


def _content_lines(text: str) -> list[str]:
    return [s for s in (_strip_markup(ln) for ln in text.splitlines()) if s]



def _unique_mention(region: str, options: Mapping[str, str]) -> str | None:
    """The single option whose text occurs in ``region`` as a whole phrase, else None."""
    hay = _fold(region)
    spans: list[tuple[int, int, str]] = []
    for key, option in options.items():
        needle = _fold(option)
        if len(needle) < 2:
            continue
        i = hay.find(needle)
        while i >= 0:
            j = i + len(needle)
            if not (_is_alnum_at(hay, i - 1) or _is_alnum_at(hay, j)):
                spans.append((i, j, key))
            i = hay.find(needle, i + 1)
    # "vitamin a" inside "vitamin a and d" is a mention of the longer option only.
    keys = {
        k
        for i, j, k in spans
        if not any(i2 <= i and j <= j2 and j2 - i2 > j - i for i2, j2, _ in spans)
    }
    return keys.pop() if len(keys) == 1 else None


def _is_alnum_at(s: str, i: int) -> bool:
    return 0 <= i < len(s) and s[i].isascii() and s[i].isalnum()
