"""What decides an answer is in a run folder's fingerprint, and every entry point that writes
into a folder checks it first (issue 22, items 1 and 2): ``medmis ablate`` on a complete folder
with other settings exits 2 naming the field instead of "nothing to do"; the effective base URL
(flag or environment), each defender's code, the simulated examinee's settings are compared;
medmis's own version and commit are announced, never refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clear_provider_env
from test_replicas_cli import servers

from medmis.experiments.cli import main
from medmis.experiments.harness._fingerprint import compare_fingerprints

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))


# -- medmis ablate ---------------------------------------------------------------------------

def ablation(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(f"""
name = "fp"
data = "{SAMPLE.as_posix()}"
subset = "MEDMISHLE"
limit = 2
seed = 0
prompt = "paper"
out = "{(tmp_path / 'out').as_posix()}"
{extra}

[[models]]
spec = "mock/examinee"

[[defenders]]
name = "none"
""", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def complete_ablation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The out folder of :func:`ablation`'s grid, run once for the module; tests copy it."""
    where = tmp_path_factory.mktemp("fp")
    assert main(["ablate", str(ablation(where)), "--no-progress"]) == 0
    return where / "out"


@pytest.mark.parametrize(("edit", "flags", "field"), [
    (("seed = 0", "seed = 7"), [], "seed: 0 -> 7"),
    (('prompt = "paper"', 'prompt = "toolkit"'), [], "prompt: paper@2 -> toolkit@1"),
    (None, ["--set", "seed=3"], "seed: 0 -> 3"),
    (None, ["--set", "prompt=toolkit"], "prompt: paper@2 -> toolkit@1"),
    (None, ["--set", 'protocols=["clean"]'], "protocols:"),
    (None, ["--limit", "1"], "limit: 2 -> 1"),
])
def test_ablate_on_a_complete_folder_refuses_other_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: tuple[str, str] | None, flags: list[str],
    field: str, complete_ablation: Path,
) -> None:
    config = ablation(tmp_path)
    shutil.copytree(complete_ablation, tmp_path / "out")  # as `medmis ablate config` leaves it
    records = (tmp_path / "out" / "records.jsonl").read_text()
    assert main(["ablate", str(config), "--no-progress"]) == 0
    assert "nothing to do: 6 records complete" in capsys.readouterr().out
    if edit is not None:
        config.write_text(config.read_text().replace(*edit))
    assert main(["ablate", str(config), "--no-progress", *flags]) == 2
    captured = capsys.readouterr()
    line = one_line(captured.err)
    assert field in line and "--accept-change" in line and "choose a new --out" in line
    assert "nothing to do" not in captured.out
    assert (tmp_path / "out" / "records.jsonl").read_text() == records  # nothing written


def test_ablate_accepts_a_change_on_purpose_and_records_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           complete_ablation: Path) -> None:
    config = ablation(tmp_path)
    out = shutil.copytree(complete_ablation, tmp_path / "out")
    # the same case keys under another prompt: nothing is left to run, the change is recorded
    assert main(["ablate", str(config), "--no-progress", "--set", "prompt=toolkit",
                 "--accept-change", "prompt"]) == 0
    assert "accepted changes" in capsys.readouterr().err
    (entry,) = manifest(out)["accepted_changes"]
    assert entry["changes"]["prompt"] == ["paper@2", "toolkit@1"]
    assert manifest(out)["fingerprint"]["prompt"] == "toolkit@1"
    # another seed samples other Type 1 targets: accepted, they run
    assert main(["ablate", str(config), "--no-progress", "--set", "prompt=toolkit", "--set", "seed=3",
                 "--accept-change", "seed"]) == 0
    assert manifest(out)["fingerprint"]["seed"] == 3
    assert "nothing to do" not in capsys.readouterr().out


