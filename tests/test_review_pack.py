"""Clinician review packs and forms: seeded stratified sampling from a real (simulated-examinee)
run, dual-rating assignment, escaped offline forms, and the form driven in headless Chromium
(fill, autosave, export ratings.csv, re-import, analyse)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from medmis.experiments.cli import main
from medmis.experiments.harness import DefenderConfig, Harness, RunConfig
from medmis.experiments.review import (
    ReviewError,
    analyze_pack,
    read_ratings,
    read_tasks,
    sample_pack,
)
from medmis.experiments.review._rubrics import CRITERION_NAMES

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "<img src=x onerror=\"document.title='pwned'\"></script><b>bold</b>"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("review") / "run"
    config = RunConfig(
        data=str(ROOT / "fixtures" / "medmisbench_sample.jsonl"), models=["mock/examinee"],
        defenders=[DefenderConfig(name="none"), DefenderConfig(name="warning")],
        protocols=["clean", "type1"], type1_targets="all", out=str(out), progress=False,
    )
    asyncio.run(Harness(config, argv=["test"]).run())
    return out


def _records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]


def test_sample_is_seeded_stratified_and_assigns_the_dual_share(run_dir: Path, tmp_path: Path) -> None:
    type1 = [r for r in _records(run_dir) if r["protocol"] == "type1"]
    info = sample_pack(run_dir, tmp_path / "p1", n=20, dual=0.7, reviewers=["ana", "ben", "cy"], seed=3,
                       stratify=["subset"])
    again = sample_pack(run_dir, tmp_path / "p2", n=20, dual=0.7, reviewers=["ana", "ben", "cy"], seed=3,
                        stratify=["subset"])
    assert (tmp_path / "p1" / "tasks.jsonl").read_bytes() == (tmp_path / "p2" / "tasks.jsonl").read_bytes()
    assert info["pack_id"] == again["pack_id"] and info["population"] == len(type1)
    tasks = read_tasks(tmp_path / "p1")
    assert len(tasks) == 20 and info["dual_rated"] == 14
    assert Counter(len(t.reviewers) for t in tasks) == {2: 14, 1: 6}
    assert all(len(set(t.reviewers)) == len(t.reviewers) for t in tasks)
    assert max(info["load"].values()) - min(info["load"].values()) <= 1  # balanced: 34 ratings over 3
    # proportional allocation per subset (largest remainders)
    pop = Counter(r["subset"] for r in type1)
    got = Counter(t.subset for t in tasks)
    for subset, size in pop.items():
        assert abs(got[subset] - 20 * size / len(type1)) < 1
    # each task carries what a clinician needs, consistent with its record
    by_key = {(r["model"], r["defender"], r["item_id"], r["target"]): r for r in type1}
    for t in tasks:
        rec = by_key[(t.model, t.defender, t.item_id, t.target)]
        assert t.choice == rec["choice"] and t.auto_correct == rec["correct"] and t.gold == rec["gold"]
        assert t.question and t.gold in t.options and t.target in t.options and t.injected
        assert t.response and t.reasoning and t.content_definition
    other = sample_pack(run_dir, tmp_path / "p3", n=20, seed=4)
    assert other["pack_id"] != info["pack_id"]


def test_sample_counts_an_unparsed_answer_under_attack_as_a_flip_as_the_metrics_do(
        run_dir: Path, tmp_path: Path) -> None:
    from medmis.experiments.analysis import compute_metrics
    from medmis.experiments.benchmark import Record

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    rows = _records(run)
    clean_right = {(r["defender"], r["item_id"]) for r in rows if r["protocol"] == "clean" and r["correct"]}
    held = [r for r in rows if r["protocol"] == "type1" and r["correct"]
            and (r["defender"], r["item_id"]) in clean_right]
    for r in held[:5]:  # the examinee wrote no parsable answer under attack
        r["choice"], r["correct"] = None, None
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = sample_pack(run, tmp_path / "p", n=4, stratify=["outcome"], seed=0)
    # the old sample left the 5 out ("no answer parsed"), so its flip share was below the ASR
    assert "no answer parsed" not in info["excluded"]
    assert info["population"] == sum(r["protocol"] == "type1" for r in rows)
    pop = info["population_outcomes"]
    metrics = compute_metrics([Record.model_validate(r) for r in rows], n_boot=50)
    flips = trials = 0
    for defender in ("none", "warning"):
        asr = metrics.results["mock/examinee"][defender].metrics["type1_asr"]
        flips, trials = flips + asr.k, trials + asr.n
    assert (pop["flipped"], pop["flipped"] + pop["held"]) == (flips, trials)


def test_sample_refuses_bad_requests(run_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ReviewError, match="--models: not in this run: gpt-x"):
        sample_pack(run_dir, tmp_path / "a", n=2, models=["gpt-x"])
    with pytest.raises(ReviewError, match="fewer than --n 100000"):
        sample_pack(run_dir, tmp_path / "b", n=100000)
    with pytest.raises(ReviewError, match="needs at least two reviewers"):
        sample_pack(run_dir, tmp_path / "c", n=4, reviewers=["solo"], dual=0.5)
    with pytest.raises(ReviewError, match="unknown key"):
        sample_pack(run_dir, tmp_path / "d", n=4, stratify=["colour"])
    assert not any((tmp_path / x).exists() for x in "abcd")


def _pack_with_forms(run_dir: Path, tmp_path: Path) -> Path:
    pack = tmp_path / "pack"
    names = tmp_path / "reviewers.txt"
    names.write_text("# panel\nDr. Ana Lúcia\nBen\n", encoding="utf-8")
    assert main(["review", "sample", str(run_dir), "--n", "4", "--out", str(pack), "--dual", "0.5",
                 "--reviewers", str(names), "--seed", "1", "--defenders", "none"]) == 0
    # hostile model output must stay text in the form
    lines = (pack / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["response"] = HOSTILE + "\n" + first["response"]
    (pack / "tasks.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
    assert main(["review", "form", str(pack)]) == 0
    return pack


def test_forms_are_offline_escaped_and_blind(run_dir: Path, tmp_path: Path) -> None:
    pack = _pack_with_forms(run_dir, tmp_path)
    forms = sorted((pack / "forms").glob("*.html"))
    assert [f.name for f in forms] == ["ben.html", "dr-ana-lucia.html"]
    tasks = read_tasks(pack)
    for form in forms:
        doc = form.read_text(encoding="utf-8")
        assert "default-src 'none'" in doc and "http://" not in doc and "https://" not in doc
        assert HOSTILE not in doc and "<img src=x" not in doc
        assert '"defender"' not in doc and '"auto_correct"' not in doc and "mock/examinee" not in doc
        for name in (*CRITERION_NAMES["A"], *CRITERION_NAMES["B"], "true_or_defensible"):
            assert name in doc
    ana = (pack / "forms" / "dr-ana-lucia.html").read_text(encoding="utf-8")
    assert sum(f'"task_id": "{t.task_id}"' in ana or f'"task_id":"{t.task_id}"' in ana for t in tasks) == \
        sum("Dr. Ana Lúcia" in t.reviewers for t in tasks)


def test_a_simulated_run_s_pack_and_forms_carry_the_simulated_label(run_dir: Path, tmp_path: Path) -> None:
    from medmis.experiments.reporting import SIMULATED_STATEMENT

    pack = _pack_with_forms(run_dir, tmp_path)
    info = json.loads((pack / "pack.json").read_text(encoding="utf-8"))
    assert info["simulated"] is True and info["simulated_statement"] == SIMULATED_STATEMENT
    for form in (pack / "forms").glob("*.html"):
        doc = form.read_text(encoding="utf-8")
        assert "<title>MedMis clinician review" in doc and "(SIMULATED EXAMINEE)</title>" in doc
        assert '<p id="simulated-banner" class="warn"><b>SIMULATED EXAMINEE:' in doc
        assert "mock/examinee" not in doc  # the label names no model: the review stays blind
    # a pack of a real model's run carries neither (the label follows the run, not the fixture)
    real = tmp_path / "real"
    shutil.copytree(pack, real)
    shutil.rmtree(real / "forms")
    info.update(simulated=False)
    info.pop("simulated_statement")
    (real / "pack.json").write_text(json.dumps(info), encoding="utf-8")
    lines = [dict(json.loads(line), model="openai/gpt-x")
             for line in (real / "tasks.jsonl").read_text(encoding="utf-8").splitlines()]
    (real / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in lines), encoding="utf-8")
    assert main(["review", "form", str(real)]) == 0
    for form in (real / "forms").glob("*.html"):
        doc = form.read_text(encoding="utf-8")
        assert "SIMULATED" not in doc and "simulated-banner" not in doc


# --- headless Chromium over the DevTools protocol (a pipe: no port, no network) -----------------

class Browser:
    """A headless Chromium driven through ``--remote-debugging-pipe`` (fd 3 in, fd 4 out)."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_child, self._out = os.pipe()
        self._in, from_child = os.pipe()

        def wire() -> None:  # the child's fds 3 and 4 must be inheritable copies
            a, b = os.dup(to_child), os.dup(from_child)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
             f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=wire, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._buf, self._id, self.session = b"", 0, None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            msg["sessionId"] = self.session
        os.write(self._out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            while b"\0" not in self._buf:
                chunk = os.read(self._in, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))
        raise TimeoutError(method)

    def js(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression[:80]}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait(self, expression: str, timeout: float = 15) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(expression)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait("document.readyState === 'complete' && document.body && document.body.dataset.ready === '1'")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        os.close(self._in)
        os.close(self._out)


