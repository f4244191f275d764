"""One Reward interface (`reward`): sequence-classification reward models, the log-prob reward,
Python callables; prefixes of a run scored at decision tokens (`prefixes`); the local AlpacaEval
judge (`judge`). The public names are imported lazily (`prefixes` and `judge` stand alone), so
that `GENERATOR_REWARDS` reaches the torch-free workflow."""

import importlib

# The rewards that read the generator's own numbers while it samples: no reward model, no text
GENERATOR_REWARDS = ("logprob", "self-certainty")

_PUBLIC = ("CallableReward", "LogProbReward", "Response", "Reward", "SelfCertaintyReward",
           "SequenceClassificationReward", "finite_scores", "load_reward", "reads_certainty")


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(importlib.import_module(".reward", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
