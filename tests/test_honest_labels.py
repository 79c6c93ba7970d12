"""One metric definition across compare and the metrics; the simulated-examinee statement on
every surface (compare, view, plots, review plots); exact sign-flip p-values."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from medmis.experiments import Record
from medmis.experiments.analysis import compare_records, compute_metrics
from medmis.experiments.analysis._cluster import _sign_flip_exact, cluster_sign_test

pytestmark = pytest.mark.figures  # these draw the report's figures for real (tests/conftest.py)


def _recs(model: str, unparsed_t1: set[int]) -> list[Record]:
    out = []
    for i in range(6):
        base = {"model": model, "defender": "none", "item_id": f"q{i}", "subset": "MEDMISQA", "gold": "A"}
        out.append(Record(protocol="clean", choice="A", correct=True, **base))
        choice = None if i in unparsed_t1 else "A"
        out.append(Record(protocol="type1", target="B", choice=choice, correct=choice == "A", **base))
    return out


def test_compare_counts_an_unparsed_answer_under_attack_as_a_flip_like_the_metrics() -> None:
    a, b = _recs("m", set()), _recs("m", {0, 1})
    row = next(r for r in compare_records(a, b) if r.metric == "type1_asr")
    asr = compute_metrics(b, n_boot=50).results["m"]["none"].metrics["type1_asr"]
    assert (row.n, row.b) == (6, 2 / 6) and (asr.k, asr.n) == (2, 6)  # was 4 units, B = 0


def test_every_report_plot_and_the_compare_plot_carry_the_mark(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from medmis.experiments.generate import _compare
    from medmis.experiments.reporting import _plots, _simulated

    marked: list[object] = []
    real = _simulated.mark_simulated

    def spy(fig: object) -> None:
        marked.append(fig)
        real(fig)  # type: ignore[arg-type]

    monkeypatch.setattr(_plots, "mark_simulated", spy)
    monkeypatch.setattr(_compare, "mark_simulated", spy)
    for model, want in (("mock/examinee", len(_plots.PLOT_FILES)), ("openai/x", 0)):
        marked.clear()
        records = _recs(model, {0})
        metrics = compute_metrics(records, n_boot=50).to_json_dict()
        _plots.draw_plots(tmp_path, metrics, list(_plots.PLOT_FILES))
        assert len(marked) == want
    marked.clear()
    rows = compare_records(_recs("mock/examinee", set()), _recs("mock/examinee", {0}))
    _compare.plot(rows, tmp_path / "c.png", simulated=True)
    assert len(marked) == 1
    assert "SIMULATED EXAMINEE" in _compare.to_csv(rows, simulated=True).splitlines()[0]
    assert not _compare.to_csv(rows).startswith("#")


def test_view_facets_carry_the_statement(tmp_path: Path) -> None:
    from medmis.experiments.records import append_records
    from medmis.experiments.view import RunView

    for model, simulated in (("mock/examinee", True), ("openai/x", False)):
        run = tmp_path / model.replace("/", "_")
        run.mkdir()
        append_records(run / "records.jsonl", _recs(model, set()))
        view = RunView(run)
        try:
            facets = view.facets()
        finally:
            view.close()
        assert (facets["simulated"] or "").startswith("SIMULATED EXAMINEE") == simulated


@pytest.mark.parametrize("m", [17, 40, 300])
def test_sign_flip_is_exact_beyond_enumeration(m: int) -> None:
    rng = np.random.default_rng(m)
    nz = (rng.integers(1, 4, m) * rng.choice([-1, 1], m)).astype(float)
    obs = abs(nz.sum())
    got = _sign_flip_exact(nz, obs - 1e-9)
    if m == 17:  # against all 2^17 patterns
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=m)))
        assert got == pytest.approx(float((np.abs(signs @ nz) >= obs - 1e-9).mean()), abs=1e-12)
    assert got is not None and 0 < got <= 1
    # a clustered test beyond 16 items: exact, not Monte-Carlo, and below the 1/20,001 floor
    x = np.repeat([1, 0], [3 * 30, 3 * 10]).astype(int)
    y = np.zeros_like(x)
    y[::3] = 1
    x[::7] = 1
    p, method = cluster_sign_test(x, y, np.repeat(np.arange(40), 3))
    assert method == "sign_flip_exact" and p < 1 / 20001
