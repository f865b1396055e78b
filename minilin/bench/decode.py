"""Decoding at constant memory: ms per generated token and the bytes held between tokens, KV cache vs state.

`python -m minilin bench --decode` runs it. What is measured is one layer's attention function, as in the sweep
(minilin.bench.sweep): q, k, v of B sequences × H heads of dimension D, no projections. A method holds
something between tokens and a step turns it, with the new token's q_t, k_t, v_t, into the output and what it
holds next:

    exact-kv-cache  K, V of every cached token (2·B·H·n·D numbers); a step attends q_t over the n cached keys
                    and k_t, reading the cache in place (appending k_t, v_t to a preallocated cache is a write
                    of 2·H·D numbers): O(n·D) time per token
    exact-no-cache  only the n token ids (B·n int64); a step recomputes causal attention over the whole prefix
                    and keeps the last row: O(n²·D) time per token. The benchmark keeps the prefix's q, k, v as
                    the stand-in for the projections a model would rerun (they are not timed and not counted)
    performer       FAVOR+ as a recurrence (minilin.performer.favor_step): kv (B, H, m, Dv), z (B, H, m) and the
                    running max per feature, log_scale (B, H, m), so B·H·m·(Dv + 2) numbers whatever n is
    linear          elu(x)+1 (minilin.linear.linear_step): the same three tensors with F = D features
    retention, gla, deltanet, gated-deltanet
                    the recurrences of minilin.gated (`gated.step`): S (B, H, Dk, Dv), B·H·Dk·Dv numbers

The state after `context` tokens is built directly (random K, V for the cache; the chunked gated functions with
return_state=True; kv, z and the per-feature max of the linear state by their closed form, the state
linear_step reaches), then each timed call decodes token context + 1 and drops what it would hold next, so every
call sees the same context. Timing: warm-up, then up to `rounds` blocks per case with all methods of one context
interleaved; the CSV keeps the median and the interquartile range over the blocks. State bytes are summed over
the storages actually held, on the device and on device="meta" from the same code, and checked against
`state_formula` (a mismatch is a bug and raises). Model parameters and buffers (FAVOR+'s projection, γ) belong
to the model, not to a sequence, and are not counted. Linear and gated states of float16/bfloat16 inputs are
float32 (minilin.linear and minilin.gated compute in float32); the KV cache keeps the inputs' dtype.
"""
import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from minilin import gated
from minilin.attention import softmax_attention
from minilin.bench.decode_results import (  # noqa: F401 (the results side is part of this module's interface)
    DECODE_COLUMNS, DECODE_METHODS, GATED, LABELS, decode_crossover, decode_figure, decode_summary, load_decode_csv,
    save_decode_figure, write_decode_csv)
from minilin.bench.meters import LiveBytes, block_timer, free, is_oom, progress_bar, sync, torch_threads, wall
from minilin.bench.methods import Tensors, resolve_dtype
from minilin.bench.sweep import device_name, resolve_max_bytes
from minilin.device import resolve_device
from minilin.linear import LinearState, elu_plus_one, linear_step
from minilin.performer import favor_step, feature_map

CPU_CONTEXTS = (256, 512, 1024, 2048, 4096, 8192, 16384)
CUDA_CONTEXTS = CPU_CONTEXTS + (32768, 65536)


@dataclass
class DecodeConfig:
    """One decoding benchmark; sizes as the sweep's BenchConfig (8 heads of D=64, m=256, batch 1)."""
    contexts: tuple = None      # tokens already seen; None: CPU_CONTEXTS, or CUDA_CONTEXTS on a GPU
    methods: tuple = DECODE_METHODS
    batch: int = 1
    heads: int = 8
    dim_head: int = 64
    nb_features: int = 256
    device: str = "auto"
    dtype: str = "float32"
    min_run_time: float = 0.2   # seconds of timed tokens per (method, context), split over `rounds` blocks
    rounds: int = 7
    max_seconds: float = 1.0    # one token slower than this -> "slow" (and longer contexts skipped)
    max_bytes: int = None       # predicted bytes above this -> "oom" without running; None: as the sweep
    seed: int = 0
    threads: int = None
    progress: bool = True


