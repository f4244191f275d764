"""specrej.rewards.judge: the local pairwise judge's batched forward passes equal one-at-a-time ones."""

from __future__ import annotations

import math

import pytest
import torch

from specrej.rewards import judge as judge_module
from specrej.rewards.judge import _batches, _encode, _next_token_logprobs, load_judge, local_judge_completions

PREFIX = "The better response is Response "
WORDS = "the quick brown fox jumps over the lazy dog speculative rejection halts low scoring responses".split()


def judge_prompt(n_words: int) -> str:
    """A chatml judge prompt (alpaca_eval's format) of about ``n_words`` words."""
    words = " ".join(WORDS[i % len(WORDS)] for i in range(n_words))
    return (f"<|im_start|>system\nBe fair.\n<|im_end|>\n<|im_start|>user\nWhich is better?\n\n## Response 1\n\n"
            f"{words}\n\n## Response 2\n\n{words[: len(words) // 2]}\n\nAnswer 1 or 2.\n<|im_end|>")


PROMPTS = [judge_prompt(n) for n in (3, 40, 11, 25, 0, 17, 60)]  # varied lengths, unsorted


def one_at_a_time(model, tokenizer, prompt: str) -> torch.Tensor:
    """The unbatched reference: one unpadded forward pass, every position's logits, the last one's log-probs."""
    ids = _encode(tokenizer, prompt, PREFIX)
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0, -1].float().log_softmax(-1)


def top(entry: dict) -> dict[str, float]:
    return {t["token"]: t["logprob"] for t in entry["logprobs"]["content"][0]["top_logprobs"]}


@pytest.fixture(scope="module")
def tiny_judge(generator_dir):
    model, tokenizer = load_judge(str(generator_dir))
    assert model.dtype == torch.float32
    return str(generator_dir), model, tokenizer


def test_batched_logprobs_equal_one_at_a_time(tiny_judge):
    _, model, tokenizer = tiny_judge
    rows = [_encode(tokenizer, prompt, PREFIX) for prompt in PROMPTS]
    assert len({len(ids) for ids in rows}) == len(rows)  # every row padded differently
    batched = _next_token_logprobs(model, rows)
    assert batched.shape == (len(rows), model.config.vocab_size) and batched.dtype == torch.float32
    for row, prompt in enumerate(PROMPTS):
        torch.testing.assert_close(batched[row], one_at_a_time(model, tokenizer, prompt), atol=1e-4, rtol=0)


def test_batched_logprobs_without_logits_to_keep(tiny_judge, monkeypatch):
    """Models whose forward takes no ``logits_to_keep``: every position's logits, read at each row's last token."""
    _, model, tokenizer = tiny_judge
    monkeypatch.setattr(judge_module, "_takes_logits_to_keep", lambda model: False)
    rows = [_encode(tokenizer, prompt, PREFIX) for prompt in PROMPTS]
    batched = _next_token_logprobs(model, rows)
    for row, prompt in enumerate(PROMPTS):
        torch.testing.assert_close(batched[row], one_at_a_time(model, tokenizer, prompt), atol=1e-4, rtol=0)


@pytest.mark.parametrize("batch_tokens, max_batch_size", [(1, 16), (10_000, 16), (10_000, 3), (150, 16)])
def test_completions_do_not_depend_on_batching(tiny_judge, batch_tokens, max_batch_size):
    name, model, tokenizer = tiny_judge
    result = local_judge_completions(PROMPTS, model_name=name, answer_prefix=PREFIX, top_logprobs=5,
                                     batch_tokens=batch_tokens, max_batch_size=max_batch_size)
    assert set(result) == {"completions", "completions_all", "time_per_example", "price_per_example"}
    assert all(len(values) == len(PROMPTS) for values in result.values())
    for prompt, text, entry in zip(PROMPTS, result["completions"], result["completions_all"], strict=True):
        reference = one_at_a_time(model, tokenizer, prompt)
        expected = judge_module._top_tokens(tokenizer, reference, 5)  # the prompts' own order is kept
        assert list(top(entry)) == [t["token"] for t in expected]
        assert list(top(entry).values()) == pytest.approx([t["logprob"] for t in expected], abs=1e-4)
        assert text == expected[0]["token"] == entry["logprobs"]["content"][0]["token"]
        assert "error" not in entry
    assert all(seconds >= 0 for seconds in result["time_per_example"])