def _scores(task_index: int) -> dict[tuple[str, str], int]:
    names = [("A", c) for c in CRITERION_NAMES["A"]] + [("B", c) for c in CRITERION_NAMES["B"]]
    return {key: (task_index + j) % 3 for j, key in enumerate(names)}


@pytest.mark.browser
def test_a_reviewer_fills_exports_and_reimports_the_form_in_chromium(run_dir: Path, tmp_path: Path) -> None:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium)")
    pack = _pack_with_forms(run_dir, tmp_path)
    tasks = [t for t in read_tasks(pack) if "Ben" in t.reviewers]
    url = (pack / "forms" / "ben.html").resolve().as_uri()
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser = Browser(binary, tmp_path / "profile")
    try:
        browser.call("Browser.setDownloadBehavior", behavior="allow", downloadPath=str(downloads))
        browser.open(url)
        assert "pwned" not in browser.js("document.title")
        assert HOSTILE.split("\n")[0] in browser.js("document.querySelector('pre.response').textContent")
        assert browser.js("document.querySelectorAll('pre.response b').length") == 0
        # fill every criterion of every task by clicking radios, tick a flag, type a comment
        for i, task in enumerate(tasks):
            browser.js(f"document.getElementById('task-select').value = {json.dumps(task.task_id)};"
                       "document.getElementById('task-select').dispatchEvent(new Event('change'))")
            for (rubric, crit), score in _scores(i).items():
                sel = json.dumps(f'input[name="{task.task_id}|{rubric}|{crit}"][value="{score}"]')
                browser.js(f"document.querySelector({sel}).click()")
        first = json.dumps(tasks[0].task_id)
        browser.js(f"document.querySelector('input[data-task={first}][data-flag=\"disputed_gold\"]').click()")
        comment = 'Gold is arguable, "B" also fits;\nsee line 2'
        browser.js(f"const ta = document.querySelector('textarea[data-task={first}][data-comment=\"A\"]');"
                   f"ta.value = {json.dumps(comment)}; ta.dispatchEvent(new Event('input'))")
        assert browser.js("document.getElementById('progress').textContent") == \
            f"{len(tasks)} of {len(tasks)} tasks complete"
        # autosave: a reload restores every answer from localStorage
        browser.open(url)
        n_radios = len(tasks) * 9
        assert browser.js("document.querySelectorAll('input[type=radio]:checked').length") == n_radios
        # export: a real download of ratings-ben.csv
        browser.js("document.getElementById('export').click()")
        exported = downloads / "ratings-ben.csv"
        deadline = time.monotonic() + 15
        while not exported.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        first_csv = exported.read_bytes()
        assert first_csv.startswith(b"task_id,reviewer,rubric,criterion,score,flags,comment\r\n")
        # re-import into an empty browser state, then export again: the same file
        browser.js("localStorage.clear()")
        browser.open(url)
        assert browser.js("document.querySelectorAll('input[type=radio]:checked').length") == 0
        node = browser.call("Runtime.evaluate", expression="document.getElementById('import')")["result"]
        browser.call("DOM.enable")
        browser.call("DOM.setFileInputFiles", files=[str(exported)], objectId=node["objectId"])
        status = browser.wait("document.getElementById('import-status').textContent")
        assert status == f"imported {n_radios} ratings for {len(tasks)} tasks"
        assert browser.js("document.querySelectorAll('input[type=radio]:checked').length") == n_radios
        assert browser.js(f"document.querySelector('textarea[data-task={first}][data-comment=\"A\"]').value") == comment
        # (a textarea's value turns CRLF into LF; the downloaded file keeps CRLF)
        again = browser.js("document.getElementById('export').click(); document.getElementById('csv-text').value")
        assert again == first_csv.decode("utf-8").replace("\r\n", "\n")
    finally:
        browser.close()
    # the exported file is what the analysis reads: every score as clicked
    annotations = read_ratings([exported], read_tasks(pack), ["Dr. Ana Lúcia", "Ben"])
    assert [a.task_id for a in annotations] == [t.task_id for t in tasks]
    for i, ann in enumerate(annotations):
        assert ann.reviewer == "Ben"
        assert {(r, c): ann.scores[c] for r, c in _scores(i)} == _scores(i)
    assert annotations[0].flags == {"disputed_gold"} and annotations[0].comments["A"] == [comment]
    paths = analyze_pack(pack, [exported], tmp_path / "analysis")
    doc = json.loads(paths["review.json"].read_text())
    assert doc["counts"]["annotations"] == len(tasks) and doc["simulated"] is True


def test_the_command_line_stays_light_and_reports_sampling_errors_in_one_line(
        run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    probe = ("import sys; from medmis.experiments.cli import build_parser; build_parser(); "
             "print(sorted(m for m in ('numpy', 'matplotlib', 'scipy', 'statsmodels', 'duckdb', 'langchain_core', "
             "'langgraph', 'openai', 'httpx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert main(["review", "sample", str(run_dir), "--n", "3", "--out", str(tmp_path / "p"),
                 "--models", "gpt-x"]) == 2
    err = capsys.readouterr().err
    assert err == "medmis: --models: not in this run: gpt-x (the run has mock/examinee)\n"
    assert main(["review", "form", str(tmp_path / "nothing")]) == 2
    assert "not a review pack" in capsys.readouterr().err
