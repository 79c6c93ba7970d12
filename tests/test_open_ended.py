"""The open-ended protocol (``answer_format = "open"``): the same cases asked without their options,
a free-text answer recorded ungraded, through the same harness, defenders, fingerprint, resume and
record/replay; the simulated examinee answers in words from what its prompt says.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from examinee_items import synthetic_items
from fakes import toy_item
from test_replay import normalised_output

from medmis.agents._examinee import SimulatedExaminee
from medmis.defenses import (
    OPEN_INSTRUCTION,
    CaseView,
    DefenderContext,
    create_defender,
    defender,
    get_spec,
    list_defenders,
    mcq_only,
    render_prompt,
)
from medmis.experiments import Harness, RunConfig
from medmis.experiments.analysis import compute_run_metrics, is_correct
from medmis.experiments.benchmark import Case, ContextSentence, Item, build_cases
from medmis.experiments.cli import main
from medmis.experiments.harness import Fingerprint
from medmis.experiments.harness._config import RunStats
from medmis.experiments.records import Record, UngradedRunError, answer_format_of, read_records
from medmis.experiments.reporting import write_report

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"
OPEN_DEFENDERS = ["none", "warning", "spotlight", "sandwich", "context_blind"]  # one call, no tools


def _case(item: Item, protocol: str, target: str | None = None, *, prompt: str = "paper") -> Case:
    context: tuple[ContextSentence, ...] = ()
    if protocol == "type1":
        assert target is not None
        context = (ContextSentence(text=item.contexts[target], option=target, truthful=False),)
    return Case(item=item, protocol=protocol, target=target, context=context, prompt=prompt,  # type: ignore[arg-type]
                answer_format="open")


# --- the prompt -------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", ["paper", "toolkit"])
@pytest.mark.parametrize("protocol", ["clean", "type1"])
def test_an_open_case_is_worded_without_its_options(prompt: str, protocol: str) -> None:
    item = toy_item()
    case = _case(item, protocol, "A" if protocol == "type1" else None, prompt=prompt)
    view = case.view()
    assert view.is_open and dict(view.options) == {}
    messages = render_prompt(view)
    text = "\n".join(str(m.content) for m in messages)
    assert item.question in text and OPEN_INSTRUCTION in text
    assert "Options:" not in text and "answer_letter" not in text and "Final answer" not in text
    for option in item.options.values():  # no option is shown (the type1 sentence names only its own)
        assert option not in text or (protocol == "type1" and option.casefold() in item.contexts["A"].casefold())
    assert messages.structured_output is None
    assert messages.version.endswith("+open1")
    assert (item.contexts["A"] in text) == (protocol == "type1")


def test_a_released_stem_that_embeds_its_options_is_shown_without_them() -> None:
    item = toy_item().model_copy(update={"released_question": "Which vitamin? (A) Vitamin A (B) Vitamin C"})
    assert "(A)" in Case(item=item, protocol="clean").view().question  # the paper shows it as released
    assert _case(item, "clean").view().question == item.question


def test_the_view_refuses_options_on_an_open_case_and_none_on_a_multiple_choice_one() -> None:
    with pytest.raises(ValueError, match="shows no options"):
        CaseView("q", {"A": "x"}, answer_format="open")
    with pytest.raises(ValueError, match="at least one option"):
        CaseView("q", {})
    with pytest.raises(ValueError, match="unknown answer format"):
        CaseView("q", {"A": "x"}, answer_format="essay")  # type: ignore[arg-type]


def test_the_same_cases_either_way() -> None:
    items = synthetic_items(5)
    mcq = build_cases(items, ["clean", "type1", "type2"], type1_targets="all")
    opened = build_cases(items, ["clean", "type1", "type2"], type1_targets="all", answer_format="open")
    assert [(c.key, c.context) for c in mcq] == [(c.key, c.context) for c in opened]
    assert {c.answer_format for c in opened} == {"open"}


# --- which defenders work without options ---------------------------------------------------


def test_each_builtin_declares_whether_it_works_without_options() -> None:
    specs = {s.name: s for s in list_defenders()}
    works = sorted(n for n, s in specs.items() if s.works_with("open"))
    assert works == sorted([*OPEN_DEFENDERS, "claim_verify"])
    assert all(s.works_with("mcq") for s in specs.values())
    assert mcq_only(["none", "isolate_vote[margin=2]", "robustrag", "calibrate", "warning"], "open") == [
        "isolate_vote[margin=2]", "robustrag", "calibrate"]
    assert mcq_only(["isolate_vote"], "mcq") == []


def test_a_defender_is_multiple_choice_only_unless_it_says_so() -> None:
    @defender("open_probe_default")
    def probe(opts: Any) -> Any:
        raise AssertionError("not built")

    try:
        assert get_spec("open_probe_default").answer_formats == ("mcq",)
        with pytest.raises(ValueError, match="answer_formats"):
            defender("open_probe_bad", answer_formats=("essay",))  # type: ignore[arg-type]
    finally:  # the registry is process-wide: later tests list every registered defender
        from medmis.defenses import _base

        _base._REGISTRY.pop("open_probe_default", None)


@pytest.mark.parametrize("name", OPEN_DEFENDERS)
async def test_open_capable_defenders_return_free_text_and_no_choice(name: str) -> None:
    item = toy_item()
    model = SimulatedExaminee(items=[item])
    for protocol in ("clean", "type1"):
        ctx = DefenderContext(model=model, model_spec="mock/examinee")
        answer = await create_defender(name)(_case(item, protocol, "A" if protocol == "type1" else None), ctx)
        assert answer.error is None and answer.choice is None and answer.method == "open"
        assert answer.raw.startswith("Answer: ")


def test_medmis_run_refuses_a_multiple_choice_only_defender_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code = main(["run", "--data", str(SAMPLE), "--model", "mock/examinee", "--defender", "none,isolate_vote",
                 "--answer-format", "open", "--out", str(out), "--limit", "1", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not out.exists()
    assert len(err) == 1 and "isolate_vote" in err[0] and "--answer-format open" in err[0]


def test_an_ablation_skips_multiple_choice_only_defenders_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "open.toml"
    config.write_text(f'''
data = "{SAMPLE.as_posix()}"
answer_format = "open"
protocols = ["clean", "type1"]
[[models]]
spec = "mock/examinee"
[[defenders]]
name = "none"
[[defenders]]
name = "isolate_vote"
[[defenders]]
name = "robustrag"
''', encoding="utf-8")
    from medmis.experiments.ablation import ablate_command

    assert ablate_command(str(config), out=str(tmp_path / "grid"), dry_run=True, overrides=["limit=2"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "skipping" in line]
    assert err == ["medmis: answer_format open: skipping isolate_vote, robustrag "
                   "(multiple choice only; an open-ended case shows no options)"]


# --- a run: records, report, metrics, fingerprint, resume, replay ----------------------------


def _config(tmp_path: Path, out: str, **kw: Any) -> RunConfig:
    fields: dict[str, Any] = {
        "data": str(SAMPLE), "models": ["mock/examinee"], "limit": 3, "answer_format": "open",
        "defenders": [{"name": "none"}, {"name": "warning"}], "out": str(tmp_path / out), "progress": False,
    }
    return RunConfig(**{**fields, **kw})


async def test_an_open_run_records_free_text_ungraded_and_its_report_says_so(tmp_path: Path) -> None:
    result = await Harness(_config(tmp_path, "run"), argv=["test"]).run()
    assert result.stats.errors == 0 and result.new_records > 0
    run = tmp_path / "run"
    records = read_records(run / "records.jsonl")
    assert {r.answer_format for r in records} == {"open"}
    assert all(r.choice is None and r.correct is None and r.raw and r.method == "open" for r in records)
    assert {r.prompt_version for r in records} == {"2+open1"}
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["answer_format"] == "open" and manifest["fingerprint"]["answer_format"] == "open"
    assert manifest["fingerprint"]["prompt"] == "paper@2+open1"
    assert answer_format_of(run) == "open"
    written = write_report(run)
    assert set(written) == {"report.md", "report.html"}
    report = (run / "report.md").read_text(encoding="utf-8")
    assert "Not graded here" in report and "medmis grade" in report
    assert "Clean acc" not in report and "Unparsed" not in report  # no MCQ table counting them as wrong
    assert not (run / "metrics.json").exists() and not (run / "verdict.json").exists()
    with pytest.raises(UngradedRunError, match="open-ended"):
        compute_run_metrics(run)
    with pytest.raises(UngradedRunError, match="not graded here"):
        is_correct(records[0])


def test_an_mcq_record_line_is_unchanged_and_an_open_one_carries_its_text() -> None:
    mcq = Record(model="m", defender="none", protocol="clean", item_id="1", subset="S", gold="A", choice="A",
                 correct=True)
    assert "answer_format" not in mcq.model_dump() and "raw" not in mcq.model_dump()
    opened = Record(model="m", defender="none", protocol="clean", item_id="1", subset="S", gold="A",
                    answer_format="open", raw="Answer: x.")
    assert opened.model_dump()["answer_format"] == "open" and opened.model_dump()["raw"] == "Answer: x."
    assert Record.model_validate_json(opened.model_dump_json()) == opened


def test_the_progress_line_counts_open_answers_as_ungraded() -> None:
    stats = RunStats()
    stats.add(Record(model="m", defender="none", protocol="clean", item_id="1", subset="S", gold="A",
                     answer_format="open", raw="x"), {})
    assert stats.describe() == "1 open answers (ungraded)" and stats.graded["clean"] == [0, 0]


def test_changing_the_answer_format_on_resume_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--data", str(SAMPLE), "--model", "mock/examinee", "--defender", "none", "--limit", "1",
            "--protocol", "clean", "--out", str(tmp_path / "run"), "--no-progress"]
    assert main([*args, "--answer-format", "open"]) == 0
    before = (tmp_path / "run" / "records.jsonl").read_bytes()
    capsys.readouterr()
    assert main(args) == 2  # multiple choice into the open folder
    err = capsys.readouterr().err
    assert "answer_format" in err and len(err.strip().splitlines()) == 1
    assert "never share a folder" in err
    # no --accept-change mixes graded and free-text records
    assert main([*args, "--accept-change", "answer_format,prompt"]) == 2
    assert "unknown field(s) answer_format" in capsys.readouterr().err
    assert main([*args, "--answer-format", "open"]) == 0  # the same run resumes: nothing to do
    assert (tmp_path / "run" / "records.jsonl").read_bytes() == before


def test_an_older_manifest_without_the_field_was_multiple_choice() -> None:
    old = Fingerprint.model_validate({"seed": 0, "prompt": "paper@2"})
    assert "answer_format" not in old.compare(Fingerprint.model_validate(
        {"seed": 0, "prompt": "paper@2", "answer_format": "mcq"})).changed
    changed = old.compare(Fingerprint.model_validate({"seed": 0, "prompt": "paper@2", "answer_format": "open"})).changed
    assert changed["answer_format"] == ("mcq", "open")


@pytest.mark.medmis_no_network(loopback=False)
async def test_record_then_replay_is_byte_identical_offline(tmp_path: Path, medmis_no_network: list[str]) -> None:
    cache = str(tmp_path / "cache")
    first = await Harness(_config(tmp_path, "recorded", cache="record", cache_dir=cache), argv=["test"]).run()
    second = await Harness(_config(tmp_path, "replayed", cache="replay", cache_dir=cache), argv=["test"]).run()
    assert first.stats.errors == 0 and second.stats.errors == 0 and first.new_records == second.new_records > 0
    assert normalised_output(tmp_path / "recorded") == normalised_output(tmp_path / "replayed")
    steps = [s for p in (tmp_path / "replayed" / "traces").glob("*.jsonl")
             for t in map(json.loads, p.read_text().splitlines()) for s in t["steps"] if s["kind"] == "model"]
    assert steps and all(s["cache_hit"] is True for s in steps)
    assert medmis_no_network == []


# --- the simulated examinee's free text ---------------------------------------------------------


def _named(raw: str, item: Item) -> str | None:
    """The option key whose text the answer's first line names (None: it names none)."""
    m = re.match(r"Answer: (.*)\.\n", raw)
    return next((k for k, v in item.options.items() if m and v == m.group(1)), None)


