"""A grid spread over machines gives what one machine gives: docs/clusters.md's recipes and
``medmis ablate --ray``, each merged and compared with the single run on ``metrics.json`` and
``verdict.json`` (the main run's and the shuffled Type 2 pass's) and on every record's answer.

The grid is the demo (``experiments/configs/demo.toml``: the simulated examinee, the local
corpus, the shuffled Type 2 pass) reduced for time with :data:`REDUCED`: its first 4 items, the
defenders ``none`` and ``search_agent`` (a tool-using one, so the shards' record/replay stores
are merged too) and no stability re-runs.

The recipes' commands are read from the page itself (the SLURM scripts' ``medmis`` lines, the
Kubernetes manifests' ``command``) and run in-process with the scheduler's variables set as
SLURM and Kubernetes set them, for every shard; their merged files are compared byte for byte
(latency fixed at 0, as tests/test_shards.py fixes it: it is the one wall-clock figure). The
Ray test runs on a local Ray cluster of two nodes of one CPU each (``ray.cluster_utils.Cluster``,
started once for the module; about 10 s here) and is skipped without the ``ray`` extra; its
shards run in Ray's worker processes, whose clock the test cannot fix, so its metrics are
compared without the latency percentiles.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from medmis.experiments.cli import main
from medmis.experiments.records import read_records

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "experiments" / "configs" / "demo.toml"
PAGE = ROOT / "docs" / "clusters.md"
REDUCED = ["--limit", "4", "--set", 'defenders=[{name="none"}, {name="search_agent"}]',
           "--set", "simulation.stability_seeds=1", "--no-progress"]
RUN_FOLDERS = (".", "type2_shuffled")
BLOCK = re.compile(r"```(?P<lang>bash|yaml)\n(?P<code>.*?)```", re.DOTALL)


def blocks(lang: str) -> list[str]:
    return [m["code"] for m in BLOCK.finditer(PAGE.read_text(encoding="utf-8")) if m["lang"] == lang]


def workdir(tmp: Path) -> Path:
    """A folder laid out as the clone, so the page's relative paths resolve and writes stay in it."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in ("fixtures", "experiments"):
        (tmp / name).symlink_to(ROOT / name, target_is_directory=True)
    return tmp


def outputs(grid: Path, *, latency: bool = True) -> dict[str, Any]:
    """What must not depend on how the grid was run: each run folder's metrics.json and
    verdict.json bytes (those it writes) and its record keys with their answers; without
    ``latency``, metrics.json less its latency figures."""
    found: dict[str, Any] = {}
    for rel in RUN_FOLDERS:
        folder = grid / rel
        for name in ("metrics.json", "verdict.json"):
            if (folder / name).exists():
                found[f"{rel}/{name}"] = (folder / name).read_bytes()
        if not latency:
            found[f"{rel}/metrics.json"] = json.dumps(_without_latency(json.loads(found[f"{rel}/metrics.json"])))
        found[f"{rel}/records"] = sorted((r.model, r.defender, r.protocol, r.item_id, r.target or "", r.choice or "")
                                         for r in read_records(folder / "records.jsonl"))
    return found


def _without_latency(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_latency(v) for k, v in value.items() if not k.startswith("latency")}
    return value


