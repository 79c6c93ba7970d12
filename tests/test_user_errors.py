"""User mistakes are one line on stderr, exit 2, no traceback and nothing half-made on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medmis.experiments.cli import build_parser, main
from medmis.experiments.records import read_records

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"
DEMO = ROOT / "experiments" / "configs" / "demo.toml"


def run_args(out: Path, *extra: str, limit: str = "2") -> list[str]:
    return ["run", "--data", str(SAMPLE), "--limit", limit, "--model", "mock/examinee",
            "--defender", "none", "--out", str(out), "--no-progress", *extra]


def one_line_exit_2(code: int, err: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def call(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("extra", "expect"), [
    (["--limit", "0"], "--limit: must be >= 1, got 0"),
    (["--limit", "-1"], "--limit: must be >= 1, got -1"),
    (["--max-connections", "0"], "--max-connections: must be >= 1"),
    (["--max-retries", "-2"], "--max-retries: must be >= 0"),
    (["--protocol", "clean,typo"], "unknown value(s) typo (choose from clean,type1,type2)"),
    (["--subset", "NOPE"], "no rows of subset NOPE (the data has: MEDMISHLE, MEDMISJOURNEY"),
    (["--model", "foo/bar"], "--model foo/bar: unknown model provider 'foo'"),
    (["--model", "gemini"], "model spec must look like provider/model-id"),
])
def test_run_mistakes_are_one_line_and_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], expect: str
) -> None:
    out = tmp_path / "deep" / "run"
    args = run_args(out)
    for flag in ("--limit", "--model"):
        if flag in extra:
            i = args.index(flag)
            del args[i:i + 2]
    code, err = call([*args, *extra], capsys)
    assert expect in one_line_exit_2(code, err)
    assert not (tmp_path / "deep").exists()


def test_unknown_provider_fails_before_the_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [a for a in run_args(tmp_path / "run") if a != "--no-progress"]
    args[args.index("mock/examinee")] = "anthropicx/claude"
    code, err = call(args, capsys)
    assert "unknown model provider 'anthropicx'" in one_line_exit_2(code, err)
    assert "medmis run:" not in err and not (tmp_path / "run").exists()


def test_out_naming_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "file.txt"
    f.write_text("x")
    code, err = call(run_args(f), capsys)
    assert "--out is a file, not a folder" in one_line_exit_2(code, err)
    code, err = call(run_args(f / "sub"), capsys)
    assert "--out's parent" in one_line_exit_2(code, err)
    assert f.read_text() == "x"


def test_empty_dataset_and_trailing_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    args = run_args(tmp_path / "run")
    args[args.index("--data") + 1] = str(empty)
    code, err = call(args, capsys)
    assert "no items (the source holds no rows)" in one_line_exit_2(code, err)
    assert not (tmp_path / "run").exists()
    assert main(["data", "validate", str(empty)]) == 2
    assert "OK" not in capsys.readouterr().out


def test_all_rows_invalid_under_skip_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()[:2]]
    for r in rows:
        r["answer"] = "Z"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = run_args(tmp_path / "run", "--on-invalid", "skip")
    args[args.index("--data") + 1] = str(bad)
    code, err = call(args, capsys)
    assert "no valid items" in one_line_exit_2(code, err)
    assert not (tmp_path / "run").exists()


def test_corrupt_middle_record_is_named_torn_last_line_tolerated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(run_args(out)) == 0
    path = out / "records.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:-1], lines[-1][: len(lines[-1]) // 2]]))  # torn tail
    capsys.readouterr()
    assert main(run_args(out)) == 0
    assert len(read_records(path)) == len(lines)
    lines = path.read_text().splitlines()
    lines[2] = '{"model": "mock/examinee", "defender": '
    path.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    code, err = call(run_args(out), capsys)
    line = one_line_exit_2(code, err)
    assert f"{path}:3: unreadable record, not JSON" in line
    code, err = call(["report", str(out)], capsys)
    assert f"{path}:3:" in one_line_exit_2(code, err)


def test_unknown_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(run_args(out)) == 0
    capsys.readouterr()
    code, err = call(["report", str(out), "--baseline", "nonee"], capsys)
    assert "--baseline 'nonee' is not a defender of this run (choose from none)" in one_line_exit_2(code, err)
    assert main(["report", str(out), "--baseline", "none"]) == 0


def write_ablation(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "abl.toml"
    path.write_text(f'data = "{SAMPLE.as_posix()}"\nlimit = 2\nout = "{(tmp_path / "out").as_posix()}"\n{body}')
    return path


MODELS = '[[models]]\nspec = "mock/examinee"\n'
DEFENDERS = '[[defenders]]\nname = "none"\n'


@pytest.mark.parametrize(("top", "tables", "expect"), [
    ("", '[[models]]\nspec = "foo/bar"\n' + DEFENDERS, "models: spec 'foo/bar': unknown model provider 'foo'"),
    ('baseline = "warning"\n', MODELS + DEFENDERS,
     "baseline 'warning' is not a defender of the grid (choose from none)"),
    ("", MODELS + DEFENDERS.replace("name", "nmae"), "defenders.0.nmae: unknown key (did you mean 'name'?)"),
    ("seeed = 3\n", MODELS + DEFENDERS, "seeed: unknown key (did you mean 'seed'?)"),
    ("processes = 2\n", MODELS + DEFENDERS, "processes: removed (every call runs in one process"),
    ("max_connections = 0\n", MODELS + DEFENDERS, "max_connections: Input should be greater than or equal to 1"),
    ("limit = 0\n", MODELS + DEFENDERS, "limit: Input should be greater than or equal to 1"),
    ("", MODELS + DEFENDERS + "[model_options]\ntemprature = 0.2\n", "model_options"),
    ("", MODELS + '[[defenders]]\nname = "nope"\n', "unknown defender 'nope'"),
])
def test_ablation_config_mistakes_fail_before_the_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], top: str, tables: str, expect: str
) -> None:
    config = write_ablation(tmp_path, top + tables)
    if top.startswith("limit"):
        config.write_text(config.read_text().replace("limit = 2\n", ""))
    code, err = call(["ablate", str(config), "--no-progress"], capsys)
    line = one_line_exit_2(code, err)
    assert expect in line
    assert "cost" not in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_toml_syntax_error_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_ablation(tmp_path, MODELS + DEFENDERS + "seed = = 1\n")
    code, err = call(["ablate", str(config)], capsys)
    line = one_line_exit_2(code, err)
    assert f"{config}:8: not valid TOML" in line


def test_finished_ablation_says_nothing_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_ablation(tmp_path, MODELS + DEFENDERS)
    assert main(["ablate", str(config), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["ablate", str(config), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nothing to do: ") and "cost" not in out


def test_every_choice_flag_lists_its_values_and_the_epilog_documents_exit_codes() -> None:
    parser = build_parser()
    text = parser.format_help()
    for code in ("0  finished", "1  finished with case errors", "2  usage, config or data error",
                 "3  stopped early"):
        assert code in text
    sub = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    run_help = sub["run"].format_help()
    assert "{clean,type1,type2}" in run_help and "{sampled,all}" in run_help
    assert "{paper,toolkit}" in run_help and "exit status" in run_help
    assert "DEFENDER" in sub["report"].format_help()
    for name, p in sub.items():
        for action in p._actions:
            if action.choices is not None and action.option_strings:
                assert action.help, f"{name} {action.option_strings} has choices but no help"


def test_defenders_lists_literal_values_and_descriptions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["defenders"]) == 0
    out = capsys.readouterr().out
    assert "<Literal>" not in out
    assert "claim_verify.split=<one of 'model', 'sentences'>  (default 'model')" in out
    assert "claim_verify.max_claims=<int (>= 1, <= 40)>" in out
    assert "Search results per claim." in out


def test_tools_visit_has_no_search_flags_and_max_results_is_positive(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    tools = sub["tools"]._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    visit_flags = {f for a in tools["visit"]._actions for f in a.option_strings}
    assert "--search" not in visit_flags and "--corpus-dir" not in visit_flags
    code, err = call(["tools", "search", "scurvy", "--max-results", "0"], capsys)
    assert "--max-results: must be >= 1" in one_line_exit_2(code, err)


def test_ablation_seed_change_is_refused_then_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_ablation(tmp_path, MODELS + DEFENDERS)
    assert main(["ablate", str(config), "--no-progress"]) == 0
    config.write_text("seed = 4\n" + config.read_text())
    capsys.readouterr()
    code, err = call(["ablate", str(config), "--no-progress"], capsys)
    assert "seed: 0 -> 4" in one_line_exit_2(code, err)
    assert main(["ablate", str(config), "--no-progress", "--accept-change", "seed,model_options"]) == 0