def test_ablate_checks_the_shuffled_pass_folder_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = ablation(tmp_path, '[delivery]\ntype2_shuffled = true')
    assert main(["ablate", str(config), "--no-progress"]) == 0
    shuffled = tmp_path / "out" / "type2_shuffled" / "manifest.json"
    data = json.loads(shuffled.read_text())
    data["fingerprint"]["seed"] = 9  # as if that pass had run with another seed
    shuffled.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["ablate", str(config), "--no-progress"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "type2_shuffled holds a different run (seed: 9 -> 0)" in line


# -- the effective base URL ------------------------------------------------------------------

def openai_run(out: Path, *extra: str) -> list[str]:
    return ["run", "--data", str(SAMPLE), "--limit", "2", "--model", "openai/served-model",
            "--defender", "none", "--protocol", "clean", "--out", str(out), "--no-progress",
            "--max-retries", "0", *extra]


def test_a_base_url_from_the_environment_is_in_the_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clear_provider_env(monkeypatch, "openai")
    out = tmp_path / "run"
    with servers(2) as (first, second):
        url = first.base_url.replace("http://", "http://user:secret@")
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        assert main(openai_run(out)) == 0
        fp = manifest(out)["fingerprint"]
        assert fp["endpoints"] == {"openai/served-model": first.base_url}  # no credentials
        assert "secret" not in (out / "manifest.json").read_text()
        # a resume against another server is another run
        monkeypatch.setenv("OPENAI_BASE_URL", second.base_url)
        capsys.readouterr()
        assert main(openai_run(out)) == 2
        line = one_line(capsys.readouterr().err)
        assert "endpoints:" in line and second.base_url in line and "--accept-change endpoints" in line
        assert second.requests == 0
        # the flag and the variable naming the same server are the same run
        monkeypatch.delenv("OPENAI_BASE_URL")
        assert main(openai_run(out, "--model-base-url", first.base_url)) == 0
        assert "nothing to do" in capsys.readouterr().out
        # and an accepted change is recorded
        monkeypatch.setenv("OPENAI_BASE_URL", second.base_url)
        assert main(openai_run(out, "--accept-change", "endpoints")) == 0
    changes = manifest(out)["accepted_changes"][-1]["changes"]
    assert changes["endpoints"][1] == {"openai/served-model": second.base_url}


def test_web_tool_servers_count_for_tool_using_defenders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    monkeypatch.delenv("TAVILY_BASE_URL", raising=False)
    base = ["run", "--data", str(SAMPLE), "--limit", "1", "--model", "mock/examinee", "--protocol", "clean",
            "--out", str(tmp_path / "run"), "--no-progress"]
    assert main([*base, "--defender", "search_agent"]) == 0
    from medmis.tools import corpus_digest

    local = f"local@sha256:{corpus_digest()}"  # the local corpus by its documents
    assert manifest(tmp_path / "run")["fingerprint"]["web_tools"] == {"search": local, "visit": "direct"}
    capsys.readouterr()
    assert main([*base, "--defender", "search_agent", "--search", "tavily"]) == 2
    refusal = one_line(capsys.readouterr().err)  # a long value is shortened in the line
    assert "web_tools: search='" in refusal and "search='tavily@https://api.tavily.com')" in refusal
    # a defender without tools resumes the folder whatever the tools would be
    assert main([*base, "--defender", "none", "--search", "tavily"]) == 0


# -- the simulated examinee ------------------------------------------------------------------

def mock_run(out: Path, *extra: str) -> list[str]:
    return ["run", "--data", str(SAMPLE), "--limit", "2", "--model", "mock/examinee", "--defender", "none",
            "--out", str(out), "--no-progress", *extra]


def test_the_examinees_knobs_and_seed_are_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(mock_run(out)) == 0
    fp = manifest(out)["fingerprint"]
    examinee = fp["examinee"]["mock/examinee"]
    assert examinee["policy"] == "examinee" and examinee["clean_accuracy"] == 0.8
    assert examinee["answer_key"].startswith("medmisbench_sample.jsonl:")
    capsys.readouterr()
    assert main(mock_run(out, "--model-option", "clean_accuracy=0.3")) == 2
    line = one_line(capsys.readouterr().err)
    assert "examinee: mock/examinee clean_accuracy=0.8 -> mock/examinee clean_accuracy=0.3" in line
    # its own seed, set apart from the run's
    assert main(mock_run(out, "--model-option", "seed=4")) == 2
    assert "mock/examinee seed=0 -> mock/examinee seed=4" in one_line(capsys.readouterr().err)
    # another answer key is another examinee
    key = tmp_path / "key.jsonl"
    key.write_text("\n".join(SAMPLE.read_text().splitlines()[:4]) + "\n")
    assert main(mock_run(out, "--model-option", f"answer_key={key}")) == 2
    assert "answer_key" in one_line(capsys.readouterr().err)


# -- defender code ---------------------------------------------------------------------------

PLUGIN = '''
from medmis.defenses import CaseView, DefenderContext, SolveFn, answer_from_reply, defender
from medmis.experiments.benchmark import Answer, render_prompt


@defender("fp_probe", single_call=True)
def fp_probe(opts) -> SolveFn:
    async def solve(case: CaseView, ctx: DefenderContext) -> Answer:
        reply = await ctx.generate(render_prompt(case), name="answer")
        return answer_from_reply(reply, case, ctx)

    return solve
'''


def install_plugin(site: Path, version: str = "0.1") -> Path:
    pkg = site / "fp_plugin"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "defense.py").write_text(PLUGIN)
    for old in site.glob("fp_plugin-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    dist = site / f"fp_plugin-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fp-plugin\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text("[medmis.defenders]\nfp_probe = fp_plugin.defense\n")
    return pkg / "defense.py"


def medmis(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-m", "medmis.experiments.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_editing_or_upgrading_a_plugin_is_another_defender(tmp_path: Path) -> None:
    site = tmp_path / "site"
    source = install_plugin(site)
    out = tmp_path / "run"
    args = ["run", "--data", str(SAMPLE), "--limit", "1", "--model", "mock/examinee", "--defender", "fp_probe",
            "--protocol", "clean", "--out", str(out), "--no-progress"]
    first = medmis(site, *args)
    assert first.returncode == 0, first.stderr
    code = manifest(out)["fingerprint"]["defenders"]["fp_probe"]["code"]
    assert code["distribution"] == "fp-plugin@0.1" and code["modules"] == ["fp_plugin.defense"]
    again = medmis(site, *args)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    # an edit of the plug-in's source (an editable or local install) is refused, not "nothing to do"
    source.write_text(PLUGIN.replace('name="answer"', 'name="first answer"'))
    edited = medmis(site, *args)
    assert edited.returncode == 2, edited.stdout
    line = one_line(edited.stderr)
    assert "defender_code fp_probe: sha256=" in line and "--accept-change defender_code" in line
    # as is a new version of its distribution
    install_plugin(site, version="0.2")
    upgraded = medmis(site, *args)
    assert upgraded.returncode == 2
    assert "distribution='fp-plugin@0.1'" in one_line(upgraded.stderr)
    accepted = medmis(site, *args, "--accept-change", "defender_code")
    assert accepted.returncode == 0, accepted.stderr
    assert manifest(out)["fingerprint"]["defenders"]["fp_probe"]["code"]["distribution"] == "fp-plugin@0.2"


def test_builtin_defenders_carry_a_hash_of_their_source(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(mock_run(out, "--protocol", "clean")) == 0
    code = manifest(out)["fingerprint"]["defenders"]["none"]["code"]
    # the factory's module and the defender-layer modules it imports (the contract it builds on:
    # registry, case view, context, answer extraction and prompt rendering)
    modules = [
        "medmis.defenses._base", "medmis.defenses._case", "medmis.defenses._context",
        "medmis.defenses._extract", "medmis.defenses._extract_json", "medmis.defenses._extract_rules",
        "medmis.defenses._extract_text", "medmis.defenses._prompts", "medmis.graphs._none",
    ]
    assert code["modules"] == modules and "distribution" not in code
    import hashlib

    digest = hashlib.sha256()
    for name in modules:
        package, file = name.split(".")[1:]
        digest.update(name.encode() + b"\0" + (ROOT / package / f"{file}.py").read_bytes() + b"\0")
    assert code["sha256"] == digest.hexdigest()


# -- medmis's own version: announced, never refused -----------------------------------------

def test_a_new_medmis_version_is_announced_not_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(mock_run(out)) == 0
    recorded = manifest(out)
    assert recorded["fingerprint"]["medmis"]["version"]
    recorded["fingerprint"]["medmis"] = {"version": "0.0.1", "commit": "0123456789abcdef"}
    (out / "manifest.json").write_text(json.dumps(recorded))
    capsys.readouterr()
    assert main(mock_run(out)) == 0
    captured = capsys.readouterr()
    (line,) = [x for x in captured.err.splitlines() if "medmis changed" in x]
    assert "0.0.1 (commit 0123456789ab) ->" in line and "nothing to do" in captured.out
    assert manifest(out)["fingerprint"]["medmis"]["version"] != "0.0.1"


def test_fields_an_older_manifest_did_not_record_are_not_compared(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(mock_run(out)) == 0
    old = manifest(out)
    for name in ("endpoints", "examinee", "web_tools", "medmis"):
        old["fingerprint"].pop(name, None)
    for spec in old["fingerprint"]["defenders"].values():
        spec.pop("code")
    (out / "manifest.json").write_text(json.dumps(old))
    assert main(mock_run(out, "--model-option", "clean_accuracy=0.3")) == 2  # model_options still counts
    assert main(mock_run(out)) == 0
    new = manifest(out)["fingerprint"]
    assert "examinee" in new and "code" in new["defenders"]["none"]  # recorded from now on
    diff = compare_fingerprints({"seed": 0, "models": ["mock/a"]}, {"seed": 0, "models": ["mock/a"],
                                                                    "examinee": {"mock/a": {"x": 1}}})
    assert not diff.changed


# -- medmis generate: the server from the environment ---------------------------------------

def test_generate_resumed_against_another_server_from_the_environment_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clear_provider_env(monkeypatch, "openai")
    out = tmp_path / "gen.jsonl"
    args = ["generate", str(ROOT / "fixtures" / "generate" / "medmcqa_sample.jsonl"), "--out", str(out),
            "--generator", "openai/gpt-gen", "--seed", "3", "--limit", "1"]
    with servers(2) as (first, second):
        monkeypatch.setenv("OPENAI_BASE_URL", first.base_url)
        # the fake server's reply is no injection bundle: the item is recorded as malformed (exit 1)
        assert main(args) in (0, 1)
        assert first.requests > 0
        recorded = json.loads((tmp_path / "gen.manifest.json").read_text())["fingerprint"]
        assert recorded["endpoint"] == first.base_url
        monkeypatch.setenv("OPENAI_BASE_URL", second.base_url)
        capsys.readouterr()
        assert main(args) == 2
        assert "differs in: endpoint" in one_line(capsys.readouterr().err)
        assert second.requests == 0


def test_an_option_recorded_as_absent_and_now_null_is_no_change() -> None:
    """A folder written before an option existed (the key absent) resumes when the option is
    null now: no empty ``model_options:  -> `` change that blocks the resume."""
    from medmis.experiments.harness._fingerprint import compare_fingerprints

    old = {"seed": 0, "model_options": {"temperature": 0.0, "extra": {}}}
    new = {"seed": 0, "model_options": {"temperature": 0.0, "extra": {}, "seed": None, "run_seed": None}}
    assert compare_fingerprints(old, new).changed == {}
    new["model_options"]["temperature"] = 1.0
    assert compare_fingerprints(old, new).changed == {"model_options": ({"temperature": 0.0}, {"temperature": 1.0})}


def test_ablate_checks_each_stability_folder_before_nothing_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a complete grid whose stability re-run folder holds another run was "nothing to do"
    config = ablation(tmp_path, "[simulation]\nstability_seeds = 2")
    assert main(["ablate", str(config), "--no-progress"]) == 0
    sub = tmp_path / "out" / "stability" / "seed-1"
    data = manifest(sub)
    data["fingerprint"]["seed"] = 5
    (sub / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    capsys.readouterr()
    assert main(["ablate", str(config), "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "seed: 5 -> 0" in one_line(captured.err) and "nothing to do" not in captured.out


def test_a_defenders_code_identity_covers_the_graph_modules_it_runs() -> None:
    """The modules a built-in defender's factory and options import from the defender layers,
    transitively, are hashed: a change to the toolkit search graph or a shared helper is a
    changed defender, not "nothing to do" over old answers."""
    from medmis.experiments.harness._identity import defender_code

    search = set(defender_code("search_agent")["modules"])
    assert {"medmis.graphs._search_toolkit", "medmis.graphs._search_paper",
            "medmis.graphs._search_common", "medmis.graphs._common"} <= search
    assert "medmis.graphs._escalate" in defender_code("escalate")["modules"]
