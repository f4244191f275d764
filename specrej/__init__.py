"""specrej: Fast Best-of-N decoding via Speculative Rejection (Sun et al., NeurIPS 2024).

The public API is imported lazily, so torch-free submodules (`specrej.methods.cuts`) can be used
by `analysis` without loading torch.
"""

import importlib

__version__ = "0.3.0"

_EXPORTS = {
    "Candidate": "records.result", "Result": "records.result", "Round": "records.result",
    "Session": "methods.session",
    "Display": "methods", "Method": "methods", "Param": "methods", "Params": "methods",
    "best_of_n": "api", "speculative_rejection": "api", "run_one": "api",
    "load_engine": "api", "run_prompts": "api",
    "parse_size": "engine.budget",
    "score_prefixes": "rewards.prefixes",
    "Engine": "engine.engine", "SamplingParams": "engine.sampling",
    "SpecrejError": "errors",
    "read_prompts": "records.prompts", "read_records": "records.io",
    "CallableReward": "rewards.reward", "LogProbReward": "rewards.reward", "Response": "rewards.reward",
    "Reward": "rewards.reward", "SequenceClassificationReward": "rewards.reward", "load_reward": "rewards.reward",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'specrej' has no attribute {name!r}")
