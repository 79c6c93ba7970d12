"""``write_plots`` on small hand-written ``metrics.json`` dicts, missing data included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from medmis.experiments.analysis import wilson
from medmis.experiments.reporting._plots import (
    PLOT_FILES,
    PLOTS_DIR,
    cost_axis,
    defender_order,
    draw_plots,
    write_plots,
)

pytestmark = pytest.mark.figures  # these draw the report's figures for real (tests/conftest.py)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CT = ("Cue Remapping", "Exception Poisoning", "A content type the paper never named")
PV = ("Neutral False Statement", "Authority (Guideline / Discharge Note / SOP)")
JOIN = " × "


def prop(k: int, n: int) -> dict[str, Any]:
    ci = wilson(k, n)
    if ci is None:
        return {"value": None, "k": 0, "n": 0, "lo": None, "hi": None}
    return {"value": k / n, "k": k, "n": n, "lo": ci[0], "hi": ci[1]}


def block(t1: tuple[int, int], t2: tuple[int, int], *, clean: tuple[int, int] = (8, 10),
          recovery: tuple[int, int] = (1, 2), tokens: float | None = 300.0,
          calls: float | None = 1.0, paired_diff: float | None = None,
          strata: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "clean_acc": prop(*clean), "type1_acc": prop(5, 10), "type2_acc": prop(7, 10),
        "type1_asr": prop(*t1), "type1_tasr": prop(t1[0], t1[1]), "type2_asr": prop(*t2),
        "type2_recovery": prop(*recovery), "unparsed_rate": prop(0, 30),
        "error_rate": prop(0, 30),
        "cost": {"cases": 30, "tokens_per_case": tokens, "llm_calls_per_case": calls,
                 "tool_calls_per_case": 0.0},
        "paired": {},
    }
    if paired_diff is not None:
        out["paired"] = {"type1_asr": {"baseline": "none", "n": 8, "diff": paired_diff,
                                       "lo": paired_diff - 0.2, "hi": min(1.0, paired_diff + 0.2),
                                       "b": 0, "c": 3, "p_value": 0.25}}
    if strata:
        crossed = {
            # one cell left out entirely, one present with n = 0: both must draw as blanks
            CT[0] + JOIN + PV[0]: {"type1_asr": prop(t1[0], max(t1[1], 1))},
            CT[1] + JOIN + PV[1]: {"type1_asr": prop(0, 0)},
            CT[2] + JOIN + PV[0]: {"type1_asr": prop(1, 3)},
        }
        out["strata"] = {
            "content_type": {c: {"type1_asr": prop(1, 2)} for c in CT},
            "provenance": {p: {"type1_asr": prop(1, 2)} for p in PV},
            "content_type_x_provenance": crossed,
        }
    return out


def sample_metrics() -> dict[str, Any]:
    return {
        "openai/gpt-x": {
            "none": block((6, 8), (2, 8), tokens=250.0),
            "warning": block((3, 8), (1, 8), tokens=300.0, paired_diff=-0.375),
            # an agent: 40x the tokens, so the cost axis goes logarithmic
            "search_agent[max_iterations=6]": block((1, 8), (0, 8), tokens=10_000.0,
                                                     paired_diff=-0.625, strata=False),
            # nothing defined: every point of this defender is skipped
            "broken": block((0, 0), (0, 0), clean=(0, 0), recovery=(0, 0), tokens=None,
                            calls=None, strata=False),
        },
        "mock/examinee": {
            "none": block((4, 8), (0, 0), recovery=(0, 0), tokens=0.0, calls=1.0),
            "context_blind": block((0, 8), (0, 8), tokens=0.0, calls=1.0, paired_diff=-0.5),
        },
    }


def _assert_pngs(paths: dict[str, Path], run_dir: Path) -> None:
    assert set(paths) == set(PLOT_FILES)
    for key, path in paths.items():
        assert path == run_dir / PLOTS_DIR / PLOT_FILES[key]
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC), key
        assert len(data) > 2000, key
        # no "Software: matplotlib x.y" chunk: equal input gives equal bytes everywhere
        assert b"Software" not in data[:4096]
    assert not list((run_dir / PLOTS_DIR).glob("*.tmp"))


def test_every_plot_is_a_png(tmp_path: Path) -> None:
    paths = write_plots(tmp_path, sample_metrics())
    _assert_pngs(paths, tmp_path)


def test_output_is_deterministic(tmp_path: Path) -> None:
    a = write_plots(tmp_path / "a", sample_metrics())
    # the same numbers in another dict order draw the same figures
    shuffled = {m: dict(reversed(list(d.items()))) for m, d in reversed(sample_metrics().items())}
    b = write_plots(tmp_path / "b", shuffled)
    for key in PLOT_FILES:
        assert a[key].read_bytes() == b[key].read_bytes(), key


def test_missing_strata_cost_and_pairs_still_draw(tmp_path: Path) -> None:
    metrics = {"m": {"none": block((0, 0), (0, 0), clean=(0, 0), recovery=(0, 0),
                                   tokens=None, calls=None, strata=False)}}
    del metrics["m"]["none"]["cost"]
    del metrics["m"]["none"]["paired"]
    (tmp_path / PLOTS_DIR).mkdir()
    _assert_pngs(draw_plots(tmp_path / PLOTS_DIR, metrics, list(PLOT_FILES)), tmp_path)


def test_one_defender_per_model_draws_no_comparison(tmp_path: Path) -> None:
    # one bar pair or one point compares nothing: only the strata heatmap is drawn
    one = {m: {"none": by["none"]} for m, by in sample_metrics().items()}
    paths = write_plots(tmp_path / "one", one)
    assert list(paths) == ["strata_heatmap"]
    assert sorted(p.name for p in (tmp_path / "one" / PLOTS_DIR).iterdir()) == ["strata_heatmap.png"]
    # a second defender under any one model brings every comparison back
    two = {**one, "mock/examinee": sample_metrics()["mock/examinee"]}
    assert set(write_plots(tmp_path / "two", two)) == set(PLOT_FILES)


def test_one_defender_and_one_strata_cell_draw_nothing(tmp_path: Path) -> None:
    one_cell = {"content_type": {CT[0]: {"type1_asr": prop(2, 4)}}, "provenance": {PV[0]: {"type1_asr": prop(2, 4)}},
                "content_type_x_provenance": {CT[0] + JOIN + PV[0]: {"type1_asr": prop(2, 4)}}}
    metrics = {"m": {"none": {**block((2, 4), (1, 4)), "strata": one_cell}}}
    assert write_plots(tmp_path, metrics) == {}
    assert not (tmp_path / PLOTS_DIR).exists()
    # a second defender brings the defender comparisons; one cell each still draws no heatmap
    metrics["m"]["warning"] = {**block((1, 4), (0, 4)), "strata": one_cell}
    assert set(write_plots(tmp_path, metrics)) == set(PLOT_FILES) - {"strata_heatmap"}


def test_no_models_writes_nothing(tmp_path: Path) -> None:
    assert write_plots(tmp_path, {}) == {}
    assert not (tmp_path / PLOTS_DIR).exists()


@pytest.mark.parametrize(("tokens", "expected"), [(250.0, "tokens_per_case"),
                                                  (0.0, "llm_calls_per_case"),
                                                  (None, "llm_calls_per_case")])
def test_cost_axis_falls_back_to_model_calls(tokens: float | None, expected: str) -> None:
    metrics = {"m": {"none": block((1, 2), (0, 2), tokens=tokens)}}
    assert cost_axis(metrics)[0] == expected


def test_baseline_first_then_sorted() -> None:
    assert defender_order(["warning", "none", "claim_verify"], "none") == [
        "none", "claim_verify", "warning"]
    assert defender_order({"b": 1, "a": 2}, "none") == ["a", "b"]


def _crowded_metrics(n: int) -> dict[str, Any]:
    """``n`` defenders at near-equal values, long names among them, on the clean panel's top."""
    names = ["none", *(f"defender_{i:02d}" + ("[max_iterations=6,top_k=5]" if i % 3 == 0 else "")
                       for i in range(1, n))]
    return {"openai/gpt-x": {d: block((30 + i % 3, 100), (20, 100), clean=(99 - (i % 2), 100),
                                      recovery=(50 + i % 2, 100), paired_diff=None if d == "none" else -0.1)
                             for i, d in enumerate(names)}}


