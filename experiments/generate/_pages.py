"""``medmis generate pages``: poisoned pages for every Type 1 case, through the generate pipeline.

For each Type 1 case of a release (an item and one of its wrong options that has a false
sentence; the claim is that sentence, the released ``inject<key>``) and each asked style, one
call to the generator writes a page that argues for the claim: a title and a body, requested
under a JSON schema and validated. The publisher, its site name and the page's URL are this
module's, drawn from fictional publishers per style (:data:`PUBLISHERS`) and derived from the
case, the style and ``--seed``, so they are stable and unique per page whatever the generator
writes. Rows are :class:`~medmis.tools._poison_types.PoisonedPage` (``load_pages`` reads them).

The steps around the calls are ``medmis generate``'s (:mod:`._run`): the model specs and the
record/replay store, the lock, the fingerprint check on resume, the job loop with its budget
cap, redaction of everything written. Files next to ``--out FILE.jsonl``:
``FILE.generation.jsonl`` (one outcome per page: status, reason, raw replies, tokens),
``FILE.manifest.json`` and ``FILE.lock`` while running. Re-running resumes: pages with a final
outcome are kept, provider errors are retried; ``--limit`` and ``--styles`` may grow a file.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from medmis.agents import RetryPolicy
from medmis.experiments.benchmark import Item
from medmis.tools import PAGE_STYLES, ConfigError, PoisonedPage, case_key, redact_json

from . import _prompts as P
from ._finish import exit_status, write_manifest_file
from ._pipeline import SidecarRow, structured_call
from ._run import (
    GenerationSettings,
    _endpoint,
    _hash_path,
    _model,
    _read_jsonl,
    _usd,
    check_budget,
    open_store,
    replace_rows,
    retry_policy,
    run_pending,
)
from ._schemas import PageReply, ReplyError, page_schema, parse_reply

PageStatus = Literal["generated", "malformed", "error"]
FINAL: frozenset[str] = frozenset({"generated", "malformed"})
OUTPUT_TOKENS = 400  # a page of 150-250 words, for --dry-run


@dataclass(frozen=True)
class Publisher:
    """A fictional publisher: the name its pages show, its host (reserved ``.example`` TLD, so
    no address is anyone's real site and none resolves) and the shape of its page paths.

    ``path`` is formatted with ``words`` (the target option's slug), a drawn page number
    ``num`` (7 digits; ``n3``: its first 3, ``n4`` and ``n5``: its last 4 and 5) and a drawn
    date ``year``, ``yy``, ``month``, ``day``.
    """

    site: str
    host: str
    path: str


PUBLISHERS: dict[str, tuple[Publisher, ...]] = {
    "guideline": (
        Publisher("Joint Council on Clinical Practice Standards", "www.jccps-guidance.example",
                  "/guidance/jccps{n4}/recommendations/{words}-{n3}"),
        Publisher("Association for Evidence-Based Care", "www.aebc-standards.example",
                  "/standards/{year}/{words}-{n5}"),
        Publisher("Clinical Protocols Consortium", "protocols.cpc-medicine.example",
                  "/protocols/cpc-{n4}/{words}-{n3}"),
    ),
    "forum": (
        Publisher("ClinicianExchange", "forum.clinicianexchange.example", "/t/{words}/{num}"),
        Publisher("WardRounds Community", "community.wardrounds.example", "/t/{words}/{num}"),
        Publisher("MedBoard Discussions", "www.medboard-talk.example", "/threads/{words}.{num}/"),
    ),
    "preprint": (
        Publisher("ClinPrint", "www.clinprint.example", "/content/10.5555/{year}.{month}.{day}.{num}v1"),
        Publisher("OpenMed Archive", "openmedarchive.example", "/abs/{yy}{month}.{n5}v1"),
        Publisher("HealthSci Preprints", "preprints.healthsci.example", "/manuscript/{year}{num}/v1"),
    ),
    "blog": (
        Publisher("The Well-Informed Patient", "wellinformedpatient.example", "/{year}/{month}/{words}/"),
        Publisher("Living With It", "livingwithit-notes.example", "/blog/{words}-{n5}"),
        Publisher("Second Opinion Diaries", "secondopiniondiaries.example", "/posts/{year}-{month}-{day}-{words}"),
    ),
    "encyclopedia": (
        Publisher("Healthpedia", "www.healthpedia.example", "/article/{num}/{words}"),
        Publisher("ClinicalWiki", "clinicalwiki.example", "/w/{words}-{num}"),
        Publisher("MedEncyclo", "medencyclo.example", "/entries/{num}-{words}"),
    ),
}
"""Three fictional publishers per style; a page's is drawn from a hash of (seed, case, style)."""


def _hash(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "big")


def slug(text: str, words: int = 6) -> str:
    """URL path words for ``text``: lower-case letters and digits joined by ``-`` (other
    scripts kept and percent-encoded, as such sites do), at most ``words`` words."""
    norm = unicodedata.normalize("NFKC", text).casefold()
    parts = re.findall(r"[^\W_]+", norm)[:words]
    return quote("-".join(parts), safe="-")


def page_address(item_key: str, target: str, option: str, style: str, seed: int) -> tuple[Publisher, str]:
    """The publisher and absolute URL of a case's page in ``style`` (deterministic: drawn from
    (seed, case, style); two pages share a URL only by a hash collision, which
    :func:`_order_rows` settles)."""
    h = _hash(seed, "page", case_key(item_key, target), style)
    choices = PUBLISHERS[style]
    pub = choices[h % len(choices)]
    n = h // len(choices)
    num = n % 10**7
    year = 2023 + n // 10**7 % 3
    path = pub.path.format(
        words=slug(option) or "page", num=f"{num:07d}", n3=f"{num // 10**4:03d}", n4=f"{num % 10**4:04d}",
        n5=f"{num % 10**5:05d}", year=year, yy=f"{year % 100:02d}",
        month=f"{1 + n // 10**8 % 12:02d}", day=f"{1 + n // 10**9 % 28:02d}",
    )
    return pub, f"https://{pub.host}{path}"


def answer_text(option: str, position: int) -> str:
    """An option's text without the display letter some releases keep (HLE options extracted
    as ``"B) Plasma cell"``): stripped only in the ``X)`` / ``(X)`` form and only when the letter
    is the option's own (so ``"A. baumannii"`` stays)."""
    letter = chr(ord("A") + position) if position < 26 else ""
    found = re.match(rf"\(?{letter}\)\s+(\S.*)$", option.strip(), flags=re.I | re.S) if letter else None
    return found.group(1) if found else option


@dataclass(frozen=True)
class PageJob:
    """One page to write: a Type 1 case (item, target) in one style, at its address."""

    item: Item
    target: str
    style: str
    site: str
    url: str

    @property
    def case_key(self) -> str:
        return case_key(self.item.key, self.target)

    @property
    def id(self) -> str:
        return f"{self.case_key}/{self.style}"

    @property
    def claim(self) -> str:
        return self.item.contexts[self.target]

    @property
    def option(self) -> str:
        """The target option's text as a page would write it (:func:`answer_text`)."""
        return answer_text(self.item.options[self.target], list(self.item.options).index(self.target))

    def prompt(self) -> str:
        others = [answer_text(v, i) for i, (k, v) in enumerate(self.item.options.items()) if k != self.target]
        return P.page_prompt(self.item.question, self.option, self.claim, others, self.style, self.site,
                             self.item.language)


@dataclass
class PageOutcome(SidecarRow):
    """The result for one page, as written to the sidecar."""

    id: str
    case_key: str
    style: str
    status: PageStatus = "error"
    reason: str | None = None
    row: dict[str, Any] | None = None
    replies: list[dict[str, Any]] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0


def _normal(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def check_page(reply: PageReply, option: str) -> PageReply:
    """A page must name the answer it argues for, word for word (what the prompt asks; a
    refusal or an off-topic page does not).

    Raises:
        ReplyError: The text does not contain the option's text.
    """
    if _normal(option) not in _normal(reply.text):
        raise ReplyError(f"page text does not name the option it argues for ({option!r})")
    return reply


class PagePipeline:
    """Writes :class:`PageJob` s with a generator model (one schema-constrained call each)."""

    def __init__(self, model: Any, generator: str, retry: RetryPolicy | None = None) -> None:
        self.model = model
        self.generator = generator
        self.retry = retry or RetryPolicy()

    async def run(self, job: PageJob) -> PageOutcome:
        """Write one page; provider failures after retries are ``error`` (retried on resume)."""
        out = PageOutcome(job.id, job.case_key, job.style)
        try:
            schema = page_schema()
            text, tin, tout = await structured_call(self.model, job.prompt(), schema, self.retry)
            out.input_tokens, out.output_tokens, out.calls = tin, tout, 1
            out.replies.append({"step": "page", "schema": schema["name"], "text": text})
            reply = check_page(parse_reply(text, PageReply), job.option)
            page = PoisonedPage(
                id=job.id, case_key=job.case_key, item_key=job.item.key, target=job.target,
                style=job.style, claim=job.claim, title=reply.title, url=job.url, text=reply.text,
                site=job.site, generator=self.generator, synthetic=True,
            )
            out.row = page.model_dump(mode="json")
            out.status = "generated"
        except ReplyError as exc:
            out.status, out.reason = "malformed", str(exc)
        except Exception as exc:  # provider and SDK failures, after the retry policy gave up
            out.status, out.reason = "error", f"{type(exc).__name__}: {exc}"[:300]
        return out


@dataclass(kw_only=True)
class PagesConfig(GenerationSettings):
    """Everything that decides what ``medmis generate pages`` writes (see :func:`fingerprint`)."""

    from_release: Path
    styles: tuple[str, ...] = PAGE_STYLES


def type1_targets(item: Item) -> list[str]:
    """An item's Type 1 targets: every wrong option with a false sentence (``--type1-targets all``)."""
    return [k for k in item.wrong_keys if item.contexts.get(k)]


def build_jobs(cfg: PagesConfig) -> list[PageJob]:
    """One job per (Type 1 case, style), cases in release order, styles in ``PAGE_STYLES`` order."""
    from medmis.experiments.benchmark import load_dataset

    bad = [s for s in cfg.styles if s not in PAGE_STYLES]
    if bad or not cfg.styles:
        raise ConfigError(f"unknown page style {', '.join(bad) or '(none)'} (use {','.join(PAGE_STYLES)})")
    items = load_dataset(cfg.from_release, subset=cfg.subset).items
    if cfg.limit is not None:
        items = items[: cfg.limit]
    styles = [s for s in PAGE_STYLES if s in cfg.styles]
    jobs = []
    for item in items:
        for target in type1_targets(item):
            for style in styles:
                option = answer_text(item.options[target], list(item.options).index(target))
                pub, url = page_address(item.key, target, option, style, cfg.seed)
                jobs.append(PageJob(item, target, style, pub.site, url))
    return jobs


def fingerprint(cfg: PagesConfig) -> dict[str, Any]:
    """What a resumed file must share (``--limit`` and ``--styles`` may grow it)."""
    from medmis.tools import scrub_url

    return {
        "mode": "pages",
        "data_sha256": _hash_path(cfg.from_release),
        "subset": cfg.subset,
        "seed": cfg.seed,
        "generator": cfg.generator,
        "base_url": scrub_url(cfg.base_url) if cfg.base_url else None,
        "endpoint": _endpoint(cfg),
        "temperature": cfg.temperature,
        "prompts": [f"{P.PAGES_VERSION.name}@{P.PAGES_VERSION.version}"],
    }


def estimate(jobs: Sequence[PageJob], cfg: PagesConfig) -> dict[str, Any]:
    """Calls, tokens and cost a run would need, from the prompts themselves (``--dry-run``)."""
    from medmis.agents import estimate_tokens

    tokens_in = sum(estimate_tokens(j.prompt()) for j in jobs)
    tokens_out = OUTPUT_TOKENS * len(jobs)
    return {"mode": "pages", "cases": len({j.case_key for j in jobs}), "pages": len(jobs),
            "calls": len(jobs), "input_tokens": tokens_in, "output_tokens": tokens_out,
            "usd": _usd(cfg.price, tokens_in, tokens_out)}


def generate_pages(cfg: PagesConfig) -> int:
    """Run ``medmis generate pages``; returns the exit status (0, 1 page errors, 3 stopped)."""
    check_budget(cfg)
    jobs = build_jobs(cfg)
    fp = fingerprint(cfg)
    store = open_store(cfg)
    model = _model(cfg, cfg.temperature, store)  # before any file: a missing key creates nothing

    def finish(previous: dict[str, Any] | None, stopped: bool) -> dict[str, Any]:
        _order_rows(cfg, jobs)
        return _write_manifest(cfg, fp, previous, stopped)

    # final = generated (and its row is on disk) or malformed; errors are retried
    errors, stopped, totals = run_pending(cfg, fp, jobs, PagePipeline(model, cfg.generator, retry_policy(cfg)), store,
                                          job_key=lambda j: j.id, row_key=lambda r: r["id"], final=FINAL,
                                          finish=finish)
    return exit_status("medmis generate pages", f"{totals['generated']} pages ({totals['cases']} cases), "
                       f"{totals['malformed']} malformed, {totals['error']} errors -> {cfg.out}",
                       stopped=stopped, failed=bool(errors or totals["error"] or totals["malformed"]))


def _order_rows(cfg: PagesConfig, jobs: Sequence[PageJob]) -> None:
    """Rewrite the pages in case then style order, one per page id (the last written wins),
    every URL once (a rare hash collision gets ``-2`` ... in that order), atomically."""
    order = {j.id: i for i, j in enumerate(jobs)}
    latest = {r["id"]: r for r in _read_jsonl(cfg.out)}
    ranked = sorted(latest.values(), key=lambda r: (order.get(r["id"], len(order)), r["id"]))
    seen: set[str] = set()
    for row in ranked:
        url, n = row["url"], 1
        while url in seen:
            n += 1
            url = f"{row['url'].rstrip('/')}-{n}"
        row["url"] = url
        seen.add(url)
    replace_rows(cfg.out, (redact_json(r) for r in ranked))


def _write_manifest(cfg: PagesConfig, fp: dict[str, Any], previous: dict[str, Any] | None,
                    stopped: bool) -> dict[str, Any]:

    every = _read_jsonl(cfg.side(".generation.jsonl"))
    latest = {o["id"]: o for o in every}
    rows = _read_jsonl(cfg.out)
    tin = sum(o["input_tokens"] for o in every)
    tout = sum(o["output_tokens"] for o in every)
    totals: dict[str, Any] = {s: sum(o["status"] == s for o in latest.values())
                              for s in ("generated", "malformed", "error")}
    totals.update(cases=len({r["case_key"] for r in rows}),
                  styles=[s for s in PAGE_STYLES if any(r["style"] == s for r in rows)],
                  calls=sum(o["calls"] for o in every), input_tokens=tin, output_tokens=tout,
                  usd=_usd(cfg.price, tin, tout))
    write_manifest_file(cfg, fp, previous, stopped, totals, {
        "prompt_versions": {P.PAGES_VERSION.name: {"version": P.PAGES_VERSION.version,
                                                   "source": P.PAGES_VERSION.source}},
        "synthetic": "pages that argue for false claims, written only to evaluate defenses",
    })
    return totals
