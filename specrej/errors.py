"""The one exception type users see for bad input: the CLI prints its message and exits 2."""


class SpecrejError(Exception):
    """Bad input or an unusable model/reward: the message names what is wrong."""