def check_methods(names):
    """The names as a tuple; ValueError naming the decodable methods for any other."""
    bad = [n for n in names if n not in DECODE_METHODS]
    if bad:
        raise ValueError(f"{', '.join(map(repr, bad))} cannot be decoded here; decoding methods are "
                         f"{', '.join(DECODE_METHODS)}")
    return tuple(names)


def _state_dtype(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def state_formula(method, context, *, batch, heads, dim_head, nb_features, dtype, layers=1):
    """Bytes `method` holds between tokens after `context` tokens (dtype: the inputs'), by formula:
    KV cache 2·L·B·H·n·D·bytes; token ids B·n·8; FAVOR+ L·B·H·m·(Dv+2)·bytes (kv, z, log_scale); elu+1 the
    same with F = D; gated L·B·H·Dk·Dv·bytes (minilin.gated.state_bytes). Dk = Dv = D."""
    check_methods([method])
    item = torch.empty((), dtype=dtype).element_size()
    state_item = torch.empty((), dtype=_state_dtype(dtype)).element_size()
    if method == "exact-kv-cache":
        return 2 * layers * batch * heads * context * dim_head * item
    if method == "exact-no-cache":
        return batch * context * 8  # int64 token ids, one set for the whole model
    if method in ("performer", "linear"):
        features = nb_features if method == "performer" else dim_head
        return layers * batch * heads * features * (dim_head + 2) * state_item
    return batch * gated.state_bytes(dim_head, dim_head, heads, layers, dtype=_state_dtype(dtype))  # GATED


def held_bytes(state):
    """Bytes of the storages a state dict {name: tensor} keeps alive, each storage once (works on meta)."""
    storages = {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in state.values()}
    return sum(storages.values())


def decode_inputs(cfg, context, make, method):
    """The sequence one case decodes: q, k, v (B, H, context + 1, D), drawn in this order, then the method's
    gates (as its bench builder in minilin.gated_attention draws them), made once for batch 1."""
    shape = (cfg.batch, cfg.heads, context + 1, cfg.dim_head)
    x = dict(zip("qkv", (make.randn(*shape) for _ in range(3))))
    n, H, B = context + 1, cfg.heads, cfg.batch
    if method == "retention":
        x["gamma"] = gated.retention_gammas(H).to(make.device)
    elif method == "gla":
        x["log_gate"] = (F.logsigmoid(make.randn(1, H, n, cfg.dim_head)) / 16).expand(B, -1, -1, -1)
    elif method in ("deltanet", "gated-deltanet"):
        x["beta"] = torch.sigmoid(make.randn(1, H, n)).expand(B, -1, -1)
        if method == "gated-deltanet":
            x["log_alpha"] = F.logsigmoid(make.randn(1, H, n)).expand(B, -1, -1)
    return x


def linear_state(fmap, k, v):
    """The state linear_step reaches after keys k (B, H, n, D) and values v (B, H, n, Dv), in one pass:
    kv = Σ_j φ(k_j) v_jᵀ, z = Σ_j φ(k_j), and for exponential maps each feature row divided by exp(c_f), c_f
    the largest key exponent on feature f (linear_step's running max, minilin/linear.py "Stabilisation")."""
    dtype = _state_dtype(k.dtype)
    e = fmap.key(k.to(dtype))  # (B, H, n, F): exponents or features
    if fmap.exponential:
        c = e.amax(dim=2)  # (B, H, F)
        f = torch.exp(e - c[:, :, None])
    else:
        c, f = e.new_zeros(e.shape[0], e.shape[1], e.shape[3]), e
    return {"kv": f.transpose(-2, -1) @ v.to(dtype), "z": f.sum(2), "log_scale": c}  # (B, H, F, Dv), (B, H, F)


@dataclass
class Decoder:
    """One method after `context` tokens: `state` {name: tensor} is all it holds between tokens;
    step(state) -> (out (B, H, 1, Dv) for token context + 1, the state it would hold next).
    work(state) -> out is what a timed call runs: the step itself, except for the KV cache (see build_decoder)."""
    method: str
    context: int
    state: dict
    step: object
    work: object = None

    def __post_init__(self):
        if self.work is None:
            self.work = lambda state: self.step(state)[0]


def build_decoder(method, context, cfg, make):
    """The Decoder of `method` with its state after `context` tokens of decode_inputs(cfg, context, make, method)."""
    check_methods([method])
    x = decode_inputs(cfg, context, make, method)
    prefix = {name: t[:, :, :-1].clone() for name, t in x.items() if t.ndim >= 3}  # own storage, not a view
    last = {name: t[:, :, -1:].clone() for name, t in x.items() if t.ndim >= 3}    # token context + 1
    q_t, k_t, v_t = last["q"], last["k"], last["v"]  # (B, H, 1, D)
    del x["q"], x["k"], x["v"]
    if method == "exact-kv-cache":
        # A serving cache is preallocated (static, or paged in blocks), so appending k_t, v_t is a write of 2·H·D
        # numbers into a free slot: the timed work reads the cache in place, one softmax over the n cached keys
        # and the new one. `step` also returns the grown cache (torch.cat), untimed; reserved slots not counted.
        scale = cfg.dim_head ** -0.5

        def attend(state):
            scores = torch.cat([q_t @ state["k"].transpose(-2, -1), (q_t * k_t).sum(-1, keepdim=True)], dim=-1)
            p = torch.softmax(scores * scale, dim=-1)  # (B, H, 1, n + 1)
            return p[..., :-1] @ state["v"] + p[..., -1:] * v_t  # (B, H, 1, D)

        def step(state):
            return attend(state), {"k": torch.cat([state["k"], k_t], dim=2), "v": torch.cat([state["v"], v_t], dim=2)}
        return Decoder(method, context, {"k": prefix["k"], "v": prefix["v"]}, step, attend)
    if method == "exact-no-cache":
        ids = (torch.empty(cfg.batch, context, dtype=torch.int64, device="meta") if make.device.type == "meta"
               else torch.randint(256, (cfg.batch, context), generator=make.generator).to(make.device))
        qs, ks, vs = (torch.cat([prefix[n], last[n]], dim=2) for n in "qkv")  # the projections' stand-in

        def step(state):
            out = softmax_attention(qs, ks, vs, causal=True)[:, :, -1:]  # every row recomputed, the last kept
            return out, {"tokens": torch.cat([state["tokens"], state["tokens"][:, -1:]], dim=1)}
        return Decoder(method, context, {"tokens": ids}, step)
    if method in ("performer", "linear"):
        projection = make.projection(cfg.nb_features, cfg.dim_head) if method == "performer" else None
        fmap = feature_map(projection) if method == "performer" else elu_plus_one

        def step(state):
            s = LinearState(**state, position=context)
            out, s = (favor_step(q_t, k_t, v_t, projection, s) if method == "performer"
                      else linear_step(q_t, k_t, v_t, s, feature_map=fmap))
            return out, {"kv": s.kv, "z": s.z, "log_scale": s.log_scale}
        return Decoder(method, context, linear_state(fmap, prefix["k"], prefix["v"]), step)
    return _gated_decoder(method, context, prefix, last, x)


def _gated_decoder(method, context, prefix, last, x):
    q, k, v = prefix["q"], prefix["k"], prefix["v"]
    unit = method in ("deltanet", "gated-deltanet")  # unit q and k, as the modules and bench builders use
    if unit:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    if method == "retention":
        _, S = gated.retention(q, k, v, x["gamma"], return_state=True)
    elif method == "gla":
        _, S = gated.gla(q, k, v, prefix["log_gate"], return_state=True)
    elif method == "deltanet":
        _, S = gated.delta_rule(q, k, v, prefix["beta"], return_state=True)
    else:
        _, S = gated.gated_delta_rule(q, k, v, prefix["beta"], prefix["log_alpha"], return_state=True)
    dtype, D = S.dtype, q.shape[-1]
    q_t, k_t, v_t = (last[n][:, :, 0].to(dtype) for n in "qkv")  # (B, H, D)
    B, H = q_t.shape[:2]
    gate = {"retention": lambda: torch.log(x["gamma"].to(dtype)).view(1, H).expand(B, H),
            "gla": lambda: last["log_gate"][:, :, 0].to(dtype),  # (B, H, Dk)
            "gated-deltanet": lambda: last["log_alpha"][:, :, 0].to(dtype)}.get(method, lambda: None)()
    beta = last["beta"][:, :, 0].to(dtype) if unit else None  # (B, H)

    def step(state):
        qn, kn = (F.normalize(q_t, dim=-1), F.normalize(k_t, dim=-1)) if unit else (q_t, k_t)
        o, S_next = gated.step(qn * D ** -0.5, kn, v_t, state["S"], log_decay_t=gate, beta_t=beta)
        return o[:, :, None], {"S": S_next}
    return Decoder(method, context, {"S": S}, step)


# ---- the run ----------------------------------------------------------------------------------------------------

def model_case(method, context, cfg):
    """(state bytes, peak bytes of one step) of `method` on device="meta": the same code, nothing allocated."""
    dec = build_decoder(method, context, cfg, Tensors("meta", resolve_dtype(cfg.dtype), cfg.seed))
    with torch.no_grad(), LiveBytes() as live:
        dec.work(dec.state)
    return held_bytes(dec.state), live.peak


class _Case:
    def __init__(self, method, context, cfg, device):
        self.decoder = build_decoder(method, context, cfg, Tensors(device, resolve_dtype(cfg.dtype), cfg.seed))
        self.method, self.times, self.failure = method, [], None
        dec = self.decoder
        self.call = lambda: dec.work(dec.state)


def run(cfg=None, **overrides):
    """Run the decoding benchmark; rows (dicts with DECODE_COLUMNS), one per method × context."""
    cfg = replace(cfg or DecodeConfig(), **overrides)
    check_methods(cfg.methods)
    with torch_threads(cfg.threads), torch.no_grad():
        return _run(cfg)


def _limit(cfg, device):
    """Bytes a case may be predicted to need: the sweep's CPU limit, or on CUDA the free memory now."""
    if device.type == "cuda" and cfg.max_bytes is None:
        return torch.cuda.mem_get_info(device)[0] * 9 // 10
    return resolve_max_bytes(cfg, device)


def _run(cfg):
    device, dtype = resolve_device(cfg.device), resolve_dtype(cfg.dtype)
    contexts = sorted(set(cfg.contexts or (CUDA_CONTEXTS if device.type == "cuda" else CPU_CONTEXTS)))
    common = {"device": device.type, "device_name": device_name(device), "dtype": cfg.dtype,
              "torch": torch.__version__, "threads": torch.get_num_threads(), "batch": cfg.batch,
              "heads": cfg.heads, "dim_head": cfg.dim_head, "nb_features": cfg.nb_features}
    sizes = dict(batch=cfg.batch, heads=cfg.heads, dim_head=cfg.dim_head, nb_features=cfg.nb_features, dtype=dtype)
    rows, stopped = [], {}
    bar = progress_bar(len(contexts) * (len(cfg.methods) + cfg.rounds), desc="decode", enabled=cfg.progress)
    for context in contexts:
        cases, pending = [], {}
        for method in cfg.methods:
            bar.set_postfix_str(f"{method} context={context}")
            model_bytes, model_peak = model_case(method, context, cfg)
            formula = state_formula(method, context, **sizes)
            if model_bytes != formula:
                raise AssertionError(f"{method} at context {context}: the meta model holds {model_bytes} bytes, "
                                     f"the formula says {formula} (a bug in minilin.bench.decode)")
            row = {"method": method, "context": context, "ms_per_token": math.nan, "ms_q1": math.nan,
                   "ms_q3": math.nan, "rounds": 0, "state_bytes": math.nan, "model_state_bytes": model_bytes,
                   "status": "ok", "note": "", **common}
            rows.append(row)
            bar.update()
            limit = _limit(cfg, device)
            if method in stopped:
                row.update(status="skipped", note=stopped[method])
            elif limit is not None and model_peak + 2 * model_bytes > limit:
                row.update(status="oom", note=f"predicted {(model_peak + 2 * model_bytes) / 2**30:.3g} GiB per token "
                                              f"> limit {limit / 2**30:.3g} GiB")
            else:
                case = _prepare(method, context, cfg, device, row, formula)
                if case is not None:
                    cases.append(case)
                    pending[method] = row
            if row["status"] != "ok":
                stopped.setdefault(method, f"{row['status']} at context {context}")
        bar.set_postfix_str(f"timing {len(cases)} methods at context={context}")
        _time_interleaved(cases, cfg, device, bar)
        for case in cases:
            row = pending[case.method]
            if case.failure is not None:
                row.update(status="oom", note=case.failure)
                stopped[case.method] = f"oom at context {context}"
                continue
            ms = torch.tensor(case.times, dtype=torch.float64) * 1e3
            q1, med, q3 = torch.quantile(ms, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64)).tolist()
            row.update(ms_per_token=med, ms_q1=q1, ms_q3=q3, rounds=len(ms),
                       note=f"median of {len(ms)} blocks of {case.number} tokens")
        del cases
        free(device)
    bar.close()
    return rows


