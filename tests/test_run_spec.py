"""``RunConfig`` split (issue 32, item 5): :class:`RunSpec` is what the fingerprint is made of,
:class:`RunOptions` how the run is carried out; ``RunConfig`` is the two in one flat model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from medmis.experiments import DefenderConfig, RunConfig, RunOptions, RunSpec
from medmis.experiments.harness._fingerprint import run_fingerprint

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"

# a value other than the default for every operational option
OTHER_OPTIONS: dict[str, Any] = {
    "out": "elsewhere", "max_connections": 3, "max_retries": 1, "retry_base_delay": 0.5, "retry_deadline_s": 9.0,
    "tool_timeout_s": 5.0, "case_timeout_s": 12.0, "cache": "record", "cache_dir": "c", "allow_hosts": ["a.org"],
    "blocklist": "b.txt", "retry_errors": True, "progress": False, "write_report": False,
    "prices": {"mock/examinee": (1.0, 2.0)}, "batch": True, "batch_poll_s": 2.0, "batch_discount": 0.25,
    "accept_changes": ["seed"], "max_rps": 5.0, "max_tpm": 1000.0, "shard": {"index": 1, "count": 2},
}


def config(**fields: Any) -> RunConfig:
    return RunConfig(**{"data": str(SAMPLE), "models": ["mock/examinee"], "defenders": [DefenderConfig(name="none")],
                        "out": "run", **fields})


def test_the_two_parts_partition_the_config() -> None:
    spec, options = set(RunSpec.model_fields), set(RunOptions.model_fields)
    assert not spec & options
    assert spec | options == set(RunConfig.model_fields)
    assert set(OTHER_OPTIONS) == options  # the test below varies every operational option


def test_no_operational_option_reaches_the_fingerprint() -> None:
    base = run_fingerprint(config(), [], None).to_json()
    base.pop("medmis")
    for name, value in OTHER_OPTIONS.items():
        other = run_fingerprint(config(**{name: value}), [], None).to_json()
        other.pop("medmis")
        assert other == base, name
    # and a spec field does
    assert run_fingerprint(config(seed=4), [], None).seed == 4


def test_a_config_splits_and_joins_again() -> None:
    cfg = config(seed=3, max_connections=2, limit=4)
    assert isinstance(cfg.spec, RunSpec) and not isinstance(cfg.spec, RunConfig)
    assert (cfg.spec.seed, cfg.spec.limit, cfg.options.max_connections) == (3, 4, 2)
    assert RunConfig.of(cfg.spec, cfg.options) == cfg
    assert run_fingerprint(cfg.spec, [], None).to_json()["seed"] == 3  # the spec alone fingerprints


def test_each_part_refuses_the_others_fields() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        RunSpec(data="d", models=["m"], defenders=[], max_connections=2)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="seed"):
        RunOptions(out="o", seed=1)  # type: ignore[call-arg]


def test_the_api_runs_a_spec_with_its_options(tmp_path: Path) -> None:
    import json

    from medmis.experiments import run

    cfg = config(limit=2, out=str(tmp_path / "whole"), progress=False, write_report=False)
    spec, options = cfg.spec, cfg.options.model_copy(update={"out": str(tmp_path / "parts")})
    assert run(cfg).outcome is not None and run(spec, options).outcome is not None
    records = [(tmp_path / d / "records.jsonl").read_text().count("\n") for d in ("whole", "parts")]
    assert records[0] == records[1] > 0
    fingerprints = [json.loads((tmp_path / d / "manifest.json").read_text())["fingerprint"] for d in ("whole", "parts")]
    assert fingerprints[0] == fingerprints[1]
    with pytest.raises(TypeError, match="holds its options"):
        run(cfg, options)
    with pytest.raises(TypeError, match="needs RunOptions"):
        run(spec)
