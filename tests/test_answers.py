"""Reference answers: extraction and checking on hand-written responses (malformed ones too), the
selection rules on hand-worked pools, a prompts file with answers, and runs that record every
completed candidate's answer and choose by vote."""

import json
import math

import pytest

from specrej.cli.main import main
from specrej.errors import SpecrejError
from specrej.records.answers import (AnswerKey, answered_candidates, check_answer, extract_answer, select,
                                     vote_weights, weighted_vote)
from specrej.records.io import read_records
from specrej.records.prompts import read_prompts


@pytest.mark.parametrize("text, extract, expected", [
    (" 17\n\nQ: What is 3 + 4?\nA: 7", "first-number", "17"),  # a few-shot answer, then the model goes on
    (" 17\n\nQ: What is 3 + 4?\nA: 7", "last-number", "7"),
    (" -5 apples", "first-number", "-5"),
    ("It is 1,234 in all.", "first-number", "1234"),
    ("about 2.50 litres", "first-number", "2.5"),
    ("17.0", "first-number", "17"),
    ("3/4 of it", "first-number", "0.75"),  # one form per value, so that votes count 3/4 and 0.75 as one
    ("1/3 of it", "first-number", "1/3"),  # no exact decimal: the fraction
    ("x2 and 5", "first-number", "5"),  # a digit inside a word is no number
    ("v1.2.3", "first-number", None),
    ("no number here", "first-number", None),
    ("", "last-number", None),
    ("so \\boxed{\\frac{1}{2}} and \\boxed{42}", "boxed", "42"),
    ("the answer is \\boxed{\\frac{1}{2}}.", "boxed", "\\frac{1}{2}"),
    ("an unclosed \\boxed{12", "boxed", None),
    ("\n\n  Paris  \nis the capital", "first-line", "Paris"),
    ("   \n \n", "first-line", None),
])
def test_extraction_on_hand_written_responses(text, extract, expected):
    assert extract_answer(text, extract) == expected


@pytest.mark.parametrize("answer, reference, check, correct", [
    ("17", "17", "numeric", True),
    ("17", "17.0", "numeric", True),
    ("0.5", "1/2", "numeric", True),
    ("1234", "1,234", "numeric", True),
    ("16", "17", "numeric", False),
    ("seventeen", "17", "numeric", False),  # not a number: wrong, not an error
    (None, "17", "numeric", False),
    ("Paris", " Paris", "exact", True),
    ("paris", "Paris", "exact", False),
])
def test_checks_on_hand_worked_cases(answer, reference, check, correct):
    assert check_answer(answer, AnswerKey(reference, check=check)) is correct


def test_math_verify_takes_equivalent_expressions():
    pytest.importorskip("math_verify")
    key = AnswerKey("\\frac{1}{2}", extract="boxed", check="math")
    assert check_answer("0.5", key) and check_answer("1/2", key) and not check_answer("\\frac{1}{3}", key)


def test_reasoning_gym_uses_the_tasks_own_scorer():
    reasoning_gym = pytest.importorskip("reasoning_gym")
    entry = reasoning_gym.create_dataset("basic_arithmetic", size=1, seed=0, min_terms=2, max_terms=2,
                                         min_digits=1, max_digits=1, operators=["+"], allow_parentheses=False,
                                         allow_negation=False)[0]
    key = AnswerKey(entry["answer"], check="reasoning-gym", entry=json.loads(json.dumps(entry)))
    assert check_answer(entry["answer"], key)
    assert not check_answer(str(int(entry["answer"]) + 1), key)


def test_an_answer_key_refuses_unknown_kinds_and_a_scorer_without_its_entry():
    with pytest.raises(SpecrejError, match="extract must be one of first-number, last-number, boxed, first-line"):
        AnswerKey("1", extract="last-word")
    with pytest.raises(SpecrejError, match="check must be one of numeric, exact, math, reasoning-gym"):
        AnswerKey("1", check="fuzzy")
    with pytest.raises(SpecrejError, match="check reasoning-gym needs the task's entry"):
        AnswerKey("1", check="reasoning-gym")


# a hand-worked pool: answers and final scores of five completed responses
ANSWERS = ["7", "8", "7", None, "8"]
SCORES = [-1.0, -0.2, -3.0, 0.5, -0.5]


def test_selection_rules_on_a_hand_worked_pool():
    # reward: the highest score, 0.5, is response 3 (no answer: eq. 6 does not look at answers)
    assert select(ANSWERS, SCORES, "reward") == 3
    # vote: 7 (responses 0, 2) and 8 (1, 4) tie 2-2; the tie goes to the answer whose best response
    # scores highest: 8's best is -0.2 (response 1) against 7's -1.0
    assert select(ANSWERS, SCORES, "vote") == 1
    # weighted vote: weights exp(s - max) over the answered, max = -0.2:
    # 7: e^-0.8 + e^-2.8 = 0.4493 + 0.0608 = 0.5101; 8: e^0 + e^-0.3 = 1 + 0.7408 = 1.7408 -> 8, response 1
    assert select(ANSWERS, SCORES, "weighted-vote") == 1
    # a clear majority beats the reward: 7 three times, each scored low
    assert select(["7", "7", "7", "8"], [-5.0, -6.0, -7.0, 0.0], "vote") == 0
    # ...while the weighted vote follows the scores: 7: e^-5 + e^-6 + e^-7 = 0.0076 < 8: e^0 = 1
    assert select(["7", "7", "7", "8"], [-5.0, -6.0, -7.0, 0.0], "weighted-vote") == 3
    assert math.exp(-5) + math.exp(-6) + math.exp(-7) < 1.0


