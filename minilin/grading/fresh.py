"""Fresh inputs: each check's twin, built from the same builder with its seeds mixed with a per-run secret.

See runner's docstring for how twins are scored; this module decides which checks get one and words a
twin's failure.
"""
import torch

from minilin.grading.calls import Call


FRESH = "fresh inputs: check {n} passed on its fixed inputs and fails on a new random draw of the same shapes " \
        "(drawn anew each run, same tolerance): the function must work for any input, not only the ones shown"


def fresh_message(message, fresh):
    """A twin's failure: the usual lines (the call by its shapes, what differs and by how much), then what a
    fresh draw is. The draw's values are never shown: they change with every run."""
    if not fresh:
        return message
    lines = message.splitlines() or [""]
    return "\n".join([lines[0], *lines[1:], "  " + FRESH.format(n=fresh)])


def same_calls(a, b):
    """True when two steps send the same inputs (then a fresh twin would only repeat the check)."""
    return len(a.calls) == len(b.calls) and all(_same(x, y) for x, y in zip(a.calls, b.calls))


def _same(x, y):
    if type(x) is not type(y):
        return False
    if isinstance(x, torch.Tensor):
        return x.shape == y.shape and x.dtype == y.dtype and bool(torch.equal(x, y) if x.device.type != "meta"
                                                                   else True)
    if isinstance(x, Call):
        return (x.fn, x.capture, x.raises, x.label) == (y.fn, y.capture, y.raises, y.label) and \
            _same(x.args, y.args) and _same(x.kwargs, y.kwargs)
    if isinstance(x, (tuple, list)):
        return len(x) == len(y) and all(map(_same, x, y))
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, torch.nn.Module):
        return _same(x.state_dict(), y.state_dict()) and repr(x) == repr(y)
    try:
        return bool(x == y)
    except Exception:  # an object without a usable ==: treat as different (the twin runs)
        return False


def twins(task, steps, secret, extra=()):
    """([fresh step or None, one per step], why none) for `task`: None where the fresh build sends the same
    inputs as the fixed one (nothing random in them). A build that fails or yields other steps gets no twins,
    and the reason is returned for the grader's first line (never silently)."""
    try:
        fresh = task.fresh_steps(secret, extra)
    except Exception as err:  # a builder that cannot draw fresh inputs: its fixed checks still run
        return [None] * len(steps), f"fixed inputs only, the fresh build failed ({type(err).__name__}: {err})"
    if len(fresh) != len(steps):
        return [None] * len(steps), f"fixed inputs only, the fresh build made {len(fresh)} checks, not {len(steps)}"
    out = [None if same_calls(s, f) else f for s, f in zip(steps, fresh)]
    return out, "" if any(out) else "fixed inputs only (no random inputs)"
