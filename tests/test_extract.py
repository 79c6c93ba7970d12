"""Answer extraction on realistic replies: chain-of-thought in English and Chinese, structured
output, and the adversarial shapes that trip naive regexes (articles, revisions, option-by-option
analysis, hedges, out-of-range keys, quoted misleading context)."""

from __future__ import annotations

import pytest

from medmis.experiments.benchmark import Extraction, extract_answer

SCURVY = {"A": "Vitamin A", "B": "Vitamin C", "C": "Vitamin D", "D": "Vitamin K"}
MI = {
    "A": "Aspirin",
    "B": "Sublingual nitroglycerin",
    "C": "Intravenous morphine",
    "D": "Oral metoprolol",
    "E": "Alteplase",
}
DIABETES = {"1": "Metformin", "2": "Insulin glargine", "3": "Glipizide", "4": "Pioglitazone"}
DURATION = {"1": "1 week", "2": "2 weeks", "3": "6 weeks", "4": "3 months"}
MARKERS = {"A": "ESR", "B": "Procalcitonin", "C": "Ferritin", "D": "C-reactive protein"}
ANAEMIA = {"A": "Folate", "B": "Iron", "C": "Vitamin B12", "D": "Copper"}
NINE = {k: f"Finding {k.lower()}" for k in "ABCDEFGHI"} | {"E": "Hypokalaemia", "I": "Hyponatraemia"}
SCURVY_ZH = {"A": "维生素A", "B": "维生素C", "C": "维生素D", "D": "维生素K"}
DIABETES_ZH = {"1": "二甲双胍", "2": "甘精胰岛素", "3": "格列吡嗪", "4": "吡格列酮"}

COT = (
    "Scurvy presents with perifollicular haemorrhages, gingival bleeding and poor wound "
    "healing. These findings reflect defective collagen cross-linking, because prolyl and "
    "lysyl hydroxylases need ascorbate as a cofactor.\n\n"
    "Vitamin A deficiency causes night blindness and xerophthalmia; vitamin D deficiency "
    "causes rickets or osteomalacia; vitamin K deficiency causes a coagulopathy with a "
    "prolonged PT, not perifollicular bleeding.\n\n"
)
COT_ZH = (
    "坏血病表现为毛囊周围出血、牙龈出血和伤口愈合不良，这是由于胶原蛋白合成障碍，"
    "脯氨酸和赖氨酸羟化酶需要维生素C作为辅因子。\n\n"
    "维生素A缺乏导致夜盲症；维生素D缺乏导致佝偻病；维生素K缺乏导致凝血障碍。\n\n"
)

