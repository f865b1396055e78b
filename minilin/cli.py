"""The command line's shared rules: a user error is one line on stderr, exit code 2, never a traceback.

Every subcommand builds its parser with `Parser` and raises `UsageError` for a bad value it finds after
parsing (a missing file, a length that is not a number, CUDA asked for without a GPU). `python -m minilin`
(`minilin.__main__`) catches `UsageError` and prints `python -m minilin CMD: error: <message>`; anything
else is a bug in minilin and keeps its traceback.
"""
import argparse


class UsageError(Exception):
    """A mistake in how a command was called; the message names the fix. Exit code 2, no traceback."""


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block) raised as UsageError, so tests can catch it."""

    def error(self, message):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def positive_int(text):
    """argparse type: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {value}")
    return value


def nonnegative_int(text):
    """argparse type: an int >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {value}")
    return value


def positive_float(text):
    """argparse type: a finite float > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text}")
    return value