def _fix_clock(mp: pytest.MonkeyPatch) -> None:
    """Every case's latency 0 (as tests/test_shards.py fixes it) in this process's runs."""
    mp.setattr("medmis.experiments.harness._runner.time", types.SimpleNamespace(perf_counter=lambda: 0.0))


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    _fix_clock(monkeypatch)


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reduced demo grid run on one machine (latency fixed at 0)."""
    out = tmp_path_factory.mktemp("single") / "demo"
    with pytest.MonkeyPatch.context() as mp:
        _fix_clock(mp)
        assert main(["ablate", str(DEMO), "--out", str(out), *REDUCED]) == 0
    assert {"./metrics.json", "./verdict.json", "type2_shuffled/metrics.json"} <= set(outputs(out))
    return out


def run_in(where: Path, argv: list[str]) -> int:
    cwd = Path.cwd()
    os.chdir(where)
    try:
        return main(argv)
    finally:
        os.chdir(cwd)


# -- SLURM: the array job's command for every array task, then the merge job's ------------------


def test_the_slurm_recipe_merged_is_the_single_run(tmp_path: Path, single: Path, fixed_clock: None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    scripts = [b for b in blocks("bash") if "#SBATCH" in b]
    array = next(s for s in scripts if "--array=" in s)
    first, last = map(int, re.search(r"#SBATCH --array=(\d+)-(\d+)", array).groups())  # type: ignore[union-attr]
    shard_cmd = next(line for line in array.splitlines() if line.startswith("medmis ablate"))
    merge_cmd = next(line for s in scripts for line in s.splitlines() if line.startswith("medmis merge"))
    assert "--shard auto" in shard_cmd and (first, last) == (0, 3)
    where = workdir(tmp_path / "clone")
    for task in range(first, last + 1):  # as SLURM sets them in each array task
        env = {"SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_MIN": str(first),
               "SLURM_ARRAY_TASK_COUNT": str(last - first + 1)}
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        argv = shlex.split(os.path.expandvars(shard_cmd))  # as bash expands $SLURM_ARRAY_TASK_ID
        assert run_in(where, [*argv[1:], *REDUCED]) == 0
    for name in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT"):
        monkeypatch.delenv(name)
    assert run_in(where, shlex.split(merge_cmd)[1:]) == 0
    out = shlex.split(merge_cmd)[shlex.split(merge_cmd).index("--out") + 1]
    assert outputs(where / out) == outputs(single)


# -- Kubernetes: the Indexed Job's container command for every index, then the merge Job's ------


def _expand(command: list[str], env: dict[str, str], mount: str, volume: Path) -> list[str]:
    """A container command as the kubelet runs it: ``$(NAME)`` from the container's env, the
    volume's mount path on the test's folder."""
    expanded = [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], part) for part in command]
    return [str(volume) + part[len(mount):] if part.startswith(mount) else part for part in expanded]


def test_the_kubernetes_recipe_merged_is_the_single_run(tmp_path: Path, single: Path, fixed_clock: None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = [doc for b in blocks("yaml") for doc in yaml.safe_load_all(b)]
    indexed = next(j for j in jobs if j["spec"].get("completionMode") == "Indexed")
    merge = next(j for j in jobs if j is not indexed)
    completions = indexed["spec"]["completions"]
    container = indexed["spec"]["template"]["spec"]["containers"][0]
    mount = container["volumeMounts"][0]["mountPath"]
    where = workdir(tmp_path / "clone")
    volume = tmp_path / "volume"
    for index in range(completions):
        env: dict[str, str] = {}
        for var in container["env"]:  # the downward API's annotation is the completion index
            if "valueFrom" in var:
                assert "job-completion-index" in var["valueFrom"]["fieldRef"]["fieldPath"]
            env[var["name"]] = str(index) if "valueFrom" in var else var["value"]
        env.setdefault("JOB_COMPLETION_INDEX", str(index))  # the Job controller's own
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        argv = _expand(container["command"], env, mount, volume)
        assert argv[:2] == ["medmis", "ablate"] and "auto" in argv
        assert run_in(where, [*argv[1:], *REDUCED]) == 0
    for name in env:
        monkeypatch.delenv(name)
    merge_container = merge["spec"]["template"]["spec"]["containers"][0]
    argv = _expand(merge_container["command"], {}, merge_container["volumeMounts"][0]["mountPath"], volume)
    assert len([a for a in argv if a.startswith(str(volume / "shards"))]) == completions
    assert run_in(where, argv[1:]) == 0
    assert outputs(Path(argv[argv.index("--out") + 1])) == outputs(single)


# -- Ray ------------------------------------------------------------------------------------------


def test_ray_missing_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # as on an install without the extra
    out = tmp_path / "grid"
    assert main(["ablate", str(DEMO), "--ray", "--out", str(out), *REDUCED]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["medmis: --ray needs Ray, an optional extra: pip install 'medmis[ray]'"]
    assert not out.exists() and not (tmp_path / "grid.shards").exists()


def test_shards_without_ray_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ablate", str(DEMO), "--shards", "2", "--out", str(tmp_path / "grid")]) == 2
    assert "--shards N goes with --ray" in capsys.readouterr().err
    assert not (tmp_path / "grid").exists()


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A local Ray cluster of two nodes with one CPU each; yields its address."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            yield cluster.address
        finally:
            cluster.shutdown()


def test_ray_on_two_workers_matches_the_single_run_and_a_failed_shard_resumes(
        tmp_path: Path, single: Path, ray_cluster: str, capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    out = tmp_path / "grid"
    blocked = tmp_path / "grid.shards" / "1-of-2"
    blocked.parent.mkdir()
    blocked.write_text("not a folder\n", encoding="utf-8")  # shard 1 cannot make its folder
    argv = ["ablate", str(DEMO), "--ray", ray_cluster, "--out", str(out), *REDUCED]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert re.search(r"^medmis: shard 1/2: failed \(exit 2\): .*1-of-2", err, re.M), err
    assert "medmis: shard 0/2: finished" in err and "1 of 2 shards did not finish (1/2)" in err
    assert "Traceback" not in err and not out.exists() and not ray.is_initialized()
    finished = (tmp_path / "grid.shards" / "0-of-2" / "records.jsonl").read_bytes()

    blocked.unlink()
    assert main(argv) == 0  # shards: 2, from the folders the first run left
    assert "medmis: 2 shards on Ray" in capsys.readouterr().err
    assert (tmp_path / "grid.shards" / "0-of-2" / "records.jsonl").read_bytes() == finished  # not re-run
    assert outputs(out, latency=False) == outputs(single, latency=False)
    assert json.loads((out / "manifest.json").read_text(encoding="utf-8"))["merged"]["shards"] == 2

    assert main(argv) == 0  # the merged grid: nothing to do, nothing started
    assert "nothing to do" in capsys.readouterr().out
