"""The run fingerprint as a typed model (issue 32, item 4): older manifests are read in one
place (``Fingerprint.from_manifest``), a comparison names exactly the fields that differ, and
the JSON written to ``manifest.json`` keeps the shape older versions read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medmis.experiments.cli import main
from medmis.experiments.harness import Fingerprint

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def run_args(out: Path, *extra: str) -> list[str]:
    return ["run", "--data", str(SAMPLE), "--limit", "2", "--model", "mock/examinee",
            "--defender", "none", "--out", str(out), "--no-progress", *extra]


# A manifest as medmis wrote it before fingerprints existed: the facts it can vouch for are
# spread over its top-level fields.
LEGACY_MANIFEST: dict[str, Any] = {
    "models": ["mock/examinee"],
    "defenders": [{"label": "none", "name": "none", "options": {}}, "not a defender"],
    "protocols": ["type2", "clean", "type1"],
    "prompt": {"name": "paper", "version": 1},
    "seed": 0,
    "dataset": {"sha256": "ab" * 32},
    "config": {"subset": None, "limit": 3, "type1_targets": "sampled", "shuffle_type2": False},
}


def test_a_legacy_manifest_is_migrated_to_the_fields_it_vouches_for() -> None:
    fp = Fingerprint.from_manifest(LEGACY_MANIFEST)
    assert fp.to_json() == {
        "data_sha256": "ab" * 32, "subset": None, "limit": 3, "seed": 0,
        "protocols": ["clean", "type1", "type2"], "type1_targets": "sampled", "shuffle_type2": False,
        "prompt": "paper@1", "models": ["mock/examinee"],
        "defenders": {"none": {"name": "none", "options": {}}},
    }
    # what it did not record is not compared; what it did is
    new = Fingerprint.model_validate({**fp.to_json(), "seed": 4, "on_invalid": "skip",
                                      "defenders": {"none": {"name": "none", "options": {}, "code": {"sha256": "1"}}}})
    diff = fp.compare(new)
    assert diff.changed == {"seed": (0, 4)}


def test_a_fingerprint_written_before_later_fields_compares_only_what_it_has() -> None:
    old = Fingerprint.from_manifest({"fingerprint": {"seed": 0, "models": ["m"], "prompt": "paper@1",
                                                     "defenders": {"d": {"name": "none", "options": {}}}}})
    new = Fingerprint.model_validate({
        "seed": 0, "models": ["m", "n"], "prompt": "paper@1", "decoding": {"preset": "reference"},
        "web_tools": {"search": "local"}, "endpoints": {"m": "http://a"},
        "defenders": {"d": {"name": "none", "options": {"k": 1}, "code": {"sha256": "x"}},
                      "e": {"name": "warning", "options": {}}},
    })
    diff = old.compare(new)
    # exactly the options of the recorded label: no decoding, web tools, endpoints or code
    assert diff.changed == {"defender d": ({"k": None}, {"k": 1})}
    assert diff.added_models == ["n"] and diff.added_defenders == ["e"]
    assert diff.describe() == "defender d: k=None -> k=1"


def test_a_poison_absent_from_the_record_means_none() -> None:
    old = Fingerprint.model_validate({"seed": 0})
    new = Fingerprint.model_validate({"seed": 0, "poison": {"share": 0.5}})
    assert old.compare(new).changed == {"poison": (None, {"share": 0.5})}


def test_changed_code_and_examinee_are_named_per_label_and_model() -> None:
    old = Fingerprint.model_validate({
        "seed": 1, "examinee": {"mock/a": {"seed": 1, "rate": 0.5}},
        "defenders": {"d": {"name": "none", "options": {}, "code": {"sha256": "a" * 64, "modules": ["x"]}}}})
    new = Fingerprint.model_validate({
        "seed": 2, "examinee": {"mock/a": {"seed": 2, "rate": 0.7}},
        "defenders": {"d": {"name": "none", "options": {}, "code": {"sha256": "b" * 64, "modules": ["x"]}}}})
    diff = old.compare(new)
    assert diff.changed == {
        "seed": (1, 2),
        "examinee": ({"mock/a rate": 0.5}, {"mock/a rate": 0.7}),  # the seed is the run's: named once
        "defender_code d": ({"sha256": "a" * 12}, {"sha256": "b" * 12}),
    }
    assert set(diff.blocking(["seed", "defender_code"])) == {"examinee"}


def test_merging_keeps_every_model_and_defender_and_the_tools_record() -> None:
    old = Fingerprint.model_validate({"seed": 0, "models": ["a"], "web_tools": {"search": "local"},
                                      "defenders": {"x": {"name": "x"}}, "model_variants": {"a": {"spec": "s"}}})
    new = Fingerprint.model_validate({"seed": 0, "models": ["b"], "defenders": {"y": {"name": "y"}}})
    merged = old.merged_with(new).to_json()
    assert merged["models"] == ["a", "b"] and set(merged["defenders"]) == {"x", "y"}
    assert merged["web_tools"] == {"search": "local"} and merged["model_variants"] == {"a": {"spec": "s"}}


def test_the_manifest_keeps_its_json_shape_and_round_trips(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(run_args(out)) == 0
    recorded = json.loads((out / "manifest.json").read_text())["fingerprint"]
    assert list(recorded)[:5] == ["data_sha256", "subset", "limit", "on_invalid", "seed"]
    assert {"models", "defenders", "endpoints", "examinee", "decoding", "medmis"} <= set(recorded)
    assert "poison" not in recorded and "web_tools" not in recorded  # recorded only when set
    assert Fingerprint.model_validate(recorded).to_json() == recorded


def test_a_malformed_fingerprint_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(run_args(out)) == 0
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["fingerprint"]["seed"] = "not a seed"
    path.write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(run_args(out)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "fingerprint is malformed (seed)" in err and "choose another --out" in err
