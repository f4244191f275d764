"""One Reward interface (`reward`): sequence-classification reward models, the log-prob reward,
Python callables; prefixes of a run scored at decision tokens (`prefixes`); the local AlpacaEval
judge (`judge`). The public names are imported lazily (`prefixes` and `judge` stand alone)."""

import importlib

_PUBLIC = ("CallableReward", "LogProbReward", "Response", "Reward", "SequenceClassificationReward", "finite_scores",
           "load_reward")


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(importlib.import_module(".reward", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