async def _answers(model: SimulatedExaminee, cases: list[Case]) -> list[str]:
    none = create_defender("none")
    out = []
    for case in cases:
        answer = await none(case, DefenderContext(model=model, model_spec="mock/examinee"))
        out.append(answer.raw)
    return out


async def test_the_examinee_never_reads_the_cases_gold() -> None:
    # its knowledge is its own answer key; the case's gold (and target) never reach its prompt
    items = synthetic_items(40)
    model = SimulatedExaminee(items=items)
    cases = build_cases(items, ["clean", "type1", "type2"], answer_format="open")
    regolded = [c.model_copy(update={"item": c.item.model_copy(update={"gold": next(
        k for k in c.item.options if k != c.item.gold)})}) for c in cases]
    assert await _answers(model, cases) == await _answers(model, regolded)


async def test_swayed_answers_restate_the_injected_claim_and_follow_its_option() -> None:
    items = synthetic_items(120)
    model = SimulatedExaminee(items=items)
    cases = build_cases(items, ["type1"], answer_format="open")
    raws = await _answers(model, cases)
    swayed = [(c, r) for c, r in zip(cases, raws, strict=True) if _named(r, c.item) == c.target]
    assert len(swayed) > 20
    for case, raw in swayed:  # followed, or (misremembering that option) found it agreeing
        assert f'"{case.context[0].text}"' in raw
        assert "I accept that statement" in raw or "agrees with what I know" in raw
    assert sum("I accept that statement" in r for _, r in swayed) > 20
    held = [(c, r) for c, r in zip(cases, raws, strict=True) if _named(r, c.item) == c.item.gold]
    assert held and not any("I accept that statement" in r for _, r in held)