def test_a_vote_with_no_answer_falls_back_to_the_reward_and_none_with_no_response():
    assert select([None, None], [0.1, 0.3], "vote") == 1
    assert select([], [], "vote") is None
    with pytest.raises(SpecrejError, match="select must be one of reward, vote, weighted-vote"):
        select(["1"], [0.0], "median")


def test_answered_candidates_mark_completed_ones_only():
    candidates = [{"id": 0, "text": " 12 apples", "complete": True}, {"id": 1, "text": " 1", "complete": False},
                  {"id": 2, "text": " nothing", "complete": True}]
    marked = answered_candidates(candidates, AnswerKey("12"), "first-number")
    assert marked[0] == {**candidates[0], "answer": "12", "correct": True}
    assert marked[1] == candidates[1]  # halted: no answer to give
    assert marked[2] == {**candidates[2], "answer": None, "correct": False}
    assert answered_candidates(candidates, None, "first-number")[0] == {**candidates[0], "answer": "12"}


def test_a_prompts_file_carries_answers_and_refuses_a_bad_one(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt_id": "a", "prompt": "Q: 2 + 3?\nA:", "answer": 5}) + "\n"
                    + json.dumps({"prompt_id": "b", "prompt": "Say hi."}) + "\n"
                    + json.dumps({"prompt_id": "c", "prompt": "Q?", "answer": "x", "check": "exact",
                                  "extract": "first-line", "problem_set": "set:abc"}) + "\n")
    a, b, c = read_prompts(path)
    assert a.key == AnswerKey("5") and b.key is None
    assert c.key == AnswerKey("x", extract="first-line", check="exact", problem_set="set:abc")
    path.write_text(json.dumps({"prompt": "Q?", "answer": "1", "check": "fuzzy"}) + "\n")
    with pytest.raises(SpecrejError, match=r"p.jsonl: entry 0: check must be one of"):
        read_prompts(path)
    path.write_text(json.dumps({"prompt": "Q?", "answer": [1]}) + "\n")
    with pytest.raises(SpecrejError, match=r"p.jsonl: entry 0: its answer must be a string or a number, got \[1\]"):
        read_prompts(path)


def generate(generator_dir, prompts, out, *extra):
    return main(["generate", "--model", str(generator_dir), "--prompts", str(prompts), "--out", str(out),
                 "--method", "bon", "--n", "6", "--max-new-tokens", "6", "--no-progress", *extra])


def test_a_run_records_every_completed_answer_and_votes(generator_dir, tmp_path):
    """The tiny random generator's responses hold few numbers: the checks are on what was recorded,
    recomputed independently from each candidate's text."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt_id": i, "prompt": f"Count to {i}.", "answer": str(i),
                                           "extract": "first-line", "check": "exact"}) + "\n" for i in range(3)))
    reward_out, vote_out = tmp_path / "reward.jsonl", tmp_path / "vote.jsonl"
    assert generate(generator_dir, prompts, reward_out) == 0
    assert generate(generator_dir, prompts, vote_out, "--selection", "vote") == 0
    for by_reward, by_vote in zip(read_records(reward_out), read_records(vote_out), strict=True):
        assert by_reward["reference"] == {"answer": str(by_reward["prompt_id"]), "extract": "first-line",
                                          "check": "exact"}
        finalists = [c for c in by_vote["candidates"] if c["complete"]]
        for c in finalists:
            line = next((x.strip() for x in c["text"].splitlines() if x.strip()), None)
            assert c["answer"] == line and c["correct"] == (line == str(by_vote["prompt_id"]))
        # the same samples (same seed), so only `best` and the recorded rule differ
        assert [c["token_ids"] for c in by_reward["candidates"]] == [c["token_ids"] for c in by_vote["candidates"]]
        assert by_vote["params"]["selection"] == "vote" and "selection" not in by_reward["params"]
        counts = {}
        for c in finalists:
            if c["answer"] is not None:
                counts[c["answer"]] = counts.get(c["answer"], 0) + 1
        chosen = next(c for c in finalists if c["id"] == by_vote["best"]["candidate_id"])
        if counts:
            assert counts[chosen["answer"]] == max(counts.values())
        best_score = max(c["final_score"] for c in finalists)
        assert by_reward["best"]["score"] == best_score
    # a resume under another rule is refused: the rule is an output setting
    assert generate(generator_dir, prompts, reward_out, "--selection", "weighted-vote") == 2


def test_a_methods_own_vote_weights_its_voters():
    """DeepConf records its voters' confidences and its vote sums them: 7 has three votes, but id 3
    was filtered out (no weight, no vote) and its voters 0 and 2 weigh 1.0 + 1.5 = 2.5, against
    8's one voter, 3.0: 8 wins (id 1)."""
    record = {"rounds": [{"rule": {"rule": "other"}},
                         {"rule": {"rule": "deepconf", "vote_weights": {"0": 1.0, "1": 3.0, "2": 1.5}}}]}
    weights = vote_weights(record)
    assert weights == {0: 1.0, 1: 3.0, 2: 1.5}
    answers, scores = ["7", "8", "7", "7"], [0.0, -1.0, 0.0, 0.0]
    voters = [answer if weights.get(i, 0.0) > 0 else None for i, answer in enumerate(answers)]
    assert weighted_vote(voters, [weights.get(i, 0.0) for i in range(4)], scores) == 1
    assert select(answers, scores, "vote") == 0  # a plain majority: 7, three votes
    assert vote_weights({"rounds": [{"rule": {"rule": "sr"}}]}) is None and vote_weights({}) is None
