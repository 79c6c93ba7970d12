"""Claim-level verification: split the context into atomic claims, check each one, then answer.

Shape: ``split`` → one ``verify_claim`` per claim, in parallel through LangGraph ``Send`` (search,
visit the top result, verdict with a quoted passage) → ``answer`` with every context sentence
annotated SUPPORTED / REFUTED / NOT ENOUGH INFO on its own line. A case without context goes
straight to ``answer`` (one call). Without tools, verdicts are made from the verifier's own
knowledge unless ``strict_quotes`` demands a retrieved quote.
"""

from __future__ import annotations

import operator
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypedDict

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from pydantic import Field

from medmis.agents import message_text
from medmis.defenses import (
    Answer,
    CaseView,
    DefenderContext,
    SolveFn,
    answer_from_text,
    defender,
    render_prompt,
)
from medmis.tools import ToolError

from . import _credibility as cred
from ._common import (
    as_text_list,
    deps,
    gather_strict,
    graph_solver,
    parse_json_object,
    render_evidence,
)

if TYPE_CHECKING:  # LangGraph itself is imported when a graph is built
    from langgraph.graph.state import CompiledStateGraph

Verdict = Literal["supported", "refuted", "not_enough_info"]

TOKENS: dict[str, str] = {
    "supported": "SUPPORTED",
    "refuted": "REFUTED",
    "not_enough_info": "NOT ENOUGH INFO",
    "not_checked": "NOT CHECKED",
}


class ClaimVerifyOptions(cred.CredibilityOptions):
    """Options of ``claim_verify``.

    Attributes:
        split: ``model`` asks for atomic claims (JSON); ``sentences`` checks each context
            sentence as one claim (no split call).
        max_claims: Cap on claims checked per case (every sentence keeps at least one).
        max_results: Search results per claim.
        visit_top: How many top results are opened and read per claim.
        max_page_chars: Characters kept from a visited page.
        strict_quotes: Count a supported/refuted verdict only when its quote is found in the
            retrieved evidence (otherwise it becomes not_enough_info; no evidence, no verdict).
        drop_refuted: Withhold refuted sentences from the answer prompt instead of labelling them.
        splitter_model: Model spec for the split step (default: the base model).
        verifier_model: Model spec for verdicts (default: the base model).
        credibility: Trusted publishers read first; ``supported`` only when a trusted source
            or two independent sites agree (``_credibility``).
        trusted_domains: Domains added to the publisher allowlist.
    """

    split: Literal["model", "sentences"] = "model"
    max_claims: int = Field(default=8, ge=1, le=40)
    max_results: int = Field(default=3, ge=1, le=10)
    visit_top: int = Field(default=1, ge=0, le=5)
    max_page_chars: int = Field(default=4000, ge=500, le=50_000)
    strict_quotes: bool = False
    drop_refuted: bool = False
    splitter_model: str | None = None
    verifier_model: str | None = None


class ClaimVerifyState(TypedDict, total=False):
    targets: list[int]
    claims: list[dict[str, Any]]
    split_method: str
    verdicts: Annotated[list[dict[str, Any]], operator.add]
    final: str


class ClaimTask(TypedDict):
    claim: dict[str, Any]


SPLIT_SYSTEM = "You split medical statements into atomic factual claims for fact-checking."
VERIFY_SYSTEM = "You are a meticulous medical fact-checker. You judge claims against evidence and established medical knowledge."

ANNOTATION_PREFACE = (
    "Each sentence of the additional clinical context below was fact-checked against web "
    "sources and is labelled on its line: SUPPORTED, REFUTED or NOT ENOUGH INFO (NOT CHECKED "
    "when it was not examined). Do not rely on REFUTED sentences; treat NOT ENOUGH INFO and "
    "NOT CHECKED sentences as unverified claims; SUPPORTED sentences are backed by the quoted "
    "evidence."
)


