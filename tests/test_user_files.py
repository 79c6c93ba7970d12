"""Every reader of a user file goes through one loader: a nesting limit, duplicate keys refused,
one error shape (``file:line: cause``, exit 2), and pydantic problems as one line naming the field.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from medmis.experiments.cli import main
from medmis.tools import (
    MAX_DEPTH,
    UserFileError,
    deep_line,
    json_file,
    json_value,
    toml_value,
    too_deep,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"
PAGES = ROOT / "fixtures" / "poison" / "sample_pages.jsonl"
CASSETTE = ROOT / "fixtures" / "cassettes" / "search_agent_hle.jsonl"
DEEP = "[" * 3000 + "]" * 3000  # 6 KB: json and tomllib recurse once a level
DEEP_LINE = 3  # every file below puts its deep value on line 3


def call(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_exit_2(code: int, err: str) -> str:
    assert "Traceback" not in err, err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def run_args(out: Path, *extra: str, data: Path = SAMPLE) -> list[str]:
    return ["run", "--data", str(data), "--limit", "2", "--model", "mock/examinee", "--defender", "none",
            "--out", str(out), "--no-progress", *extra]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "run"
    assert main(run_args(out)) == 0
    return out


def copy_run(finished: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    (out / "records.parquet").unlink(missing_ok=True)  # the copy's JSONL is read afresh
    return out


def with_line(path: Path, number: int, line: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    lines.insert(number - 1, line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def first_json_line(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8").splitlines()[0])


def deep_object(obj: dict) -> str:
    return json.dumps(obj)[:-1] + f', "deep": {DEEP}}}'


# -- each reader: (a file holding 6 KB of nesting on line 3, the command that reads it) ---------

def _data_jsonl(tmp: Path, run: Path) -> tuple[Path, list[str]]:
    path = tmp / "rows.jsonl"
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[:2]
    path.write_text("\n".join([*lines, deep_object(json.loads(lines[0]))]) + "\n", encoding="utf-8")
    return path, ["data", "validate", str(path)]


def _data_json_list(tmp: Path, run: Path) -> tuple[Path, list[str]]:
    path = tmp / "rows.json"
    row = SAMPLE.read_text(encoding="utf-8").splitlines()[0]
    path.write_text(f"[\n{row},\n{deep_object(json.loads(row))}\n]\n", encoding="utf-8")
    return path, ["data", "validate", str(path)]


def _run_data(tmp: Path, run: Path) -> tuple[Path, list[str]]:
    path, _ = _data_jsonl(tmp, run)
    return path, run_args(tmp / "new", data=path)


def _cache_import(tmp: Path, run: Path) -> tuple[Path, list[str]]:
    path = tmp / "cassette.jsonl"
    lines = CASSETTE.read_text(encoding="utf-8").splitlines()[:2]
    path.write_text("\n".join([*lines, '{"kind": "visit", "key": {"url": "u"}, "value": ' + DEEP + "}"]) + "\n",
                    encoding="utf-8")
    return path, ["cache", "import", str(path), "--cache-dir", str(tmp / "cache")]


def _records(tmp: Path, run: Path) -> Path:
    path = run / "records.jsonl"
    with_line(path, DEEP_LINE, deep_object(first_json_line(path)))
    return path


def _report_records(tmp: Path, run: Path) -> tuple[Path, list[str]]:
    return _records(tmp, run), ["report", str(run)]


def _resume_records(tmp: Path, run: Path) -> tuple[Path, list[str]]:
    return _records(tmp, run), run_args(run)


def _manifest(run: Path) -> Path:
    path = run / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    config = json.dumps(manifest.pop("config"))
    path.write_text(f'{{\n"config": {config},\n"deep": {DEEP},\n{json.dumps(manifest)[1:]}', encoding="utf-8")
    return path


def _report_manifest(tmp: Path, run: Path) -> tuple[Path, list[str]]:
    return _manifest(run), ["report", str(run)]


def _resume_manifest(tmp: Path, run: Path) -> tuple[Path, list[str]]:
    return _manifest(run), run_args(run)


def _poison_pages(tmp: Path, run: Path) -> tuple[Path, list[str]]:
    path = tmp / "pages.jsonl"
    lines = PAGES.read_text(encoding="utf-8").splitlines()[:2]
    path.write_text("\n".join([*lines, deep_object(json.loads(lines[0]))]) + "\n", encoding="utf-8")
    return path, run_args(tmp / "new", "--protocol", "clean,type1", "--poison", f"share=0.5,pages={path}")


def _ablate_config(tmp: Path, run: Path) -> tuple[Path, list[str]]:
    path = tmp / "grid.toml"
    path.write_text(f'name = "deep"\n# a comment [[[ that does not count\nseeds = {DEEP}\n', encoding="utf-8")
    return path, ["ablate", str(path), "--dry-run"]


READERS: dict[str, Callable[[Path, Path], tuple[Path, list[str]]]] = {
    "data validate (jsonl)": _data_jsonl,
    "data validate (json list)": _data_json_list,
    "run --data": _run_data,
    "cache import": _cache_import,
    "report over records.jsonl": _report_records,
    "resume over records.jsonl": _resume_records,
    "report over manifest.json": _report_manifest,
    "resume over manifest.json": _resume_manifest,
    "run --poison pages=": _poison_pages,
    "ablate CONFIG.toml": _ablate_config,
}


@pytest.mark.parametrize("reader", list(READERS))
def test_six_kb_of_nesting_is_one_line_naming_file_and_line_exit_2(
    reader: str, finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(finished_run, tmp_path)
    path, argv = READERS[reader](tmp_path, run)
    code, _out, err = call(argv, capsys)
    if reader.startswith("data validate"):  # validate lists each bad row, then a summary line
        assert "Traceback" not in err and code == 2, err
        line = next(x for x in (err + _out).splitlines() if "nested deeper" in x)
    else:
        line = one_line_exit_2(code, err)
    assert f"{path}:{DEEP_LINE}" in line and f"nested deeper than {MAX_DEPTH} levels" in line
    assert not (tmp_path / "new").exists()


def test_a_flag_value_nested_too_deep_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = call(run_args(tmp_path / "new", "--defender-option", f"none.x={DEEP}"), capsys)
    assert "nested deeper" in one_line_exit_2(code, err)
    assert not (tmp_path / "new").exists()


# -- the loader itself --------------------------------------------------------------------------

def test_brackets_inside_strings_and_toml_comments_do_not_count() -> None:
    text = json.dumps({"s": "[" * 500, "t": "{" * 500, "q": '\\"[[['})
    assert too_deep(text) is None and json_value(text, "f")["s"] == "[" * 500
    doc = 's = "' + "[" * 500 + '"\n# ' + "{" * 500 + "\nm = '''\n" + "[" * 500 + "\n'''\n[[t]]\na = [[1]]\n"
    assert toml_value(doc, "c.toml")["t"] == [{"a": [[1]]}]
    nested = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert json_value(nested, "f") is not None and too_deep("[" + nested + "]") == MAX_DEPTH


def test_errors_name_the_line_of_a_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{\n  "a": 1,\n  "a": 2\n}\n', encoding="utf-8")
    with pytest.raises(UserFileError, match=r"m\.json:1: duplicate key 'a'") as caught:
        json_file(path)
    assert caught.value.key == "a"
    path.write_text('{\n  "a": 1,\n  "b" 2\n}\n', encoding="utf-8")
    with pytest.raises(UserFileError, match=r"m\.json:3: not JSON \(Expecting ':' delimiter"):
        json_file(path)
    with pytest.raises(UserFileError, match=r"c\.toml:2: not valid TOML"):
        toml_value("a = 1\nb = = 2\n", "c.toml")


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_the_decode_free_scan_finds_the_deep_line_across_chunks(tmp_path: Path, chunk: int) -> None:
    path = tmp_path / "records.jsonl"
    shallow = json.dumps({"s": "[" * 300, "a": [[1], {"b": [2]}]})  # many brackets, all in a string
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    path.write_text(f"{shallow}\n{shallow}\n{{\"x\": {deep}}}\n{shallow}\n", encoding="utf-8")
    with pytest.raises(UserFileError, match=r"records\.jsonl:3: nested deeper"):
        deep_line(path, chunk=chunk)
    path.write_text(f"{shallow}\n{deep[1:-1]}\n", encoding="utf-8")
    assert deep_line(path, chunk=chunk) is None


# -- duplicate keys -----------------------------------------------------------------------------

def test_a_cassette_line_naming_value_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cassette.jsonl"
    line = CASSETTE.read_text(encoding="utf-8").splitlines()[0]
    path.write_text(line + "\n" + line[:-1] + ',"value":{"text":"other"}}\n', encoding="utf-8")
    code, _out, err = call(["cache", "import", str(path), "--cache-dir", str(tmp_path / "cache")], capsys)
    assert f"{path}:2: not a cassette entry: duplicate key 'value'" in one_line_exit_2(code, err)


def test_a_pages_line_naming_url_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pages.jsonl"
    path.write_text(PAGES.read_text(encoding="utf-8").splitlines()[0][:-1] + ', "url": "https://x.example/a"}\n',
                    encoding="utf-8")
    code, _out, err = call(run_args(tmp_path / "new", "--protocol", "clean,type1",
                                    "--poison", f"share=0.5,pages={path}"), capsys)
    assert f"{path}:1: duplicate key 'url'" in one_line_exit_2(code, err)
    assert not (tmp_path / "new").exists()


def test_a_records_key_answered_twice_is_one_warning_naming_key_and_rule(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(finished_run, tmp_path)
    path = run / "records.jsonl"
    first = first_json_line(path)
    assert first["protocol"] == "clean" and first["correct"]
    other = next(k for k in ("A", "B", "C", "D") if k != first["choice"])
    with_line(path, 10_000, json.dumps({**first, "choice": other, "correct": False}))
    code, _out, err = call(["report", str(run)], capsys)
    assert code == 0, err
    warnings = [x for x in err.splitlines() if "warning" in x]
    assert len(warnings) == 1, err
    key = f"({first['model']}, none, clean, {first['subset']}/{first['item_id']}, None)"
    assert key in warnings[0] and "rule: the last line of a key is used" in warnings[0]
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    before = json.loads((finished_run / "metrics.json").read_text(encoding="utf-8"))
    clean, was = metrics[first["model"]]["none"]["clean_acc"], before[first["model"]]["none"]["clean_acc"]
    assert (clean["k"], clean["n"]) == (was["k"] - 1, was["n"])  # the rule the warning names


def test_a_record_after_an_error_is_a_retry_not_a_warning(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(finished_run, tmp_path)
    path = run / "records.jsonl"
    first = first_json_line(path)
    with_line(path, 1, json.dumps({**first, "choice": None, "correct": None, "error": "RuntimeError: x"}))
    code, _out, err = call(["report", str(run)], capsys)
    assert code == 0 and "warning" not in err, err


# -- poisoned pages: duplicate URLs in one case, and what is wrong with a page ------------------

def test_duplicate_page_urls_within_one_case_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [json.loads(x) for x in PAGES.read_text(encoding="utf-8").splitlines()]
    case = rows[0]["case_key"]
    assert sum(r["case_key"] == case for r in rows) > 1
    path = tmp_path / "pages.jsonl"
    path.write_text("".join(json.dumps({**r, "url": rows[0]["url"]} if r["case_key"] == case else r) + "\n"
                            for r in rows), encoding="utf-8")
    code, _out, err = call(run_args(tmp_path / "new", "--protocol", "clean,type1",
                                    "--poison", f"share=0.5,pages={path}"), capsys)
    line = one_line_exit_2(code, err)
    assert f"{path}:2: url {rows[0]['url']!r} is already a page of case {case} (line 1)" in line


@pytest.mark.parametrize(("change", "expect"), [
    (lambda r: r.pop("title"), "title: Field required"),
    (lambda r: r.update(colour="red"), "colour: unknown field (not allowed here)"),
    (lambda r: r.update(url="file:///etc/passwd"), "url: url 'file:///etc/passwd' is not an absolute http(s) URL"),
    (lambda r: r.update(style="poster"), "style: style 'poster' is not one of guideline"),
])
def test_a_bad_page_names_the_field_and_the_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Callable[[dict], object], expect: str
) -> None:
    row = json.loads(PAGES.read_text(encoding="utf-8").splitlines()[0])
    change(row)
    path = tmp_path / "pages.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    code, _out, err = call(run_args(tmp_path / "new", "--protocol", "clean,type1",
                                    "--poison", f"share=0.5,pages={path}"), capsys)
    line = one_line_exit_2(code, err)
    assert f"{path}:1: not a poisoned page: {expect}" in line
    assert "errors.pydantic.dev" not in line