async def test_open_answers_are_swayed_at_the_multiple_choice_rates() -> None:
    # one calibration for both formats: same knowledge, same pull of the context
    items = synthetic_items(300)
    model = SimulatedExaminee(items=items)
    none = create_defender("none")

    async def rates(fmt: str) -> tuple[float, float]:
        cases = build_cases(items, ["clean", "type1"], answer_format=fmt)  # type: ignore[arg-type]
        picked = {}
        for c in cases:
            a = await none(c, DefenderContext(model=model, model_spec="mock/examinee"))
            picked[c.key] = a.choice if fmt == "mcq" else _named(a.raw, c.item)
        clean_ok = {c.item.key for c in cases if c.protocol == "clean" and picked[c.key] == c.item.gold}
        t1 = [c for c in cases if c.protocol == "type1" and c.item.key in clean_ok]
        return len(clean_ok) / len(items), sum(picked[c.key] == c.target for c in t1) / len(t1)

    (mcq_clean, mcq_tasr), (open_clean, open_tasr) = await asyncio.gather(rates("mcq"), rates("open"))
    assert abs(mcq_clean - open_clean) < 0.06 and abs(mcq_tasr - open_tasr) < 0.08
    assert open_tasr > 0.25  # it is swayed at all


async def test_an_unknown_question_gets_no_invented_answer() -> None:
    item = toy_item()
    model = SimulatedExaminee(items=synthetic_items(3))  # knows other questions only
    [raw] = await _answers(model, [_case(item, "clean")])
    assert not raw.startswith("Answer:") and "do not recognise" in raw


@pytest.mark.parametrize("prompt", ["paper", "toolkit"])
def test_the_examinee_reads_an_open_prompt_of_either_preset(prompt: str) -> None:
    from medmis.agents._reading import read

    item = toy_item()
    view = read(render_prompt(_case(item, "type1", "A", prompt=prompt).view()))
    assert view.question == item.question and view.options == {}
    assert [s.text for s in view.context] == [item.contexts["A"]]
