"""The public API and the pytest plug-in, as the docs pages (docs/api.md, docs/plugins.md) show them.

The docs' Python API block runs as written (in a folder holding this checkout's fixtures);
its replay example and a suite exercising every fixture run under pytest in a fresh project
(no conftest, no configuration), so the fixtures come from the ``pytest11`` entry point alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from medmis.experiments import RunFolder, compare, load_run, run
from medmis.testing import check_defender

ROOT = Path(__file__).resolve().parents[1]


def readme_block(marker: str) -> str:
    """The Python block of the docs pages (docs/*.md, where the README's reference moved)
    that starts with ``marker``."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in sorted((ROOT / "docs").rglob("*.md")))
    match = re.search(r"```python\n(" + re.escape(marker) + r"\n.*?)```", text, re.DOTALL)
    assert match, f"docs lost the example starting {marker!r}"
    return match.group(1)


def _checkout_view(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fixtures").symlink_to(ROOT / "fixtures", target_is_directory=True)
    return folder


def test_readme_api_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(_checkout_view(tmp_path / "work"))
    exec(compile(readme_block("# api: run a grid, load it, compare two runs"), "docs/api.md", "exec"), {})
    out = capsys.readouterr().out
    assert "5 items, sha256" in out and "type1_asr" in out
    # what the block printed came from the run it made
    with load_run(tmp_path / "work" / "runs" / "api") as folder:
        assert isinstance(folder, RunFolder)
        assert folder.records.count("*").fetchall() == [(30,)]
        assert set(folder.arrow().column("defender").to_pylist()) == {"none", "warning"}
        assert folder.manifest["fingerprint"]["seed"] == 0
        assert folder.verdict["models"] and "none" in folder.metrics["mock/examinee"]
    rows = compare(tmp_path / "work" / "runs" / "api", tmp_path / "work" / "runs" / "api-seed1")
    assert {r.defender for r in rows} == {"none", "warning"}
    assert {"clean_acc", "type1_asr"} <= {r.metric for r in rows}


def test_load_run_names_a_folder_without_records(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no records\.jsonl"):
        load_run(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no records\.jsonl"):
        compare(tmp_path, tmp_path)


def test_public_names_are_the_ones_in_use() -> None:
    import medmis.defenses.testing
    import medmis.experiments

    assert check_defender is medmis.defenses.testing.check_defender
    assert medmis.experiments.run is run and medmis.experiments.load_run is load_run
    assert all(not name.startswith("_") for name in medmis.experiments.__all__)


def test_plugin_public_name_holds_the_home_objects() -> None:
    # medmis.testing (the pytest11 entry point) re-exports the plug-in's one home: the same
    # fixture functions and classes, not a second copy of them
    import medmis.experiments.testing as home
    import medmis.testing

    for name in ("Replay", "NetworkBlocked", "check_defender", "pytest_configure", "medmis_replay",
                 "medmis_no_network", "medmis_case_view", "medmis_scripted_model"):
        assert getattr(medmis.testing, name) is getattr(home, name), name
    assert [ep.value for ep in entry_points(group="pytest11") if ep.name == "medmis"] == ["medmis.testing"]


def test_plugin_module_loads_without_langchain() -> None:
    # what it imports, not how long it takes: the import time (< 1 s) is the bench's timings
    probe = ("import sys; import pytest; import medmis.testing; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'langchain_core', 'langgraph', "
             "'duckdb', 'pyarrow', 'numpy', 'openai'}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "[]"


PLUGIN_SUITE = '''
import asyncio
import socket
import threading

import pytest

from medmis.testing import NetworkBlocked

REACHED: list[object] = []


@pytest.fixture(autouse=True)
def guard(monkeypatch):
    # installed before medmis_no_network: an address reaching the real connect is recorded,
    # and only loopback goes on
    real = socket.socket.connect

    def recording_connect(self, address):
        REACHED.append(address)
        if address[0] != "127.0.0.1":
            raise AssertionError(f"reached the real connect with {address!r}")
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", recording_connect)


def test_loopback_still_works(guard, medmis_no_network):
    server = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=lambda: server.accept()[0].sendall(b"hi"), daemon=True).start()
    with socket.create_connection(server.getsockname(), timeout=5) as conn:
        assert conn.recv(2) == b"hi"
    server.close()
    assert medmis_no_network == []


def test_outside_connect_is_refused_and_fails_the_test(guard, medmis_no_network):
    REACHED.clear()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(NetworkBlocked):
            sock.connect(("203.0.113.7", 9))  # TEST-NET-3: never reached
    finally:
        sock.close()
    assert REACHED == []  # refused before the real connect
    assert medmis_no_network == ["connect ('203.0.113.7', 9)"]


def test_outside_lookup_is_refused(medmis_no_network):
    with pytest.raises(NetworkBlocked):
        socket.getaddrinfo("example.org", 443)


@pytest.mark.medmis_no_network(loopback=False)
def test_loopback_refused_when_marked(medmis_no_network):
    with pytest.raises(NetworkBlocked):
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    medmis_no_network.clear()  # refused as asked: not a failure of this test


def test_case_view_and_scripted_model(medmis_case_view, medmis_scripted_model):
    view = medmis_case_view("type2")
    assert len(view.context) == 4 and not hasattr(view, "gold")
    own = medmis_case_view(question="Q?", options={"A": "x", "B": "y"}, context=["B is right."])
    assert own.context == ("B is right.",) and list(own.options) == ["A", "B"]
    model = medmis_scripted_model(["Final answer: B"])
    assert asyncio.run(model.ainvoke("hi")).content == "Final answer: B"
    examinee = medmis_scripted_model()
    assert "Final answer: B" in asyncio.run(examinee.ainvoke(view.question)).content


def test_readme_check_defender_import():
    from medmis.defenses.testing import check_defender as where_it_was
    from medmis.testing import check_defender

    assert check_defender is where_it_was
'''


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTEST_ADDOPTS": "", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": ""}
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *args],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_plugin_fixtures_in_a_fresh_project(tmp_path: Path) -> None:
    project = _checkout_view(tmp_path / "proj")
    (project / "tests").mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "tests" / "test_replay_search_agent.py").write_text(
        readme_block("# tests/test_replay_search_agent.py"), encoding="utf-8")
    (project / "tests" / "test_fixtures.py").write_text(textwrap.dedent(PLUGIN_SUITE), encoding="utf-8")
    done = _pytest(project, "tests")
    out = done.stdout + done.stderr
    passed = set(re.findall(r"^PASSED \S+::(\w+)", done.stdout, re.MULTILINE))
    assert passed == {"test_search_agent_replays_offline", "test_loopback_still_works",
                      "test_outside_connect_is_refused_and_fails_the_test", "test_outside_lookup_is_refused",
                      "test_case_view_and_scripted_model", "test_readme_check_defender_import",
                      "test_loopback_refused_when_marked"}, out
    # the tests that tried the network (and caught the error) still fail, at teardown
    errors = set(re.findall(r"^ERROR \S+::(\w+)", done.stdout, re.MULTILINE))
    assert errors == {"test_outside_connect_is_refused_and_fails_the_test", "test_outside_lookup_is_refused"}, out
    assert "medmis_no_network: the test tried the network: connect ('203.0.113.7', 9)" in out
    assert "lookup 'example.org'" in out
    assert done.returncode == 1, out
    # the fixtures come from the entry point: without the plug-in they do not exist
    off = _pytest(project, "-p", "no:medmis", "tests/test_replay_search_agent.py")
    assert off.returncode == 1 and "fixture 'medmis_replay' not found" in off.stdout, off.stdout


def test_a_copy_of_a_config_with_another_seed_reseeds_the_examinee(tmp_path: Path) -> None:
    """The docs' API example compares a run with ``config.model_copy(update={"seed": 1})``:
    the copy's examinee must draw with seed 1 (the run seed is read when models are built,
    not stored when the config is validated)."""
    from medmis.experiments.harness import DefenderConfig, Harness, RunConfig

    sample = Path(__file__).resolve().parents[1] / "fixtures" / "medmisbench_sample.jsonl"
    config = RunConfig(data=str(sample), models=["mock/examinee"], defenders=[DefenderConfig(name="none")],
                       out=str(tmp_path / "a"))
    copy = config.model_copy(update={"seed": 1, "out": str(tmp_path / "b")})
    seeds = [Harness(c)._pool.raw("mock/examinee").seed for c in (config, copy)]  # type: ignore[attr-defined]
    assert seeds == [0, 1]
    assert config.model_options.run_seed is None  # nothing stored: the copy cannot inherit it
