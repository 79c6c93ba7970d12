"""``medmis run --model-base-url`` given several times or as ``@FILE``: the run spreads over the
replicas, records the list in the manifest, keeps it out of the fingerprint (a resume with
another list of the same model's replicas is the same run), and fails loudly when all are down."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import clear_provider_env

from medmis.experiments import ConfigError as CliError
from medmis.experiments._cli_flags import base_url_list
from medmis.experiments.bench._fake_openai import FakeOpenAIServer
from medmis.experiments.cli import main
from medmis.experiments.records import read_records

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "medmisbench_sample.jsonl"


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_provider_env(monkeypatch, "openai")


@contextmanager
def servers(n: int, latency_s: float = 0.02) -> Iterator[list[FakeOpenAIServer]]:
    """``n`` fake servers on their own event loop in a thread (the CLI runs its own loop)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    made = [FakeOpenAIServer(latency_s=latency_s) for _ in range(n)]
    for server in made:
        asyncio.run_coroutine_threadsafe(server.__aenter__(), loop).result(10)
    try:
        yield made
    finally:
        for server in made:
            asyncio.run_coroutine_threadsafe(server.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def run_args(out: Path, *urls: str) -> list[str]:
    argv = ["run", "--data", str(SAMPLE), "--limit", "4", "--model", "openai/served-model",
            "--defender", "none", "--protocol", "clean,type2", "--out", str(out), "--no-progress",
            "--max-retries", "0"]
    for url in urls:
        argv += ["--model-base-url", url]
    return argv


def test_base_url_list_reads_files_with_comments(tmp_path: Path) -> None:
    listing = tmp_path / "replicas.txt"
    listing.write_text("# two SGLang servers\nhttp://10.0.0.2:30000/v1\n\nhttp://10.0.0.3:30000/v1  # spare\n")
    urls = base_url_list(["http://10.0.0.1:30000/v1", f"@{listing}"])
    assert urls == ["http://10.0.0.1:30000/v1", "http://10.0.0.2:30000/v1", "http://10.0.0.3:30000/v1"]
    assert base_url_list(None) == []
    with pytest.raises(CliError, match="more than once"):
        base_url_list(["http://10.0.0.2:30000/v1", f"@{listing}"])
    with pytest.raises(CliError, match="cannot read"):
        base_url_list([f"@{tmp_path / 'missing.txt'}"])
    (tmp_path / "empty.txt").write_text("# nothing yet\n")
    with pytest.raises(CliError, match="no URL"):
        base_url_list([f"@{tmp_path / 'empty.txt'}"])


def test_a_bad_url_file_is_a_one_line_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(run_args(tmp_path / "run", f"@{tmp_path / 'missing.txt'}"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--model-base-url" in err
    assert not (tmp_path / "run").exists()


def test_run_spreads_over_replicas_and_resumes_with_another_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with servers(2) as (a, b):
        listing = tmp_path / "more.txt"
        secret_b = b.base_url.replace("http://", "http://user:hunter2@")
        listing.write_text(f"{secret_b}\n")
        assert main(run_args(out, a.base_url, f"@{listing}")) == 0
        records = read_records(out / "records.jsonl")
        assert len(records) == 8 and all(r.error is None for r in records)
        assert a.requests > 0 and b.requests > 0 and a.requests + b.requests == 8
        text = (out / "manifest.json").read_text()
        assert "hunter2" not in text
        manifest = json.loads(text)
        listed = manifest["config"]["model_options"]["base_urls"]
        assert listed[0] == a.base_url and listed[1].endswith(b.base_url.removeprefix("http://"))
        fingerprint = manifest["fingerprint"]["model_options"]
        assert fingerprint["base_url"] == a.base_url and "base_urls" not in fingerprint

        # the same model behind one replica: the same run, nothing left to do
        capsys.readouterr()
        assert main(run_args(out, a.base_url)) == 0
        assert "nothing to do" in capsys.readouterr().out
    # another first server is another server: the fingerprint says so
    with servers(1) as (c,):
        assert main(run_args(out, c.base_url, a.base_url)) == 2
        assert "endpoints:" in capsys.readouterr().err  # the server the model talks to


def dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_every_replica_down_gives_error_records_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(run_args(out, dead_url(), dead_url())) == 1
    records = read_records(out / "records.jsonl")
    assert len(records) == 8
    assert all(r.error and "ConnectionError" in r.error and r.choice is None for r in records)
    assert "error" in capsys.readouterr().err


def test_synchronous_calls_fail_over_too() -> None:
    from langchain_core.messages import HumanMessage

    from medmis.agents import ModelOptions, load_model

    with servers(1) as (up,):
        model = load_model("openai/served-model", ModelOptions(base_urls=(dead_url(), up.base_url)))
        replies = [model.invoke([HumanMessage(content=f"q{i}")]) for i in range(4)]
    assert all("Final answer" in str(r.content) for r in replies)
    assert up.requests == 4
    dead, alive = model.replicas  # type: ignore[attr-defined]
    assert dead.failures == 1 and dead.served == 0 and alive.served == 4


def test_an_ablation_config_takes_a_list_of_base_urls(tmp_path: Path) -> None:
    from medmis.agents import ModelOptions
    from medmis.experiments.ablation import load_config

    config = tmp_path / "grid.toml"
    config.write_text(
        'data = "fixtures/medmisbench_sample.jsonl"\n'
        '[model_options]\nbase_url = ["http://10.0.0.1:30000/v1", "http://10.0.0.2:30000/v1"]\n'
        '[[models]]\nspec = "openai/served-model"\n'
        '[[defenders]]\nname = "none"\n'
    )
    loaded = load_config(config)
    options = ModelOptions(**loaded.model_options)
    assert options.base_urls == ("http://10.0.0.1:30000/v1", "http://10.0.0.2:30000/v1")
    overridden = load_config(config, ['model_options.base_url=["http://10.0.0.3:30000/v1", "http://10.0.0.4:30000/v1"]'])
    assert ModelOptions(**overridden.model_options).base_url == "http://10.0.0.3:30000/v1"
