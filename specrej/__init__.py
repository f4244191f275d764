"""specrej: Fast Best-of-N decoding via Speculative Rejection (Sun et al., NeurIPS 2024).

The public API is imported lazily, so torch-free submodules (`specrej.selection`) can be used
by `analysis` without loading torch.
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Candidate": "methods.session", "Result": "methods.session", "Round": "methods.session",
    "Session": "methods.session",
    "Display": "methods", "Method": "methods", "Param": "methods", "Params": "methods",
    "best_of_n": "api", "speculative_rejection": "api", "run_one": "api",
    "load_engine": "api", "run_prompts": "api",
    "parse_size": "budget",
    "score_prefixes": "prefixes",
    "Engine": "engine", "SamplingParams": "sampling",
    "SpecrejError": "errors",
    "read_prompts": "io", "read_records": "io",
    "CallableReward": "rewards", "LogProbReward": "rewards", "Response": "rewards", "Reward": "rewards",
    "SequenceClassificationReward": "rewards", "load_reward": "rewards",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'specrej' has no attribute {name!r}")
