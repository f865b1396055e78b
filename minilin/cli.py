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


def _number(cast, ok, what):
    """An argparse type: `cast` the text, then require `ok(value)`; errors say `what` was expected."""
    def parse(text):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value
    return parse


positive_int = _number(int, lambda v: v >= 1, "a positive whole number")
nonnegative_int = _number(int, lambda v: v >= 0, "a whole number >= 0")
positive_float = _number(float, lambda v: 0 < v < float("inf"), "a positive finite number")
