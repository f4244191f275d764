"""Reward specs and the sequence-classification reward model."""

import pytest
import torch

from specrej import LogProbReward, Response, SpecrejError, load_reward
from specrej.rewards.reward import SequenceClassificationReward


def test_reward_model_renders_with_its_own_chat_template(reward_model_dir):
    reward = load_reward(str(reward_model_dir))
    assert isinstance(reward, SequenceClassificationReward)
    rendered = reward.render("What is 2+2?", "Four.")
    assert rendered == "[USER] What is 2+2?\n[ASSISTANT] Four.\n[SCORE]"  # the RM's template, not the generator's


def test_reward_model_batched_scores_equal_one_by_one_scores(reward_model_dir):
    reward = SequenceClassificationReward(str(reward_model_dir), batch_size=4)
    responses = [Response("Four."), Response("The answer is four, of course."), Response(""), Response("4")]
    batched = reward.score("What is 2+2?", responses)
    for response, score in zip(responses, batched):
        ids = reward.tokenizer(reward.render("What is 2+2?", response.text), return_tensors="pt",
                               add_special_tokens=False)
        with torch.no_grad():
            expected = reward.model(**ids).logits[0, 0].item()
        assert score == pytest.approx(expected, abs=1e-4)
    assert len(set(batched)) > 1


def test_logprob_reward_is_the_mean_token_logprob():
    scores = LogProbReward().score("p", [Response("ab", (1, 2), (-1.0, -3.0)), Response("", (), ())])
    assert scores == [-2.0, float("-inf")]


def test_python_callable_spec():
    reward = load_reward("python:toy_rewards:length")
    assert reward.score("p", [Response("abc"), Response("a")]) == [3.0, 1.0]


@pytest.mark.parametrize("spec, message", [
    ("python:toy_rewards:missing", "cannot import"),
    ("python:no_such_module:f", "cannot import"),
    ("./no/such/reward-model", "unknown reward"),
])
def test_unknown_reward_specs_are_refused(spec, message):
    with pytest.raises(SpecrejError, match=message):
        load_reward(spec)


def test_custom_code_reward_model_needs_trust_remote_code(custom_code_reward_dir):
    with pytest.raises(SpecrejError, match="trust-remote-code"):
        load_reward(str(custom_code_reward_dir))
    reward = load_reward(str(custom_code_reward_dir), trust_remote_code=True)
    scores = reward.score("What is 2+2?", [Response("Four."), Response("Five, or maybe six.")])
    assert len(scores) == 2 and scores[0] != scores[1]
    assert type(reward.model).__name__ == "CustomRM"  # its own code ran, output read from `.score`