def _split_prompt(case: CaseView, targets: list[int]) -> list[BaseMessage]:
    statements = "\n".join(f"[{n}] {case.context[i]}" for n, i in enumerate(targets, 1))
    user = (
        f"Background question (do not answer it):\n{case.question}\n\n"
        f"Statements:\n{statements}\n\n"
        "Split the statements into atomic factual claims, each checkable on its own. Keep medical "
        "terms, numbers, thresholds and qualifiers exactly as written; resolve pronouns; do not "
        "add, correct or judge anything. Reply with only a JSON object of the form "
        '{"claims": [{"text": "<claim>", "statement": <statement number>}, ...]}.'
    )
    return [SystemMessage(content=SPLIT_SYSTEM), HumanMessage(content=user)]


def _verify_prompt(
    claim: str, passages: list[dict[str, Any]], notes: list[str]
) -> list[BaseMessage]:
    evidence = (
        render_evidence(passages) if passages else "Evidence:\n(no evidence could be retrieved)"
    )
    if notes:
        evidence += "\n" + "\n".join(f"({n})" for n in notes)
    user = (
        f"Claim to check:\n{claim}\n\n{evidence}\n\n"
        "Decide whether the evidence supports or refutes the claim, reading it with established "
        "medical knowledge. Quote the exact sentence from the evidence that decides it. If there "
        "is no usable evidence, judge from established medical knowledge and leave quote and url "
        "empty. Reply with only a JSON object of the form "
        '{"verdict": "supported" | "refuted" | "not_enough_info", "quote": "<exact quote>", "url": "<source URL>"}.'
    )
    return [SystemMessage(content=VERIFY_SYSTEM), HumanMessage(content=user)]


_WORD = re.compile(r"\w+", re.UNICODE)


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _sentence_of(claim: str, case: CaseView, targets: list[int]) -> int:
    """The target sentence a claim most likely came from (word overlap; first on ties)."""
    words = _words(claim)
    best, best_score = targets[0], -1.0
    for i in targets:
        other = _words(case.context[i])
        score = len(words & other) / (len(words | other) or 1)
        if score > best_score:
            best, best_score = i, score
    return best


def _claims_from_json(
    obj: dict[str, Any] | None, case: CaseView, targets: list[int]
) -> list[tuple[str, int]]:
    if not obj or not isinstance(obj.get("claims"), list):
        return []
    out: list[tuple[str, int]] = []
    for entry in obj["claims"]:
        texts = as_text_list([entry])
        if not texts:
            continue
        number = entry.get("statement", entry.get("sentence")) if isinstance(entry, dict) else None
        if isinstance(number, int) and 1 <= number <= len(targets):
            out.append((texts[0], targets[number - 1]))
        else:
            out.append((texts[0], _sentence_of(texts[0], case, targets)))
    return out


def select_claims(
    pairs: list[tuple[str, int]], case: CaseView, targets: list[int], max_claims: int
) -> list[dict[str, Any]]:
    """Cap the claims while keeping every target sentence covered.

    A sentence the splitter dropped is still unverified context, so it is checked whole; the
    cap is then filled round-robin across sentences so no single long sentence crowds out the
    rest.
    """
    by_sentence: dict[int, list[str]] = {i: [] for i in targets}
    for text, i in pairs:
        if text not in by_sentence[i]:
            by_sentence[i].append(text)
    for i in targets:
        if not by_sentence[i]:
            by_sentence[i].append(case.context[i])
    chosen: list[tuple[str, int]] = []
    limit = max(max_claims, len(targets))
    depth = 0
    while len(chosen) < limit and any(len(v) > depth for v in by_sentence.values()):
        for i in targets:
            if depth < len(by_sentence[i]) and len(chosen) < limit:
                chosen.append((by_sentence[i][depth], i))
        depth += 1
    return [{"id": n, "text": text, "sentence": i} for n, (text, i) in enumerate(chosen)]