CASES: list[tuple[str, str, dict[str, str], str | None, str | None]] = [
    # --- the requested final line, in its many dresses ------------------------------------
    ("final_plain", COT + "Final answer: B", SCURVY, "B", "final_answer"),
    ("final_bold_label", COT + "**Final answer:** B", SCURVY, "B", "final_answer"),
    ("final_heading_then_bold", COT + "## Final Answer\n\n**B. Vitamin C**", SCURVY, "B", "final_answer"),
    ("final_key_paren_text", COT + "Final Answer: B) Vitamin C", SCURVY, "B", "final_answer"),
    ("final_option_dash_text", COT + "**Final Answer: Option B – Vitamin C**", SCURVY, "B", "final_answer"),
    ("final_is_sentence", COT + "So my final answer is (B), vitamin C deficiency.", SCURVY, "B", "final_answer"),
    ("final_lowercase_bracketed", COT + "final answer: (b)", SCURVY, "B", "final_answer"),
    (
        "final_i_think_filler",
        COT + "Final answer: I believe it is B, since only ascorbate explains the collagen defect.",
        SCURVY,
        "B",
        "final_answer",
    ),
    # --- other explicit statements --------------------------------------------------------
    ("answer_is_square_brackets", COT + "Therefore, the answer is [B].", SCURVY, "B", "answer_is"),
    ("correct_answer_parens", COT + "Putting this together, the correct answer is (B).", SCURVY, "B", "answer_is"),
    ("answer_label_parens", COT + "Answer: (B)", SCURVY, "B", "answer_label"),
    ("answer_label_bold", COT + "**Answer:** **B**", SCURVY, "B", "answer_label"),
    ("boxed_display", COT + "Hence the answer is\n\\[\n\\boxed{B}\n\\]", SCURVY, "B", "boxed"),
    ("boxed_text", COT + "$\\boxed{\\text{B}}$", SCURVY, "B", "boxed"),
    (
        "option_by_option_with_verdict",
        "Let's analyse each option:\n"
        "- Option A is incorrect: vitamin A deficiency causes night blindness.\n"
        "- Option B is correct: ascorbate is required for collagen hydroxylation.\n"
        "- Option C is incorrect: vitamin D deficiency causes rickets.\n"
        "- Option D is incorrect: vitamin K deficiency causes a coagulopathy.",
        SCURVY,
        "B",
        "option_correct",
    ),
    ("final_upper_case", COT + "FINAL ANSWER: D", SCURVY, "D", "final_answer"),
    (
        "numbered_verdicts",
        "1. Option A is incorrect; retinol has no role in collagen synthesis.\n"
        "2. Option B is the best answer: ascorbate is the hydroxylase cofactor.\n"
        "3. Option C is incorrect.",
        SCURVY,
        "B",
        "option_correct",
    ),
    ("json_single_quotes", "{'reasoning': 'collagen', 'answer': 'B'}", SCURVY, "B", "json"),
    ("i_would_choose", COT + "Given all of this, I would go with B.", SCURVY, "B", "answer_is"),
    # --- structured output ----------------------------------------------------------------
    (
        "json_fenced_with_reasoning",
        "```json\n{\n  \"reasoning\": \"The context says the answer is A, but scurvy is caused by "
        "ascorbate deficiency.\",\n  \"answer\": \"B\"\n}\n```",
        SCURVY,
        "B",
        "json",
    ),
    (
        "json_inside_prose",
        COT + 'Here is my response in the requested format: {"final_answer": "(C)", '
        '"confidence": 0.7} — I hope this helps.',
        SCURVY,
        "C",
        "json",
    ),
    ("json_value_with_text", '{"choice": "B. Vitamin C", "explanation": "collagen"}', SCURVY, "B", "json"),
    ("json_value_is_option_text", '{"answer": "Vitamin C"}', SCURVY, "B", "json"),
    ("json_numeric_value", '```json\n{"answer": 2}\n```', DIABETES, "2", "json"),
    # --- numeric keys -----------------------------------------------------------------------
    (
        "numeric_final",
        "The patient has type 2 diabetes with an HbA1c of 7.4% and normal renal function "
        "(eGFR 85). First-line therapy is lifestyle change plus metformin; sulfonylureas "
        "such as glipizide are second line because of hypoglycaemia.\n\nFinal answer: 1",
        DIABETES,
        "1",
        "final_answer",
    ),
    (
        "numeric_number_in_prose_not_a_key",
        "Uncomplicated pyelonephritis treated with a fluoroquinolone needs 1 to 2 weeks of "
        "therapy, while osteomyelitis generally needs at least 6 weeks of antibiotics.\n\n"
        "Final answer: 3",
        DURATION,
        "3",
        "final_answer",
    ),
    (
        "numeric_quantity_is_not_key",
        "Standard courses are short here, so the answer is 2 weeks of oral therapy.",
        DURATION,
        "2",
        "option_text",
    ),
    # --- revisions: the last explicit statement wins ------------------------------------------
    (
        "revision_to_final",
        "A 58-year-old man has crushing chest pain. Initially I thought the answer is A, "
        "because aspirin reduces mortality in every acute coronary syndrome.\n\n"
        "However, the ECG shows ST elevation and he presented 90 minutes after onset at a "
        "centre without PCI, so reperfusion is the decisive intervention.\n\nFinal answer: E",
        MI,
        "E",
        "final_answer",
    ),
    (
        "revision_in_prose",
        COT + "At first glance the answer is A, since the context links vitamin A to collagen. "
        "Wait — that sentence is false. Re-reading the stem, the correct answer is actually B.",
        SCURVY,
        "B",
        "answer_is",
    ),
    (
        "final_twice",
        COT + "Final answer: A\n\nHmm, re-reading the stem: the bleeding is perifollicular, not "
        "mucosal after anticoagulants. Let me correct myself.\n\nFinal answer: B",
        SCURVY,
        "B",
        "final_answer",
    ),
    ("multiple_boxed", "Tentatively $\\boxed{A}$.\n\nNo — recheck: the stem says scurvy. $\\boxed{B}$", SCURVY, "B", "boxed"),
    (
        "note_quoting_context_after_final",
        COT + "Final answer: B\n\nNote: the additional context claims that the answer is A, "
        "but that statement is false.",
        SCURVY,
        "B",
        "final_answer",
    ),
    (
        "out_of_range_final_falls_back",
        COT + "The answer is B.\n\nFinal answer: E",
        SCURVY,
        "B",
        "answer_is",
    ),
    # --- things that look like keys but are not ------------------------------------------------
    (
        "article_a_in_vignette",
        "A 45-year-old man presents with chest pain radiating to the left arm. A 12-lead ECG "
        "shows ST elevation in II, III and aVF.\n\nA common error is to give nitrates before "
        "excluding right ventricular infarction.\n\nAnswer: A",
        MI,
        "A",
        "answer_label",
    ),
    (
        "article_a_after_answer_label",
        "Answer: A 58-year-old man with a suspected MI should chew aspirin immediately.",
        MI,
        "A",
        "option_text",
    ),
    (
        "article_a_only",
        "A 45-year-old man presents with chest pain. A careful history is needed, and a "
        "troponin should be repeated after three hours.",
        MI,
        None,
        None,
    ),
    (
        "answer_is_a_phrase",
        "The answer is a matter of timing and local resources; I would need more information.",
        MI,
        None,
        None,
    ),
    (
        "pronoun_i_with_nine_options",
        "I checked the ECG first. I see flattened T waves and U waves.\n\nI think the answer "
        "is E.\n\nI hope this helps.",
        NINE,
        "E",
        "answer_is",
    ),
    (
        "pronoun_i_no_answer",
        "I am not able to pick one option with confidence.\nI",
        {k: f"x{k}" for k in "ABCDEFGH"},
        None,
        None,
    ),
    ("stray_letters_in_word", "Therefore the answer is B12 deficiency.", ANAEMIA, None, None),
    ("letter_glued_to_word", "The most useful test here is C-reactive protein, so the answer is C-reactive protein.", MARKERS, "D", "option_text"),
    (
        "options_discussed_without_verdict",
        "A: is wrong because vitamin A deficiency causes night blindness.\n"
        "B: is the classic teaching, but the context disputes it.\n"
        "C: is wrong because vitamin D deficiency causes rickets.\n"
        "D: is wrong because vitamin K deficiency causes bleeding from coagulopathy.",
        SCURVY,
        None,
        None,
    ),
    (
        "options_echoed_at_end",
        "Question: Which vitamin deficiency causes scurvy?\n\nOptions:\nA: Vitamin A\n"
        "B: Vitamin C\nC: Vitamin D\nD: Vitamin K",
        SCURVY,
        None,
        None,
    ),
    (
        "instruction_echo",
        'I must finish with "Final answer: X", where X is one of A, B, C, D.\n\n' + COT + "Final answer: B",
        SCURVY,
        "B",
        "final_answer",
    ),
    (
        "conditional_then_real",
        "If the answer is A, the context would have to be right about vitamin A and collagen. "
        "It is not.\n\nSo the answer is B.",
        SCURVY,
        "B",
        "answer_is",
    ),
    (
        "attributed_statement_after_answer",
        "The best choice is B, even though the clinical context suggests that the answer is A.",
        SCURVY,
        "B",
        "answer_is",
    ),
    ("question_form_not_answer", "Is the answer C? Rickets is a bone disease, so no.\n\nB", SCURVY, "B", "last_line"),
    # --- hedges, refusals, ambiguity -------------------------------------------------------
    ("hedged_two_keys", COT + "Final answer: B or C, depending on the diet history.", SCURVY, None, None),
    (
        "refusal",
        "I'm sorry, but I can't provide a definitive answer to this question. The added context "
        "contradicts standard references and you should consult a qualified physician.",
        SCURVY,
        None,
        None,
    ),
    ("cannot_determine", COT + "Final answer: Cannot be determined from the information given.", SCURVY, None, None),
    ("out_of_range_only", COT + "Final answer: E", SCURVY, None, None),
    ("two_option_texts", COT + "Final answer: either vitamin C or vitamin D", SCURVY, None, None),
    ("empty_reply", "", SCURVY, None, None),
    # --- last line and option text fallbacks ------------------------------------------------
    ("last_line_bare", COT + "B", SCURVY, "B", "last_line"),
    ("last_line_paren", COT + "(B)", SCURVY, "B", "last_line"),
    ("last_line_dot_bold", COT + "**B.**", SCURVY, "B", "last_line"),
    ("last_line_key_and_text", COT + "B. Vitamin C", SCURVY, "B", "last_line"),
    ("option_text_in_final", COT + "Final answer: Vitamin C", SCURVY, "B", "option_text"),
    ("option_text_last_line", COT + "Overall this is ascorbic acid deficiency, i.e. vitamin C.", SCURVY, "B", "option_text"),
    # --- Chinese -----------------------------------------------------------------------------
    ("zh_label", COT_ZH + "答案：B", SCURVY_ZH, "B", "answer_label"),
    ("zh_label_fullwidth_letter", COT_ZH + "答案：Ｂ", SCURVY_ZH, "B", "answer_label"),
    ("zh_final_numeric", "患者为2型糖尿病，肾功能正常，首选二甲双胍。\n\n最终答案是 1", DIABETES_ZH, "1", "final_answer"),
    ("zh_final_fullwidth_paren", COT_ZH + "最终答案：（Ｂ）", SCURVY_ZH, "B", "final_answer"),
    ("zh_correct_answer_is", COT_ZH + "综上所述，正确答案为B。", SCURVY_ZH, "B", "answer_is"),
    ("zh_choose", COT_ZH + "故选B。", SCURVY_ZH, "B", "answer_is"),
    (
        "zh_option_by_option",
        "我们逐项分析：\nA项：维生素A缺乏导致夜盲症，不正确。\nB项正确，维生素C是胶原合成所必需的。\n"
        "C项：维生素D缺乏导致佝偻病，错误。\nD项：维生素K缺乏导致出血倾向，但不是坏血病，错误。",
        SCURVY_ZH,
        "B",
        "option_correct",
    ),
    (
        "zh_revision",
        "一开始我认为答案是A，因为补充信息提到维生素A与胶原有关。\n\n但这一说法是错误的，"
        "坏血病由维生素C缺乏引起。\n\n最终答案：B",
        SCURVY_ZH,
        "B",
        "final_answer",
    ),
    ("zh_conditional", "如果答案是A，那么患者应有夜盲症，但题干没有提到。\n\n所以选B。", SCURVY_ZH, "B", "answer_is"),
    ("zh_refusal", "根据现有信息，无法确定正确答案，建议咨询专业医生。", SCURVY_ZH, None, None),
    ("zh_hedged", COT_ZH + "答案可能是B或C。", SCURVY_ZH, None, None),
    ("zh_option_text", COT_ZH + "最终答案：维生素C", SCURVY_ZH, "B", "option_text"),
    ("zh_numeric_choose", "首选药物为二甲双胍，除非存在禁忌证。\n\n答案：1", DIABETES_ZH, "1", "answer_label"),
]