@pytest.mark.parametrize("n", [2, 6, 16, 30])
def test_tradeoff_labels_never_overlap_each_other_nor_the_titles(n: int) -> None:
    from matplotlib.text import Annotation, Text

    from medmis.experiments.reporting import mark_simulated
    from medmis.experiments.reporting._labels import place_labels
    from medmis.experiments.reporting._plots import _robustness_tradeoff

    metrics = _crowded_metrics(n)
    fig = _robustness_tradeoff(metrics, ["openai/gpt-x"], "none")
    mark_simulated(fig)  # its title line moves the panels down: labels are placed after it
    place_labels(fig)
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    titles = [t.get_window_extent(renderer) for t in fig.texts if t.get_text().startswith("SIMULATED EXAMINEE")]
    assert titles  # the figure's title line
    for ax in fig.axes:
        # the text's own box (an Annotation's extent would include its leader line)
        labels = [Text.get_window_extent(a, renderer) for a in ax.texts if isinstance(a, Annotation)]
        assert len(labels) == n
        frame = ax.get_window_extent(renderer)
        title = ax.title.get_window_extent(renderer)
        for i, box in enumerate(labels):
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            assert not box.overlaps(title) and not any(box.overlaps(t) for t in titles)
            for other in labels[i + 1:]:
                assert not box.overlaps(other), (box, other)
