"""What a registration declares about its defender: a source citation and a cost hint.

The ablation's cost estimate reads the hint from the registration (a plug-in's too), and
``medmis defenders`` prints the source.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from medmis.defenses import (
    DEFAULT_COST,
    CostHint,
    ProtocolCost,
    get_spec,
    list_defenders,
    load_plugins,
)
from medmis.experiments.ablation import AblationConfig, DefenderEntry, estimate
from medmis.experiments.benchmark import build_cases, load_dataset
from medmis.experiments.cli import main

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "medmisbench_sample.jsonl"

PLUGIN = '''
from medmis.defenses import defender, render_prompt, answer_from_reply

@defender("spec_probe", source="Doe et al. 2099, arXiv 9999.00001",
          cost={"clean": (2, 0, 1), "type1": (7, 5, 3), "type2": (9, 6, 4)})
def spec_probe(opts):
    async def solve(case, ctx):
        return answer_from_reply(await ctx.generate(render_prompt(case)), case, ctx)
    return solve
'''


def test_every_builtin_declares_its_cost_and_the_cited_ones_their_source() -> None:
    specs = {s.name: s for s in list_defenders()}
    for name in ("none", "warning", "context_blind", "spotlight", "search_agent", "claim_verify",
                 "prior_reconcile", "isolate_vote", "escalate"):
        assert specs[name].cost is not DEFAULT_COST, name
    assert specs["prior_reconcile"].source == "Wang et al. 2024, arXiv 2410.07176 (Astute RAG)"
    assert "§D.3" in (specs["warning"].source or "")
    assert "2606.12291" in (specs["search_agent"].source or "")
    assert specs["claim_verify"].cost.per_case("type2") == ProtocolCost(8, 8, 12)


def test_a_cost_hint_needs_every_protocol() -> None:
    with pytest.raises(ValueError, match="type2"):
        CostHint.of({"clean": (1, 0, 1), "type1": (1, 0, 1)})


def test_the_estimate_reads_the_registered_hint_and_defenders_shows_the_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = tmp_path / "probe.py"
    plugin.write_text(PLUGIN)
    load_plugins([plugin])
    assert get_spec("spec_probe").cost.type1 == ProtocolCost(7, 5, 3)
    cases = build_cases(load_dataset(str(SAMPLE), limit=2).items, ["clean", "type1"])
    n_clean = sum(c.protocol == "clean" for c in cases)
    config = AblationConfig.model_validate({
        "data": str(SAMPLE), "protocols": ["clean", "type1"],
        "models": [{"spec": "mock/examinee"}],
        "defenders": [DefenderEntry(name="spec_probe")],
    })
    (cell,) = estimate(config, cases, tmp_path)
    assert cell.llm_calls == 2 * n_clean + 7 * (len(cases) - n_clean)
    assert cell.tool_calls == 5 * (len(cases) - n_clean)
    assert main(["defenders", "--plugin", str(plugin)]) == 0
    assert "source: Doe et al. 2099, arXiv 9999.00001" in capsys.readouterr().out
