"""report.html and the plots: self-contained, escaped, and readable in a real browser."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from medmis.experiments.harness import DefenderConfig, Harness, RunConfig
from medmis.experiments.reporting import write_report

pytestmark = pytest.mark.figures  # these draw the report's figures for real (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
INJECTION = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (small) run: the simulated examinee with none, claim_verify and search_agent."""
    import asyncio

    out = tmp_path_factory.mktemp("html") / "run"
    config = RunConfig(
        data=str(ROOT / "fixtures" / "medmisbench_sample.jsonl"), subset="MEDMISHLE",
        models=["mock/examinee"],
        defenders=[DefenderConfig(name="none"), DefenderConfig(name="claim_verify"),
                   DefenderConfig(name="search_agent")],
        out=str(out), progress=False,
    )
    asyncio.run(Harness(config, argv=["test"]).run())
    # hostile model output must stay text: plant it in one trace's raw output
    trace_path = out / "traces" / "mock_examinee__none.jsonl"
    lines = trace_path.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["raw"] = INJECTION + "\nFinal answer: 1"
    trace_path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
    write_report(out)
    return out


def test_plots_are_written_as_png(run_dir: Path) -> None:
    names = {p.name for p in (run_dir / "plots").glob("*.png")}
    assert names == {"asr_by_defender.png", "robustness_tradeoff.png", "cost_vs_asr.png", "strata_heatmap.png"}
    for png in (run_dir / "plots").glob("*.png"):
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
    assert "![asr by defender](plots/asr_by_defender.png)" in (run_dir / "report.md").read_text()


def test_html_is_self_contained_and_escaped(run_dir: Path) -> None:
    doc = (run_dir / "report.html").read_text(encoding="utf-8")
    # nothing is fetched: no external scripts, styles or images
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', doc)
    assert doc.count("data:image/png;base64,") == 4
    # the planted markup appears only inside the JSON payload, with "</" escaped
    assert INJECTION not in doc
    assert "<\\/script>" in doc
    assert "SIMULATED EXAMINEE" in doc


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
def test_a_person_sees_tables_banner_and_cases_in_chromium(run_dir: Path, tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000"]
    url = (run_dir / "report.html").resolve().as_uri()
    dom = subprocess.run([browser, *flags, "--dump-dom", url], capture_output=True, text=True,
                         timeout=60).stdout
    # the script ran (it marks the body and counts what it rendered)
    assert 'data-ready="1"' in dom
    count = re.search(r'id="case-count">(\d+) answers shown<', dom)
    assert count and int(count.group(1)) == 45  # 5 items x 3 protocols x 3 defenders
    # headline table with every defender, and the simulated-examinee banner
    for name in ("none", "claim_verify", "search_agent"):
        assert f"<td><code>{name}</code></td>" in dom
    assert "SIMULATED EXAMINEE" in dom
    # the case browser shows a question, an injected sentence and its target, answers,
    # the agent's visited URLs and claim verdicts with evidence
    assert "Glasgow Coma Scale" in dom
    assert "injected target" in dom and "false sentence for" in dom
    assert "visited: https://medref.example/" in dom
    assert re.search(r"claim (REFUTED|SUPPORTED|NOT_ENOUGH_INFO): ", dom)
    # hostile output is shown as text, never executed or parsed as markup
    assert "pwned" not in re.search(r"<title>(.*?)</title>", dom).group(1)  # type: ignore[union-attr]
    assert "&lt;script&gt;document.title" in dom
    shot = tmp_path / "report.png"
    subprocess.run([browser, *flags, "--window-size=1400,1800", f"--screenshot={shot}", url],
                   capture_output=True, timeout=60)
    assert shot.exists() and shot.read_bytes().startswith(PNG_MAGIC)


def test_case_browser_keeps_the_latest_trace_per_key(tmp_path: Path) -> None:
    from medmis.experiments.reporting._cases import case_data

    traces = tmp_path / "traces"
    traces.mkdir()
    base = {"model": "m", "defender": "none", "protocol": "clean", "item_id": "q1", "target": None,
            "gold": "A", "context": [], "extra": {}, "steps": []}
    lines = [dict(base, choice=None, error="ReadTimeout: upstream"), dict(base, choice="A", error=None)]
    (traces / "m__none.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    answers = case_data(tmp_path)["items"][0]["rows"][0]["answers"]
    assert len(answers) == 1 and answers[0]["choice"] == "A" and answers[0]["error"] is None


class _Page(HTMLParser):
    """The headings and tables of a page (outside the case browser's script), as text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.headings: list[str] = []
        self.tables: list[list[list[str]]] = []
        self._text: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        if tag in ("h1", "h2", "h3", "h4", "th", "td"):
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if self._text is None:
            return
        text = "".join(self._text).strip()
        if tag in ("h1", "h2", "h3", "h4"):
            self.headings.append(text)
            self._text = None
        elif tag in ("th", "td"):
            self.tables[-1][-1].append(text)
            self._text = None

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)


def _plain(markdown: str) -> str:
    """Inline markdown as the text a reader sees: code spans, bold, backslash escapes, entities."""
    text = re.sub(r"(`+)(.+?)\1", lambda m: m.group(2).strip(), markdown)
    text = re.sub(r"\*\*(.+?)\*\*", r"\1", text)
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text))  # ASCII punctuation only


def _markdown_parts(markdown: str) -> tuple[list[str], list[list[list[str]]]]:
    headings, tables = [], []
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^#{1,4} ", line):
            headings.append(_plain(line.lstrip("#").strip()))
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|")):
            rows = []
            for row in lines[i:]:
                if not row.startswith("|"):
                    break
                if not re.match(r"^\|( ?-{3,} ?\|)+$", row):
                    rows.append([_plain(c.strip()) for c in re.split(r"(?<!\\)\|", row.strip()[1:-1])])
            tables.append(rows)
    return headings, tables


def test_report_html_holds_the_sections_and_tables_of_report_md(run_dir: Path) -> None:
    markdown = (run_dir / "report.md").read_text(encoding="utf-8")
    page = _Page()
    page.feed((run_dir / "report.html").read_text(encoding="utf-8"))
    headings, tables = _markdown_parts(markdown)
    # every section of report.md, in its order, then the page's own case browser
    assert page.headings == [*headings, "Case browser"]
    for name in ("Run", "Headline", "Verdict", "Paired comparisons vs none", "Cost", "Definitions"):
        assert name in headings
    # the same tables, cell for cell
    assert page.tables == tables and len(tables) >= 5
    doc = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "Dataset SHA-256" in doc and "Proportions carry Wilson 95% intervals" in doc
