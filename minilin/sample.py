"""`python -m minilin sample`: generate text from a checkpoint written by `python -m minilin train`.

    python -m minilin sample                                     # checkpoints/lm.pt, 200 bytes after a newline
    python -m minilin sample --ckpt lm.pt --prompt "def " --tokens 300 --temperature 0.8 --top-k 40

Decoding is recurrent by default when every layer can decode one token at a time (exact attention keeps a
key/value cache, Performer an O(1) state): each new byte costs one step. Otherwise, or with --recurrent no,
it is windowed: the model re-reads the last block_size bytes for every new byte. Learned positions stop at
block_size, so a longer text is decoded windowed (a note on stderr says so).
"""
import argparse
import math
import sys

import torch

from minilin.cli import Parser, UsageError, positive_int, report_progress
from minilin.data import decode, encode
from minilin.device import DEVICE_HELP, resolve_device
from minilin.model import TinyLM
from minilin.train.config import DEFAULT_OUT
from minilin.train.loop import load_model


def nonnegative_float(text):
    """argparse type: a finite float >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0 (0 = greedy), got {text}")
    return value


def build_parser():
    p = Parser(prog="python -m minilin sample", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", default=DEFAULT_OUT, help=f"checkpoint written by `python -m minilin train` "
                                                       f"(default {DEFAULT_OUT})")
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p.add_argument("--tokens", type=positive_int, default=200, help="bytes to generate (default 200)")
    p.add_argument("--temperature", type=nonnegative_float, default=0.8, help="0 = greedy (default 0.8)")
    p.add_argument("--top-k", type=positive_int, default=None, help="sample from the k likeliest bytes (default all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-samples", type=positive_int, default=1)
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--recurrent", choices=("auto", "yes", "no"), default="auto",
                   help="decode token by token with the layers' states (yes), re-read the last block_size bytes "
                        "for every byte (no), or recurrent when the model allows it (auto, the default)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (or set TQDM_DISABLE=1)")
    return p


def choose_decoding(model, prompt_len, tokens, choice, warn=None):
    """True = recurrent, False = windowed, for --recurrent `choice`; UsageError if `yes` cannot work.

    Learned positions end at block_size: the recurrent decoder cannot slide past it, the windowed one can.
    warn(line) is told once when auto falls back to the window for that reason.
    """
    block, length = model.config.block_size, prompt_len + tokens
    past_positions = model.config.positions == "learned" and length > block
    if choice == "no":
        return False
    if choice == "yes":
        if not model.can_step():
            raise UsageError(f"--recurrent yes: layers {model.config.layer_attention()} cannot all decode one token "
                             f"at a time; use --recurrent no or auto")
        if past_positions:
            raise UsageError(f"--recurrent yes: learned positions end at block_size={block}, and the prompt plus "
                             f"--tokens is {length} bytes; ask for at most {max(0, block - prompt_len)} tokens, "
                             f"or use --recurrent no (a sliding window)")
        return True
    if model.can_step() and past_positions:
        if warn is not None:
            warn(f"note: learned positions end at block_size={block} and this text is {length} bytes: decoding "
                 f"with a sliding window over the last {block} bytes instead of the recurrent state (slower)")
        return False
    return model.can_step()


def generate(model, idx, tokens, *, recurrent, progress=True, chunk=16, **sampling):
    """model.generate(idx, tokens, recurrent=..., **sampling), with a progress bar on stderr for the windowed
    decoder (it re-reads the whole window for every byte: minutes for a few hundred bytes on a busy CPU). The
    text is the same as from one call: the windowed decoder keeps no state between bytes."""
    if recurrent:
        return model.generate(idx, tokens, recurrent=True, **sampling)
    from tqdm import tqdm
    out = idx
    with tqdm(total=tokens, desc="sample", unit="B", dynamic_ncols=True,
              **({} if progress else {"disable": True})) as bar:  # disable=False would override TQDM_DISABLE
        while out.shape[1] - idx.shape[1] < tokens:
            n = min(chunk, tokens - (out.shape[1] - idx.shape[1]))
            out = model.generate(out, n, recurrent=False, **sampling)
            bar.update(n)
            report_progress(where=f"after {out.shape[1] - idx.shape[1]} of {tokens} bytes")
    return out


def main(argv=None):
    """`python -m minilin sample`: print text generated from a checkpoint; 0 on success."""
    args = build_parser().parse_args(argv)
    try:
        device = resolve_device(args.device)
        model, config = load_model(args.ckpt, map_location=device)
    except ValueError as err:  # CheckpointError included
        raise UsageError(str(err)) from None
    if not isinstance(model, TinyLM):
        raise UsageError(f"sampling supports TinyLM checkpoints; {args.ckpt} holds a {config.arch} model")
    if not config.model.causal:
        raise UsageError(f"{args.ckpt} is a masked LM (causal=False): it fills in masked bytes and cannot continue "
                         f"a text; sample from a model trained with --objective clm")
    prompt = encode(args.prompt)
    if len(prompt) == 0:
        raise UsageError("--prompt is empty: give at least one character to continue (default: a newline)")
    report_progress(kept="nothing was written (sample prints its text when it is done)")
    recurrent = choose_decoding(model, len(prompt), args.tokens, args.recurrent,
                                warn=lambda line: print(line, file=sys.stderr))
    idx = prompt[None].repeat(args.num_samples, 1).to(device)
    out = generate(model, idx, args.tokens, recurrent=recurrent, progress=not args.no_progress,
                   temperature=args.temperature, top_k=args.top_k, generator=torch.Generator().manual_seed(args.seed))
    for i, row in enumerate(out):
        if i:
            print("-" * 40)
        print(decode(row))
    return 0


if __name__ == "__main__":  # python -m minilin.sample: the same as python -m minilin sample
    from minilin.__main__ import run
    run("sample")