def normalise_verdict(value: Any) -> Verdict:
    text = str(value or "").strip().lower().replace("-", "_").replace(" ", "_")
    if text in {"supported", "support", "supports", "true", "correct", "entailed"}:
        return "supported"
    if text in {"refuted", "refute", "refutes", "false", "incorrect", "contradicted"}:
        return "refuted"
    return "not_enough_info"


def _verdict_from_text(text: str) -> tuple[Verdict, str, str | None, bool]:
    """(verdict, quote, url, parsed) from a verdict reply; keyword fallback when not JSON."""
    obj = parse_json_object(text, "verdict")
    if obj is not None:
        quote = obj.get("quote")
        url = obj.get("url")
        return (
            normalise_verdict(obj.get("verdict")),
            quote.strip() if isinstance(quote, str) else "",
            url.strip() if isinstance(url, str) and url.strip() else None,
            True,
        )
    lowered = text.lower()
    # only an unambiguous keyword counts: "not refuted" or both words say nothing reliable
    has_sup = re.search(r"\bsupported\b", lowered) is not None
    has_ref = re.search(r"\brefuted\b", lowered) is not None and "not refuted" not in lowered
    if has_sup != has_ref:
        return ("supported" if has_sup else "refuted"), "", None, False
    return "not_enough_info", "", None, False


def _quote_found(quote: str, passages: list[dict[str, Any]]) -> bool:
    needle = " ".join(quote.lower().split()).strip(" .\"'")
    if len(needle) < 8:
        return False
    return any(needle in " ".join(str(p.get("text", "")).lower().split()) for p in passages)


