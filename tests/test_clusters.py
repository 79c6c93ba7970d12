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

ray: Any
try:  # here, not inside a test: Ray's log handler keeps the stderr of its first import, and a
    import ray  # test's captured stderr is closed when that test ends
except ImportError:  # the `ray` extra is optional: its tests are skipped
    ray = None
needs_ray = pytest.mark.skipif(ray is None, reason="needs the ray extra (pip install 'medmis[ray]')")

# one xdist worker for the module under `--dist loadgroup`: the single run and the Ray cluster
# are module fixtures, made once per worker that runs a test needing them
pytestmark = pytest.mark.xdist_group("clusters")

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


# -- SLURM and Kubernetes: each recipe's shard command for every shard, then its merge ------------


SHELL_VAR = re.compile(r"\$(\w+)")  # bash's $NAME
KUBE_VAR = re.compile(r"\$\((\w+)\)")  # a container command's $(NAME)


def substitute(pattern: re.Pattern[str], env: dict[str, str], text: str) -> str:
    """``text`` with its variable references replaced from ``env`` (an unknown one fails the test)."""
    return pattern.sub(lambda m: env[m[1]], text)


def slurm_commands() -> tuple[list[list[str]], list[str]]:
    """The array job's command for every array task (``$SLURM_...`` expanded as bash expands
    it, with SLURM's variables for that task) and the merge job's command."""
    scripts = [b for b in blocks("bash") if "#SBATCH" in b]
    array = next(s for s in scripts if "--array=" in s)
    first, last = map(int, re.search(r"#SBATCH --array=(\d+)-(\d+)", array).groups())  # type: ignore[union-attr]
    shard_cmd = next(line for line in array.splitlines() if line.startswith("medmis ablate"))
    merge_cmd = next(line for s in scripts for line in s.splitlines() if line.startswith("medmis merge"))
    assert "--shard auto" in shard_cmd and (first, last) == (0, 3)
    tasks = []
    for task in range(first, last + 1):
        env = {"SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_MIN": str(first),
               "SLURM_ARRAY_TASK_COUNT": str(last - first + 1)}
        tasks.append([f"{k}={v}" for k, v in env.items()] + shlex.split(substitute(SHELL_VAR, env, shard_cmd)))
    return tasks, shlex.split(merge_cmd)


def k8s_commands(volume: Path) -> tuple[list[list[str]], list[str]]:
    """The Indexed Job's container command for every completion index (``$(NAME)`` from the
    container's env as the kubelet expands it, the volume's mount path on ``volume``) with the
    env each pod gets, and the merge Job's command."""
    jobs = [doc for b in blocks("yaml") for doc in yaml.safe_load_all(b)]
    indexed = next(j for j in jobs if j["spec"].get("completionMode") == "Indexed")
    merge = next(j for j in jobs if j is not indexed)["spec"]["template"]["spec"]["containers"][0]
    container = indexed["spec"]["template"]["spec"]["containers"][0]

    def expand(command: list[str], env: dict[str, str], mount: str) -> list[str]:
        done = [substitute(KUBE_VAR, env, part) for part in command]
        return [str(volume) + part[len(mount):] if part.startswith(mount) else part for part in done]

    pods = []
    for index in range(indexed["spec"]["completions"]):
        env = {"JOB_COMPLETION_INDEX": str(index)}  # the Job controller sets it in every pod
        for var in container["env"]:  # the downward API's annotation is the completion index
            if "valueFrom" in var:
                assert "job-completion-index" in var["valueFrom"]["fieldRef"]["fieldPath"]
            env[var["name"]] = str(index) if "valueFrom" in var else var["value"]
        command = expand(container["command"], env, container["volumeMounts"][0]["mountPath"])
        pods.append([f"{k}={v}" for k, v in env.items()] + command)
    return pods, expand(merge["command"], {}, merge["volumeMounts"][0]["mountPath"])


def run_with_env(where: Path, line: list[str], monkeypatch: pytest.MonkeyPatch, *extra: str) -> int:
    """``NAME=VALUE ... medmis ARGS`` in-process in ``where``, the variables set for it only."""
    with monkeypatch.context() as mp:
        while "=" in line[0]:
            name, value = line[0].split("=", 1)
            mp.setenv(name, value)
            line = line[1:]
        assert line[0] == "medmis"
        mp.chdir(where)
        return main([*line[1:], *extra])


