"""``medmis data subset``: the paper's 600-item subset drawn from a release of the real sizes,
the same items for the same seed, other items for another seed, written in the released schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medmis.experiments._data_cli import PAPER_SUBSET, draw_subset
from medmis.experiments.benchmark import CONTENT_TYPES, PROVENANCES, load_dataset
from medmis.experiments.cli import main

SIZES = {"MEDMISQA": 3112, "MEDMISMCQA": 3986, "MEDMISXPERTQA": 1544, "MEDMISJOURNEY": 2197,
         "MEDMISHLE": 93}
PAPER_COUNTS = {"MEDMISQA": 150, "MEDMISMCQA": 180, "MEDMISXPERTQA": 120, "MEDMISJOURNEY": 120,
                "MEDMISHLE": 30}


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic release in the released layout and schema: one file per subset, the real
    subset sizes, labels spread unevenly over content x provenance."""
    root = tmp_path_factory.mktemp("release")
    for s, (subset, n) in enumerate(SIZES.items()):
        numeric = subset == "MEDMISMCQA"
        with (root / f"{subset.lower()}.jsonl").open("w", encoding="utf-8") as fh:
            for i in range(n):
                keys = ["1", "2", "3", "4"] if numeric else ["A", "B", "C", "D"]
                gold = keys[(i * 7 + s) % 4]
                row = {"id": f"{subset[-3:]}-{i:05d}", "question": f"Synthetic question {i} of {subset}?",
                       "answer": gold,
                       "injection_content": CONTENT_TYPES[(i * i + s) % 5],
                       "injection_provenance": PROVENANCES[(i // 3 + s) % 3]}
                for letter, key in zip("abcd", keys, strict=True):
                    row[f"op{letter}"] = f"Option {key} for item {i}"
                    row[f"inject{letter}"] = f"Item {i}: a sentence arguing for option {key}."
                fh.write(json.dumps(row) + "\n")
    return root


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's usage errors
        return int(exc.code or 0)


def test_paper_subset_counts_and_stability(release: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "paper600.jsonl"
    assert main(["data", "subset", str(release), "--per-subset", PAPER_SUBSET,
                 "--seed", "7", "--out", str(out)]) == 0
    assert "600 items (MEDMISQA 150, MEDMISMCQA 180, MEDMISXPERTQA 120" in capsys.readouterr().out
    ds = load_dataset(out)
    counts: dict[str, int] = {}
    for it in ds.items:
        counts[it.subset] = counts.get(it.subset, 0) + 1
    assert counts == PAPER_COUNTS
    # the same seed draws the same items again, another seed others
    full = load_dataset(release).items
    ids = [it.key for it in ds.items]
    assert [it.key for it in draw_subset(full, PAPER_COUNTS, 7)] == ids
    other = [it.key for it in draw_subset(full, PAPER_COUNTS, 8)]
    assert len(set(ids)) == 600 and len(set(other)) == 600 and set(ids) != set(other)
    # every item as released: the written rows load to the same items as in the release
    by_key = {it.key: it for it in full}
    assert all(by_key[it.key] == it for it in ds.items)
    # stratified within each subset: every content x provenance stratum of MEDMISQA is drawn
    # in proportion (largest remainders), never a whole item away from its exact share
    qa = [it for it in full if it.subset == "MEDMISQA"]
    for content in CONTENT_TYPES:
        for provenance in PROVENANCES:
            size = sum(it.content_type == content and it.provenance == provenance for it in qa)
            drawn = sum(it.subset == "MEDMISQA" and it.content_type == content
                        and it.provenance == provenance for it in ds.items)
            assert abs(drawn - 150 * size / len(qa)) < 1


@pytest.mark.parametrize(("spec", "message"), [
    ("MEDMISHLE=94", "MEDMISHLE: 94 items asked for, the data has 93"),
    ("MEDMISFOO=1", "MEDMISFOO: 1 items asked for, the data has 0"),
    ("MEDMISHLE", "expected SUBSET=N"),
    ("MEDMISHLE=0", "must be >= 1"),
    ("HLE=2,MEDMISHLE=3", "MEDMISHLE is given twice"),
])
def test_bad_requests_are_one_line_and_write_nothing(release: Path, tmp_path: Path, spec: str,
                                                     message: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.jsonl"
    assert exit_code(["data", "subset", str(release / "medmishle.jsonl"), "--per-subset", spec,
                      "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_existing_out_is_not_overwritten(release: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    out.write_text("mine\n")
    assert exit_code(["data", "subset", str(release / "medmishle.jsonl"), "--per-subset",
                      "MEDMISHLE=5", "--out", str(out)]) == 2
    assert out.read_text() == "mine\n"
