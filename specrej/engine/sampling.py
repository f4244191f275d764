"""The sampling settings (`SamplingParams`) and the checks of integer options; torch-free. The
sampler itself is `sampler.sample`."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from ..errors import SpecrejError, shown

# The smallest positive temperature: below it the tempered fp32 logits overflow (1e-300 samples
# the last token id every time) and the draw is greedy anyway; vLLM's sampler takes the same
# 1e-5 as its "greedy" threshold. Use 0 for greedy decoding.
MIN_TEMPERATURE = 1e-5


def check_int(value, name: str, minimum: int) -> int:
    """`value` as an int >= `minimum`, or a SpecrejError naming the option `name` (e.g. --n).
    bool, floats (2.0 too) and strings are refused; numpy integers are taken."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SpecrejError(f"{name} must be an integer >= {minimum}, got {shown(value)}")
    if value < minimum:
        raise SpecrejError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def is_real(value) -> bool:
    """A finite real number (not bool, NaN or +-inf): NaN passes `x < 0` checks unnoticed."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k cut
    max_new_tokens: int = 256

    def __post_init__(self):
        """Each setting checked (messages name the CLI option) and stored as a plain float / int,
        so a record's params are JSON and -0.0 is 0.0."""
        t = self.temperature
        if not is_real(t) or t < 0 or 0 < t < MIN_TEMPERATURE:
            raise SpecrejError(f"--temperature must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE:g}, "
                               f"got {shown(t)}")
        if not is_real(self.top_p) or not 0 < self.top_p <= 1:
            raise SpecrejError(f"--top-p must be in (0, 1], got {shown(self.top_p)}")
        object.__setattr__(self, "temperature", float(t) + 0.0)
        object.__setattr__(self, "top_p", float(self.top_p))
        object.__setattr__(self, "top_k", check_int(self.top_k, "--top-k", 0))
        object.__setattr__(self, "max_new_tokens", check_int(self.max_new_tokens, "--max-new-tokens", 1))
