"""The one exception type users see for bad input: the CLI prints its message and exits 2."""


class SpecrejError(Exception):
    """Bad input or an unusable model/reward: the message names what is wrong."""


def shown(value) -> str:
    """A value as a message quotes it: repr, cut short (a 5000-digit integer stays one short line)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
