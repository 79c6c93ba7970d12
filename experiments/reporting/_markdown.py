"""report.md's markdown as report.html's markup: the page renders the same sections as the file.

Only the forms the report's renderers write are understood: ``#`` headings, GitHub tables,
``-`` bullets (nested by indentation), ``>`` quotes, paragraphs, ``**bold**``, `` `code` ``,
backslash escapes and standalone ``![alt](plots/x.png)`` images. Everything is escaped first:
raw HTML in the markdown (a subset name, a model id, a reason text) stays text, no link ever
becomes an ``href``, and an image is embedded only when it is a PNG inside the run folder (as a
data URI, so the page fetches nothing).
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

__all__ = ["inline_html", "markdown_html"]

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_INLINE = re.compile(
    r"(?P<ticks>`+)(?P<code>.+?)(?P=ticks)"  # a code span: its backslashes stay as they are
    r"|\\(?P<esc>[\\`*_{}\[\]()#+\-.!|<>~])"  # a backslash escape: the character itself
    r"|\*\*(?P<bold>.+?)\*\*"
)
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BULLET = re.compile(r"^(\s*)[-*]\s+(.*)$")
_IMAGE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+)\)$")
_TABLE_RULE = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _text(text: str) -> str:
    # an entity in the markdown (md_cell writes "&lt;" for a "<") means its character, as a
    # markdown renderer reads it; then everything is escaped again
    return html.escape(html.unescape(text), quote=False)


def inline_html(text: str) -> str:
    """One line of markdown's inline forms (code, bold, backslash escapes) as escaped HTML."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(_text(text[pos:m.start()]))
        if m.group("ticks"):
            # md_cell writes "<" as "&lt;" inside code spans too: the text meant is the character
            out.append(f"<code>{_text(m.group('code').strip())}</code>")
        elif m.group("esc") is not None:
            out.append(html.escape(m.group("esc"), quote=False))
        else:
            out.append(f"<b>{inline_html(m.group('bold'))}</b>")
        pos = m.end()
    out.append(_text(text[pos:]))
    return "".join(out)


def _cells(line: str) -> list[str]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip() for c in _CELL_SPLIT.split(body)]


def _table(lines: list[str]) -> str:
    head = "".join(f"<th>{inline_html(c)}</th>" for c in _cells(lines[0]))
    rows = "".join("<tr>" + "".join(f"<td>{inline_html(c)}</td>" for c in _cells(line)) + "</tr>"
                   for line in lines[2:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _bullets(lines: list[str]) -> str:
    """Nested ``<ul>`` from ``-`` lines; an indented line without a dash continues its item."""
    out: list[str] = []
    depths: list[int] = []  # the indentation of each open list; its last item is still open
    for line in lines:
        m = _BULLET.match(line)
        if m is None:  # a continuation of the open item
            out.append(" " + inline_html(line.strip()))
            continue
        indent = len(m.group(1).expandtabs(4))
        if not depths or indent > depths[-1]:
            out.append("<ul><li>")
            depths.append(indent)
        else:
            while len(depths) > 1 and indent < depths[-1]:
                out.append("</li></ul>")
                depths.pop()
            out.append("</li><li>")
        out.append(inline_html(m.group(2)))
    out += ["</li></ul>"] * len(depths)
    return "".join(out)


def _image(alt: str, src: str, run_dir: Path | None) -> str:
    """A PNG of the run folder as an ``<img>`` with a data URI; its alt text otherwise."""
    label = html.escape(alt, quote=True)
    if run_dir is not None and not re.match(r"^[a-z][a-z0-9+.-]*:", src, flags=re.I):
        root = run_dir.resolve()
        path = (root / src).resolve()
        try:
            raw = path.read_bytes() if path.is_relative_to(root) and path.is_file() else b""
        except OSError:
            raw = b""
        if raw.startswith(_PNG_MAGIC):  # the data URI's type must match the bytes
            data = base64.b64encode(raw).decode("ascii")
            return f'<figure><img alt="{label}" src="data:image/png;base64,{data}"><figcaption>{label}</figcaption></figure>'
    return f"<p>{label} (image not embedded)</p>"


def markdown_html(markdown: str, run_dir: Path | None = None) -> str:
    """Markdown (the report's subset) as HTML; every piece of text is escaped.

    Args:
        markdown: A section (or all) of ``report.md``.
        run_dir: The folder image paths are relative to; None embeds no image.
    """
    lines = markdown.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            out.append(f"<h{level}>{inline_html(heading.group(2).strip())}</h{level}>")
            i += 1
            continue
        if line.lstrip().startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1].strip()):
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            out.append(_table(lines[i:j]))
            i = j
            continue
        if _BULLET.match(line) and not line.startswith(" "):
            j = i + 1
            while j < len(lines) and lines[j].strip() and (_BULLET.match(lines[j]) or lines[j].startswith(" ")):
                j += 1
            out.append(_bullets(lines[i:j]))
            i = j
            continue
        if line.startswith(">"):
            j = i
            while j < len(lines) and lines[j].startswith(">"):
                j += 1
            quoted = " ".join(x[1:].strip() for x in lines[i:j])
            out.append(f'<blockquote class="banner">{inline_html(quoted)}</blockquote>')
            i = j
            continue
        image = _IMAGE.match(line.strip())
        if image:
            out.append(_image(image.group("alt"), image.group("src"), run_dir))
            i += 1
            continue
        j = i + 1  # a paragraph: up to a blank line or the start of another block
        while j < len(lines) and lines[j].strip() and not (
                _HEADING.match(lines[j]) or lines[j].lstrip().startswith(("|", ">")) or _BULLET.match(lines[j])
                or _IMAGE.match(lines[j].strip())):
            j += 1
        out.append(f"<p>{inline_html(' '.join(x.strip() for x in lines[i:j]))}</p>")
        i = j
    return "\n".join(out)
