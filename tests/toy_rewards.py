"""Reward callables for `python:toy_rewards:<name>` specs in tests."""

import math


def length(prompt, responses):
    """Longer is better: a transparent reward whose ranking a test can predict."""
    return [float(len(r)) for r in responses]


def letter_e(prompt, responses):
    """Fraction of the letter e: varies between partial responses, unlike length."""
    return [r.count("e") / max(1, len(r)) for r in responses]


def broken(prompt, responses):
    return [math.nan if i % 2 else 1.0 for i, _ in enumerate(responses)]