def test_prompt_longer_than_the_context_is_unparsed_without_breaking_the_batch(tiny_judge):
    name, model, tokenizer = tiny_judge
    context = model.config.max_position_embeddings
    too_long = judge_prompt(400)
    assert len(_encode(tokenizer, too_long, PREFIX)) >= context
    prompts = [PROMPTS[0], too_long, PROMPTS[1], PROMPTS[2]]
    result = local_judge_completions(prompts, model_name=name, answer_prefix=PREFIX, batch_tokens=10_000)
    entry = result["completions_all"][1]
    assert entry["error"].endswith(f"exceeds the judge's context of {context}")
    assert entry["text"] == "" and entry["logprobs"]["content"] == [{"token": "", "logprob": None, "top_logprobs": []}]
    assert result["completions"][1] == "" and result["time_per_example"][1] == 0.0
    alone = local_judge_completions([PROMPTS[0], PROMPTS[1], PROMPTS[2]], model_name=name, answer_prefix=PREFIX,
                                    batch_tokens=1)
    for got, expected in zip([result["completions_all"][i] for i in (0, 2, 3)], alone["completions_all"], strict=True):
        assert list(top(got)) == list(top(expected))
        assert list(top(got).values()) == pytest.approx(list(top(expected).values()), abs=1e-4)


def test_verdicts_parse_as_before(tiny_judge):
    """alpaca_eval's logprob_parser (the local_pairwise config's) reads the batched and the
    one-at-a-time completions alike; the too-long prompt parses to NaN (unparsed)."""
    parsers = pytest.importorskip("alpaca_eval.completion_parsers")
    name, model, tokenizer = tiny_judge
    prompts = [*PROMPTS, judge_prompt(400)]
    kwargs = {"numerator_token": "1", "denominator_tokens": ["1", "2"], "is_binarize": False}
    batched = local_judge_completions(prompts, model_name=name, answer_prefix=PREFIX, top_logprobs=400)
    alone = local_judge_completions(prompts, model_name=name, answer_prefix=PREFIX, top_logprobs=400, batch_tokens=1)
    for got, expected in zip(batched["completions_all"], alone["completions_all"], strict=True):
        [a], [b] = parsers.logprob_parser(got, **kwargs), parsers.logprob_parser(expected, **kwargs)
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-4)
    preferences = [parsers.logprob_parser(entry, **kwargs)[0] for entry in batched["completions_all"]]
    assert all(1 <= p <= 2 for p in preferences[:-1]) and math.isnan(preferences[-1])


def test_batches_respect_the_token_budget():
    lengths = [5, 300, 40, 41, 39, 7, 6, 100, 40]
    batches = _batches(lengths, batch_tokens=120, max_batch_size=3)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        widths = [lengths[i] for i in batch]
        assert widths == sorted(widths, reverse=True)
        assert len(batch) <= 3 and (len(batch) == 1 or len(batch) * widths[0] <= 120)
    assert [1] in batches  # longer than the budget: alone
    longest_first = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    assert _batches(lengths, batch_tokens=1, max_batch_size=16) == [[i] for i in longest_first]
    assert _batches([], 100, 4) == []


def test_judge_model_loads_once_for_setup_and_completions(generator_dir, monkeypatch):
    """analysis.alpaca_eval_adapter loads the judge once up front (load_judge(model)); the completions reuse it."""
    calls = []
    real_load = judge_module.load_generator
    monkeypatch.setattr(judge_module, "load_generator",
                        lambda *args, **kwargs: calls.append(args) or real_load(*args, **kwargs))
    judge_module._load_judge.cache_clear()
    try:
        load_judge(str(generator_dir))
        local_judge_completions(PROMPTS[:2], model_name=str(generator_dir), answer_prefix=PREFIX)
        local_judge_completions(PROMPTS[2:4], model_name=str(generator_dir), dtype="auto", device="auto")
    finally:
        judge_module._load_judge.cache_clear()
    assert len(calls) == 1