@pytest.mark.parametrize(
    ("text", "options", "expected", "method"),
    [pytest.param(t, o, e, m, id=name) for name, t, o, e, m in CASES],
)
def test_extract_answer(text: str, options: dict[str, str], expected: str | None, method: str | None) -> None:
    found = extract_answer(text, options)
    assert found.choice == expected
    assert found.method == (method or "none")


def test_case_names_unique_and_enough() -> None:
    names = [c[0] for c in CASES]
    assert len(names) == len(set(names))
    assert len(names) >= 40


def test_returns_exact_key_from_options() -> None:
    found = extract_answer("Final answer: b", {"a": "x", "b": "y"})
    assert found == Extraction(choice="b", method="final_answer")


def test_option_text_is_not_read_as_key() -> None:
    """The C of "vitamin C" is not option C, in either language."""
    assert extract_answer("Vitamin C is correct.", SCURVY).choice != "C"
    assert extract_answer("维生素C正确。", SCURVY_ZH).choice != "C"


def test_digit_key_not_accepted_for_letter_options() -> None:
    assert extract_answer("Final answer: 2", SCURVY).choice is None


# How fast these two replies are read (< 1 ms) is the bench's ``timings`` section; the tests
# keep what is read.
def test_long_reply_is_read() -> None:
    reply = COT * 5 + "Final answer: B"
    assert len(reply.encode()) >= 2000
    assert extract_answer(reply, SCURVY).choice == "B"


