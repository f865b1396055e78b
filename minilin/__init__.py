"""minilin: exact, Linformer and Performer attention built from scratch, with the tests that prove them."""
import sys

__version__ = "0.1.0"

if sys.argv[:1] == ["-m"]:  # `python -m minilin ...`: Ctrl-C while it starts (importing torch) is one line too
    import os
    import signal

    def _interrupted_while_starting(signum, frame):
        print("python -m minilin: interrupted while starting; nothing was written", file=sys.stderr, flush=True)
        os._exit(130)

    signal.signal(signal.SIGINT, _interrupted_while_starting)

try:
    from minilin.attention import (
        MultiHeadSelfAttention,
        attention_loops,
        attention_matrix,
        check_attention_inputs,
        softmax_attention,
    )
    from minilin.probes import future_leakage, influence_matrix
except ModuleNotFoundError as err:
    if sys.argv[:1] != ["-m"] or err.name is None or err.name.startswith("minilin"):
        raise
    # `python -m minilin ...` run by a Python that lacks the course's packages (often: a terminal where the
    # course's environment is not active). One line that says which Python, what is missing and what to do.
    print(f"python -m minilin: error: this Python ({sys.executable}) has no module {err.name!r}: it is not the "
          f"course's environment. Activate it first (`. .venv/bin/activate`, on Windows "
          f"`.venv\\Scripts\\Activate.ps1`), or in a notebook cell run `!\"{{sys.executable}}\" -m minilin ...` "
          f"(quoted: the path may hold a space), which uses the notebook's own Python", file=sys.stderr)
    raise SystemExit(2) from None