def test_the_slurm_and_kubernetes_recipes_merged_are_the_single_run(
        tmp_path: Path, single: Path, fixed_clock: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SLURM array runs the shards; the Indexed Job's pods, on a volume holding the same
    folders, resume them: each pod must name the shard its array task ran (another shard's
    folder, or another run's, is refused) and finds nothing to do. Both merges are the single run."""
    where = workdir(tmp_path / "clone")
    tasks, slurm_merge = slurm_commands()
    for task in tasks:
        assert run_with_env(where, task, monkeypatch, *REDUCED) == 0
    assert run_with_env(where, slurm_merge, monkeypatch) == 0
    slurm_out = where / slurm_merge[slurm_merge.index("--out") + 1]
    assert outputs(slurm_out) == outputs(single)

    slurm_out.rename(where / "slurm-merged")  # the Kubernetes merge writes the same path
    pods, k8s_merge = k8s_commands(where / "runs")  # the volume: the folder the array wrote in
    assert len(pods) == len(tasks)
    shards = sorted((where / "runs" / "shards").iterdir())
    before = [(p / "records.jsonl").read_bytes() for p in shards]
    for pod in pods:
        assert "--shard" in pod and "auto" in pod
        assert run_with_env(where, pod, monkeypatch, *REDUCED) == 0
    assert [(p / "records.jsonl").read_bytes() for p in shards] == before  # resumed: nothing re-run
    assert run_with_env(where, k8s_merge, monkeypatch) == 0
    k8s_out = Path(k8s_merge[k8s_merge.index("--out") + 1])
    assert outputs(k8s_out) == outputs(single)


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


@needs_ray
def test_ray_refuses_an_out_holding_another_run_before_starting(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "grid"
    out.mkdir()
    (out / "records.jsonl").write_text("", encoding="utf-8")  # a run's folder, not a merged grid
    assert main(["ablate", str(DEMO), "--ray", "--out", str(out), *REDUCED]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds another run; the shards are merged into a new folder" in err[0]
    assert not (tmp_path / "grid.shards").exists() and not ray.is_initialized()


@needs_ray
def test_ray_refuses_an_address_nothing_answers_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "grid"
    assert main(["ablate", str(DEMO), "--ray", f"127.0.0.1:{port}", "--out", str(out), *REDUCED]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--ray 127.0.0.1:{port}: nothing answers there" in err[0], err
    assert not out.exists() and not (tmp_path / "grid.shards").exists() and not ray.is_initialized()


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A local Ray cluster of two nodes with one CPU each; yields its address."""
    if ray is None:
        pytest.skip("needs the ray extra (pip install 'medmis[ray]')")
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


def test_ray_runs_the_grid_matches_the_single_run_and_a_failed_shard_resumes(
        tmp_path: Path, single: Path, ray_cluster: str, capsys: pytest.CaptureFixture[str]) -> None:
    """First on a local Ray instance the command starts itself (no ADDRESS) with one shard's
    folder blocked: that shard is named, the other finishes and stays; then on the 2-node
    cluster (its ADDRESS) the same command resumes: the finished shard is not re-run and the
    merged grid is the single run's. A third run finds the merged grid: nothing to do."""
    out = tmp_path / "grid"
    blocked = tmp_path / "grid.shards" / "1-of-2"
    blocked.parent.mkdir()
    blocked.write_text("not a folder\n", encoding="utf-8")  # shard 1 cannot make its folder
    argv = ["ablate", str(DEMO), "--out", str(out), *REDUCED]
    code = main([*argv, "--ray", "--shards", "2"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "medmis: 2 shards on Ray (local instance)" in err
    assert re.search(r"^medmis: shard 1/2: failed \(exit 2\): .*1-of-2", err, re.M), err
    assert "medmis: shard 0/2: finished" in err and "1 of 2 shards did not finish (1/2)" in err
    assert "Traceback" not in err and not out.exists() and not ray.is_initialized()
    finished = (tmp_path / "grid.shards" / "0-of-2" / "records.jsonl").read_bytes()

    blocked.unlink()
    assert main([*argv, "--ray", ray_cluster]) == 0  # 2 shards: those the first run left
    assert f"medmis: 2 shards on Ray ({ray_cluster})" in capsys.readouterr().err
    assert (tmp_path / "grid.shards" / "0-of-2" / "records.jsonl").read_bytes() == finished  # not re-run
    assert outputs(out, latency=False) == outputs(single, latency=False)
    assert json.loads((out / "manifest.json").read_text(encoding="utf-8"))["merged"]["shards"] == 2
    assert not ray.is_initialized()

    assert main([*argv, "--ray", ray_cluster]) == 0  # the merged grid: nothing to do, nothing started
    assert "nothing to do" in capsys.readouterr().out
    before = (out / "records.jsonl").read_bytes()
    # a changed setting over the merged grid is refused in one line, never "nothing to do"
    assert main([*argv, "--set", "seed=7", "--ray", ray_cluster]) == 2
    said = capsys.readouterr()
    assert "nothing to do" not in said.out and len(said.err.strip().splitlines()) == 1 and "seed" in said.err
    assert (out / "records.jsonl").read_bytes() == before and not ray.is_initialized()
