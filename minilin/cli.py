"""The command line's shared rules: a user error is one line on stderr, exit code 2, never a traceback.

Every subcommand builds its parser with `Parser` and raises `UsageError` for a bad value it finds after
parsing (a missing file, a length that is not a number, CUDA asked for without a GPU). `python -m minilin`
(`minilin.__main__`) catches `UsageError` and prints `python -m minilin CMD: error: <message>`; anything
else is a bug in minilin and keeps its traceback.
"""
import argparse
import difflib
import re


class UsageError(Exception):
    """A mistake in how a command was called; the message names the fix. Exit code 2, no traceback."""


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block) raised as UsageError, so tests can catch it."""

    def error(self, message):
        raise UsageError(f"{message}{self.did_you_mean(message)} (see `{self.prog} --help`)")

    def did_you_mean(self, message):
        """"; did you mean --chapter?" for a mistyped option or choice named in argparse's `message`, else ""."""
        guesses = []
        if message.startswith("unrecognized arguments: "):
            options = [o for o in self._option_string_actions if o.startswith("--")]
            for word in message.removeprefix("unrecognized arguments: ").split():
                if word.startswith("--"):
                    guesses += difflib.get_close_matches(word.split("=")[0], options, n=1, cutoff=0.6)
        elif match := re.search(r"'([^']*)'\W+\(?choose from (.*?)\)?$", message):
            # argparse's "invalid choice: 'x' (choose from 'a', 'b')" or ours: "unknown attention 'x': choose from a, b"
            choices = re.findall(r"'([^']*)'", match.group(2)) or match.group(2).split(", ")
            for word in match.group(1).split(","):
                if word not in choices:
                    guesses += difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
        return f"; did you mean {' '.join(dict.fromkeys(guesses))}?" if guesses else ""


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


# What a long command has done so far, for the one line Ctrl-C prints (`python -m minilin` catches
# KeyboardInterrupt): `where` it stopped and what was `kept` on disk. Commands update it as they go.
_PROGRESS = {}


def report_progress(*, where=None, kept=None, context=None):
    """Record where the running command is (e.g. "at step 70 of 600"), what is safely on disk
    (e.g. "checkpoints/lm.pt holds step 50") and which part of a longer job runs (e.g. "run 3 of 12");
    any of them may be given alone."""
    for key, value in (("where", where), ("kept", kept), ("context", context)):
        if value is not None:
            _PROGRESS[key] = value


def reset_progress(kept):
    """Start a command's record: nothing done yet, `kept` says what is on disk if it is stopped now."""
    _PROGRESS.clear()
    _PROGRESS["kept"] = kept


def interrupted_line(prog):
    """The one line printed on Ctrl-C: where it stopped and what was kept."""
    context, where = _PROGRESS.get("context"), _PROGRESS.get("where")
    kept = _PROGRESS.get("kept", "nothing was written")
    return f"{prog}: interrupted{' in ' + context if context else ''}{' ' + where if where else ''}; {kept}"
