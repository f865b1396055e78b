"""Train one TinyLM (exact attention) and store samples drawn at several steps in results/reference/lm_samples.json.

    python tests/lm_samples.py                  # the reference size, 1500 steps (about 10-20 minutes on 2 cores)
    python tests/lm_samples.py --steps 200 --out /tmp/s.json    # a quick try

One run of `train` under the default recipe (cosine, lr 1e-2), with the model stopped at each of --stops, sampled
(prompt "The ", temperature 0.8, a fixed generator), and resumed from its checkpoint: resume is bit-identical, so
the stops do not change the run. The JSON records the command, machine, date, configuration, and for each stop the
validation bits per byte and the samples. Notebook 07 (section 6) reads it for the size a CPU cannot train live.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minilin.data import ByteCorpus, decode, encode  # noqa: E402
from minilin.model import LMConfig  # noqa: E402
from minilin.train import TrainConfig, evaluate, train  # noqa: E402
from minilin.train.compare import machine_line  # noqa: E402

OUT = ROOT / "results" / "reference" / "lm_samples.json"
PROMPT, TEMPERATURE, SAMPLES, NEW_BYTES = "The ", 0.8, 4, 200


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--stops", default="0,100,300", help="steps (before the end) at which to sample")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    stops = sorted({int(s) for s in args.stops.split(",")} | {args.steps})
    if stops[0] < 0 or stops[-1] > args.steps:
        parser.error(f"--stops must lie in 0..{args.steps}")
    torch.set_num_threads(1)
    config = TrainConfig(model=LMConfig(attention="sdpa"), steps=args.steps, eval_interval=args.steps, device="cpu")
    corpus = ByteCorpus(block_size=config.model.block_size)
    prompt = encode(PROMPT)[None].repeat(SAMPLES, 1)
    record = {"command": "python tests/lm_samples.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
              "machine": machine_line(), "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S +0000"),
              "config": {"model": asdict(config.model), "steps": config.steps, "batch_size": config.batch_size,
                         "recipe": "cosine", "lr": config.lr, "seed": config.seed, "data": config.data},
              "prompt": PROMPT, "temperature": TEMPERATURE, "generator_seed": 0, "stops": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.pt")
        started = False
        for stop in stops:
            h = train(replace(config, out=path), data=corpus, stop_at=stop, resume=path if started else None)
            started = started or stop > 0
            model = h.model.eval()
            bits = evaluate(model, corpus, batches=config.eval_batches, batch_size=config.batch_size)["bits"]
            out = model.generate(prompt, NEW_BYTES, temperature=TEMPERATURE, generator=torch.Generator().manual_seed(0))
            record["stops"].append({"step": stop, "val_bits_per_byte": round(float(bits), 4),
                                    "samples": [decode(o) for o in out]})
            print(f"step {stop}: {bits:.3f} bits/byte  {decode(out[0])[:80]!r}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