def _prepare(method, context, cfg, device, row, formula):
    """Build one case on the device, check its bytes, warm it up and size its blocks; None when it failed."""
    try:
        case = _Case(method, context, cfg, device)
        row["state_bytes"] = held_bytes(case.decoder.state)
        if row["state_bytes"] != formula:
            raise AssertionError(f"{method} at context {context} holds {row['state_bytes']} bytes, the formula "
                                 f"says {formula} (a bug in minilin.bench.decode)")
        once = wall(case.call, device)  # first call: page faults, kernel selection
        if once <= 4 * cfg.max_seconds:
            once = min(once, wall(case.call, device))
        if once > cfg.max_seconds:
            row.update(status="slow", note=f"one token took {once:.3g} s > limit {cfg.max_seconds:.3g} s")
            return None
        case.rounds = min(cfg.rounds, max(1, int(cfg.min_run_time / max(once, 1e-7))))
        case.number = max(1, int(cfg.min_run_time / case.rounds / max(once, 1e-7)))
        case.timer = block_timer(case.call, device)
        return case
    except (RuntimeError, MemoryError) as err:
        if not is_oom(err):
            raise
        row.update(status="oom", note=f"out of memory: {str(err).splitlines()[0][:120]}")
        free(device)
        return None


def _time_interleaved(cases, cfg, device, bar):
    """Every round visits every case, from a different one each time, so load changes hit all alike."""
    for r in range(cfg.rounds):
        for i in range(len(cases)):
            case = cases[(i + r) % len(cases)]
            if r < case.rounds and case.failure is None:
                try:
                    case.times.append(case.timer(case.number))
                except (RuntimeError, MemoryError) as err:
                    if not is_oom(err):
                        raise
                    case.failure = f"out of memory while timing: {str(err).splitlines()[0][:100]}"
                    free(device)
        sync(device)
        bar.update()