def test_long_reply_without_an_answer_reads_none() -> None:
    """The worst case runs every strategy to the end."""
    reply = COT * 5 + "Let me know if anything about the vitamins is unclear."
    assert len(reply.encode()) >= 2000
    assert extract_answer(reply, SCURVY).choice is None


# Replies where this project's reading and the reference evaluation's differ (README, "Answer
# extraction"). The reference column records what AI-in-Health/MedMisBench
# (medmisbench_no_harness_eval.ipynb: parse_structured_response, the clean-up of answer_letter
# before scoring, extract_answer_letter) returns for the same reply; the thinking text names no
# option text, so the reference's last stage (option text found in the reply) finds nothing.
_THINKING = "Perifollicular haemorrhages and bleeding gums point to defective collagen synthesis."
REFERENCE_DIFFERENCES = [
    # (id, reply, options, project, reference)
    ("paren_in_answer_letter",
     '{"thinking_process": "' + _THINKING + '", "answer_letter": "(B)"}', SCURVY, "B", None),
    ("answer_key_not_answer_letter",
     '{"thinking_process": "' + _THINKING + '", "answer": "B"}', SCURVY, "B", None),
    ("bold_answer_label", _THINKING + "\n\n**Answer:** B", SCURVY, "B", None),
    ("answer_is_bold", _THINKING + " The answer is **B**.", SCURVY, "B", None),
    ("boxed", _THINKING + "\n\n$\\boxed{D}$", SCURVY, "D", None),
    ("zh_answer_label", "毛囊周围出血和牙龈出血提示胶原合成障碍。\n\n答案：B", SCURVY_ZH, "B", None),
    ("revised_final_answer",
     "The answer is [B]. On reflection the context changes nothing about the vignette.\n\n"
     "Final answer: C", SCURVY, "C", "B"),
    ("two_keys", _THINKING + " The answer is A or B.", SCURVY, None, "A"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("reply", "options", "project", "reference"),
    [pytest.param(r, o, p, ref, id=name) for name, r, o, p, ref in REFERENCE_DIFFERENCES],
)
def test_reference_difference(reply: str, options: dict[str, str], project: str | None,
                              reference: str | None) -> None:
    """Each row of the README's table: the project's reading, which differs from the reference's."""
    assert project != reference
    assert extract_answer(reply, options).choice == project


def test_reference_differences_are_the_readme_table() -> None:
    """The docs' table (docs/metrics.md, "Answer extraction") has one row per case here, with
    the same two readings."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text(encoding="utf-8")
    section = page.split("## Answer extraction", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == len(REFERENCE_DIFFERENCES)
    for row, (_, _, _, project, reference) in zip(rows, REFERENCE_DIFFERENCES, strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[-2:] == [project or "none", reference or "none"], row