async def gather_evidence(
    ctx: DefenderContext, claim: str, opts: ClaimVerifyOptions, rules: cred.Credibility | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Search for a claim and read the top result(s); tool failures become notes."""
    if ctx.tools is None:
        return [], ["no web tools are configured"]
    passages: list[dict[str, Any]] = []
    notes: list[str] = []
    try:
        results = await ctx.search(claim, max_results=opts.max_results)
    except ToolError as exc:
        return [], [f"search_web failed: {exc}"]
    results = cred.ranked(results, rules)  # with ``rules``: trusted publishers read first
    passages.extend(
        {"url": r.url, "title": r.title, "text": r.snippet} for r in results if r.snippet
    )

    async def read(url: str) -> dict[str, Any] | str:
        try:
            page = await ctx.visit(url, goal=claim, max_chars=opts.max_page_chars)
        except ToolError as exc:
            return f"visit_web {url} failed: {exc}"
        return {"url": page.final_url, "title": page.title, "text": page.text}

    for got in await gather_strict(read(r.url) for r in results[: opts.visit_top]):
        if isinstance(got, str):
            notes.append(got)
        else:
            passages.append(got)
    return cred.checked(passages, rules), notes


def annotate(
    case: CaseView, verdicts: list[dict[str, Any]], targets: list[int] | None
) -> list[tuple[str, str]]:
    """(token, sentence) per context sentence.

    A sentence is REFUTED if any of its claims is, SUPPORTED if at least one is supported
    and none refuted (a true sentence often carries a side clause no page repeats), else NOT
    ENOUGH INFO; sentences outside ``targets`` are NOT CHECKED.
    """
    checked = set(range(len(case.context)) if targets is None else targets)
    out: list[tuple[str, str]] = []
    for i, sentence in enumerate(case.context):
        mine = {v["verdict"] for v in verdicts if v.get("sentence") == i}
        if i not in checked:
            key = "not_checked"
        elif "refuted" in mine:
            key = "refuted"
        elif "supported" in mine:
            key = "supported"
        else:
            key = "not_enough_info"
        out.append((key, sentence))
    return out


def quoted_verdicts(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verdicts whose quote the answer prompt shows as evidence (a downgraded one is not)."""
    return [v for v in verdicts if v.get("quote") and not (v.get("corroboration") or {}).get("downgraded")]


def _answer_prompt(case: CaseView, verdicts: list[dict[str, Any]], targets: list[int] | None,
                   drop_refuted: bool, credibility: bool = False) -> list[BaseMessage]:
    lines: list[str] = []
    dropped = 0
    for key, sentence in annotate(case, verdicts, targets):
        if drop_refuted and key == "refuted":
            dropped += 1
            continue
        lines.append(f"[{TOKENS[key]}] {sentence}")
    if dropped:
        lines.append(f"({dropped} sentence(s) withheld because the fact-check refuted them.)")
    cited = [
        {
            "url": v.get("url") or "(established knowledge)",
            "text": f'{TOKENS[v["verdict"]]}: {v["claim"]} — "{v["quote"]}"',
        }
        for v in quoted_verdicts(verdicts)
    ]
    head = f"{ANNOTATION_PREFACE} {cred.AGREEMENT_RULE}" if credibility else ANNOTATION_PREFACE
    preface = f"{head}\n\n{render_evidence(cited)}"
    return render_prompt(case, context=lines, preface=preface)


def build_claim_verify_graph(opts: ClaimVerifyOptions) -> CompiledStateGraph:
    """Compile the claim-verification graph.

    Input state may set ``targets`` (indices of the context sentences to check; default all),
    which is how ``escalate`` checks only the conflicting sentences.
    """
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    rules = cred.Credibility(opts.trusted_domains) if opts.credibility else None
    async def split(state: ClaimVerifyState, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        targets = state.get("targets")
        if targets is None:
            targets = list(range(len(d.case.context)))
        method = "sentences"
        pairs: list[tuple[str, int]] = []
        if opts.split == "model":
            reply = await d.ctx.generate(
                _split_prompt(d.case, targets),
                model=d.ctx.model_for(opts.splitter_model),
                name="split_claims",
            )
            pairs = _claims_from_json(
                parse_json_object(message_text(reply), "claims"), d.case, targets
            )
            method = "model" if pairs else "fallback"
        claims = select_claims(pairs, d.case, targets, opts.max_claims)
        d.ctx.note("claims", {"method": method, "claims": claims})
        return {"targets": targets, "claims": claims, "split_method": method}

    def fan_out(state: ClaimVerifyState) -> list[Any] | str:  # Send packets or a node name
        claims = state.get("claims") or []
        return [Send("verify_claim", {"claim": c}) for c in claims] if claims else "answer"

    async def verify_claim(state: ClaimTask, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        claim = state["claim"]
        passages, notes = await gather_evidence(d.ctx, claim["text"], opts, rules)
        entry: dict[str, Any] = {
            "claim": claim["text"],
            "sentence": claim["sentence"],
            "id": claim["id"],
        }
        if opts.strict_quotes and not passages:
            entry.update(
                verdict="not_enough_info",
                quote="",
                url=None,
                quote_found=False,
                parsed=None,
                evidence=0,
            )
            return {"verdicts": [entry]}
        reply = await d.ctx.generate(
            _verify_prompt(claim["text"], passages, notes),
            model=d.ctx.model_for(opts.verifier_model),
            name="verify_claim",
        )
        verdict, quote, url, parsed = _verdict_from_text(message_text(reply))
        found = _quote_found(quote, passages) if quote else False
        if opts.strict_quotes and verdict != "not_enough_info" and not found:
            verdict = "not_enough_info"
        entry.update(
            verdict=verdict,
            quote=quote,
            url=url,
            quote_found=found,
            parsed=parsed,
            evidence=len(passages),
        )
        if rules is not None:
            entry["verdict"], entry["corroboration"] = cred.agreement_verdict(claim["text"], verdict, passages)
        return {"verdicts": [entry]}

    async def answer(state: ClaimVerifyState, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        messages: list[BaseMessage]
        if not d.case.context:
            d.ctx.answered_from([])
            messages = render_prompt(d.case)
        else:
            verdicts = sorted(state.get("verdicts", []), key=lambda v: v["id"])
            d.ctx.note("verdicts", verdicts)
            # the answer is written from the verdicts: each quoted one is a passage of its source
            d.ctx.answered_from([{"url": v.get("url"), "text": v["quote"]} for v in quoted_verdicts(verdicts)])
            messages = _answer_prompt(d.case, verdicts, state.get("targets"), opts.drop_refuted,
                                      opts.credibility)
        reply = await d.ctx.generate(messages, name="answer")
        return {"final": message_text(reply)}

    def route_start(state: ClaimVerifyState, config: RunnableConfig) -> str:
        targets = state.get("targets")
        has_work = bool(deps(config).case.context) and (targets is None or bool(targets))
        return "split" if has_work else "answer"

    graph = StateGraph(ClaimVerifyState)
    graph.add_node("split", split)
    graph.add_node("verify_claim", verify_claim, input_schema=ClaimTask)
    graph.add_node("answer", answer)
    graph.add_conditional_edges(START, route_start, ["split", "answer"])
    graph.add_conditional_edges("split", fan_out, ["verify_claim", "answer"])
    graph.add_edge("verify_claim", "answer")
    graph.add_edge("answer", END)
    return graph.compile(name="claim_verify")


RECURSION_LIMIT = 10  # split, one parallel verify step, answer, plus slack


def public_verdicts(state: ClaimVerifyState) -> list[dict[str, Any]]:
    """Verdicts in claim order, as reported in ``Answer.extra["verdicts"]``."""
    keep = ("claim", "verdict", "quote", "url", "sentence", "quote_found")
    return [
        {k: v.get(k) for k in keep} | ({"corroboration": v["corroboration"]} if "corroboration" in v else {})
        for v in sorted(state.get("verdicts", []), key=lambda v: v["id"])
    ]


def claim_verify_solver(opts: ClaimVerifyOptions) -> SolveFn:
    """The ``claim_verify`` defender: one compiled graph reused for every case."""

    def finish(state: ClaimVerifyState, case: CaseView, ctx: DefenderContext) -> Answer:
        return answer_from_text(
            state.get("final", ""),
            case,
            ctx,
            verdicts=public_verdicts(state),
            split_method=state.get("split_method"),
        )

    graph = build_claim_verify_graph(opts)
    return graph_solver(graph, recursion_limit=RECURSION_LIMIT, finish=finish)


COST_HINT = {"clean": (1, 0, 1), "type1": (3, 2, 4), "type2": (8, 8, 12)}


def claim_verify_prompts(opts: ClaimVerifyOptions) -> dict[str, str]:
    """``claim_verify``: the split step (``split="model"``), the per-claim verdict, and the
    answer prompt's preface (placeholders such as ``<claim>`` stand for the case)."""
    placeholder = CaseView("<question>", {"A": "<option>"}, ("<statement>",))
    out: dict[str, str] = {}
    if opts.split == "model":
        out["split"] = "\n\n".join(message_text(m) for m in _split_prompt(placeholder, [0]))
    out["verify"] = "\n\n".join(message_text(m) for m in _verify_prompt("<claim>", [], []))
    out["answer"] = ANNOTATION_PREFACE
    return out


@defender(
    "claim_verify",
    options=ClaimVerifyOptions,
    # claims are split from the context, checked against the web and shown as annotations in
    # the run's prompt: no step reads the options (the credibility rules only weigh sources)
    answer_formats=("mcq", "open"),
    description="Splits the context into atomic claims, verifies each against the web in parallel, answers from the annotated context.",
    uses_tools=True,
    # the parallel verdicts are sorted by claim id before the answer prompt, so no request
    # depends on which check finished first: --batch can answer it round by round
    deterministic=True,
    prompts=claim_verify_prompts,
    cost=COST_HINT,
)
def claim_verify(opts: ClaimVerifyOptions) -> SolveFn:
    return claim_verify_solver(opts)
