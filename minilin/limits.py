"""Notebook 08's copy experiments and a small-state recall grid, defined once: probes, contenders, rate grids, a run.

Notebook 08 and `tests/limits_runs.py` (which writes `results/reference/limits_copy.csv` and `limits_recall*.csv`,
three seeds a grid point) both call `run`, so a live run and a committed row are the same computation.

Contenders share one small TinyLM (one pre-norm block, width 64, two heads, rotary positions, bidirectional) and
differ only in their attention. "selection" initialises Linformer's E = F to the first k positions (plus a little
noise): the input-independent solution of the copy when k >= the span.
"""
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from minilin.attention import attention_matrix, softmax_attention
from minilin.data import AssociativeRecall, SpanCopy
from minilin.lowrank import best_rank_approx
from minilin.model import LMConfig, TinyLM
from minilin.train import TrainConfig, evaluate, train

COPY = dict(n=128, span=63, alphabet=16, batch=8, steps=400, eval_every=50)
RECALL = dict(n=48, pairs=(4, 16), queries=16, keys=16, values=4, batch=16, steps=800, eval_every=100)
MODEL = dict(dim=64, depth=1, heads=2, positions="rope")
LRS = (3e-3, 1e-2)                       # the learning-rate grid of every contender
LINFORMER_GRID = ((3e-3, 1.0), (1e-2, 1.0), (3e-3, 10.0))   # (lr, ef_lr_scale): E/F's own lr among the points
SELECTION_NOISE = 0.01                  # std of the noise added to a selection E = F, times 1/sqrt(n)
REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"   # the committed grids
GRID_KEY = ["task", "model", "lr", "ef_lr_scale", "seed"]                    # one run of a grid


@dataclass(frozen=True)
class Contender:
    """One model of the comparison: its attention, the sizes of its low-dimensional object, its grid."""
    name: str
    attention: str = "sdpa"             # a minilin attention name
    arch: str = "tinylm"                # or "attention-off" (the model that reads no context)
    proj_len: int | None = None         # Linformer's k
    nb_features: int | None = None      # Performer's m
    init: str = "default"               # "default" (the course's fan_in) or "selection" (Linformer's E = F)
    causal: bool = False                # the copy is posed bidirectionally; on recall all but Linformer are causal
    grid: tuple = tuple((lr, 1.0) for lr in LRS)   # (lr, ef_lr_scale) points
    shape: tuple = ()                   # (field, value) pairs that replace MODEL's, e.g. (("dim_head", 8),)
    mix: str = "scores"                 # or "uniform": every attention layer averages the values (no scores)

    def model_config(self, n, seed):
        extra = {k: v for k, v in (("proj_len", self.proj_len), ("nb_features", self.nb_features)) if v}
        attention = list(self.attention) if isinstance(self.attention, tuple) else self.attention  # a hybrid
        return LMConfig(block_size=n, attention=attention, seed=seed, causal=self.causal,
                        **{**MODEL, **dict(self.shape)}, **extra)


def copy_task(span=None):
    """The copy probe at COPY's sizes; `span` (default COPY's 63) replaces the span S."""
    return SpanCopy(seq_len=COPY["n"], span_len=COPY["span"] if span is None else span, alphabet=COPY["alphabet"])


def recall_task(pairs):
    return AssociativeRecall(seq_len=RECALL["n"], n_pairs=pairs, n_queries=RECALL["queries"],
                             n_keys=RECALL["keys"], n_values=RECALL["values"])


def copy_contenders(ks=(16, 32, 48, 64), ms=(16, 64, 256), selection_ks=(32, 64)):
    """The copy's contenders. "selection fixed": E = F = the selection, never trained (ef_lr_scale 0): set by hand."""
    out = [Contender("exact", grid=((1e-3, 1.0), *((lr, 1.0) for lr in LRS))),
           Contender("attention off", arch="attention-off")]
    out += [Contender(f"Linformer k={k}", "linformer", proj_len=k, grid=LINFORMER_GRID) for k in ks]
    out += [Contender(f"Linformer k={k}, selection init", "linformer", proj_len=k, init="selection")
            for k in selection_ks]
    out += [Contender(f"Linformer k={k}, selection fixed", "linformer", proj_len=k, init="selection",
                      grid=tuple((lr, 0.0) for lr in LRS)) for k in selection_ks]
    out += [Contender(f"Performer m={m}", "performer", nb_features=m) for m in ms]
    return out


def recall_contenders(k=8, m=64):
    """Causal models (the queries come last; nothing after one reveals its answer), except Linformer, which cannot be."""
    return [Contender("exact", causal=True), Contender("attention off", arch="attention-off", causal=True),
            Contender(f"Linformer k={k}", "linformer", proj_len=k),   # E/F lr x10 was never the copy's best point
            Contender(f"Performer m={m}", "performer", nb_features=m, causal=True),
            Contender("elu+1", "linear", causal=True)]


EXACT_LEARNED = Contender("exact, learned positions", shape=(("positions", "learned"),),
                          grid=((1e-3, 1.0), *((lr, 1.0) for lr in LRS)))
EXACT_DEEP = Contender("exact, 2 layers", shape=(("depth", 2),), grid=((1e-3, 1.0), *((lr, 1.0) for lr in LRS)))
SWEEP = dict(proj_len=16, spans=(8, 16, 32, 63), lr=3e-3)   # the rank sweep: one k, one recipe, four spans


def sweep_contenders(k=SWEEP["proj_len"], lr=SWEEP["lr"]):
    """The rank sweep's two Linformers (fan_in and selection start), one grid point each: the same recipe at every span."""
    return [Contender(f"Linformer k={k}", "linformer", proj_len=k, grid=((lr, 1.0),)),
            Contender(f"Linformer k={k}, selection init", "linformer", proj_len=k, init="selection", grid=((lr, 1.0),))]


def edge_points():
    """A rate beyond the copy grid's edge where a best point sat on it: 1e-3 for the fan_in Linformers (best at 3e-3,
    the lower end), 3e-2 for the selection start at k = 32 and Performer m = 256 (best at 1e-2, the upper end)."""
    by_name = {c.name: c for c in copy_contenders()}
    out = [replace(by_name[f"Linformer k={k}"], grid=((1e-3, 1.0),)) for k in (16, 32, 48, 64)]
    out += [replace(by_name[name], grid=((3e-2, 1.0),)) for name in ("Linformer k=32, selection init", "Performer m=256")]
    return out


class ScatteredRecall(AssociativeRecall):
    """AssociativeRecall with the pairs at random distinct positions among the first seq_len - Q (filler between)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.fused:
            raise ValueError("ScatteredRecall places fused pairs (one token each); use fused=True")
        self.name = self.name.replace("recall(", "recall-scattered(")

    def batch(self, split, batch_size, *, generator, device="cpu"):
        x, y = super().batch(split, batch_size, generator=generator)
        P, room = self.n_pairs, self.seq_len - self.n_queries
        where = torch.rand(batch_size, room, generator=generator).argsort(dim=1)[:, :P]   # (B, P) distinct
        pairs = x[:, :P].clone()
        x[:, :P] = x[:, P:P + 1]                               # filler
        x.scatter_(1, where, pairs)
        return x.to(device), y.to(device)


RECALL_HARD = dict(n=64, pairs=(8, 32), queries=16, keys=32, values=4, batch=16, steps=2000, eval_every=250)


def scattered_recall_task(pairs):
    return ScatteredRecall(seq_len=RECALL_HARD["n"], n_pairs=pairs, n_queries=RECALL_HARD["queries"],
                           n_keys=RECALL_HARD["keys"], n_values=RECALL_HARD["values"])


def scattered_recall_contenders(dim_head=8, k=8, lr=3e-3):
    """Recall with a small state: heads of 8 dimensions (elu+1 holds an 8 x 8 state per head, Linformer 8 slots),
    exact attention (a cache of every token) and uniform attention (no scores: the mean of the values so far)."""
    shape, grid = (("dim_head", dim_head),), ((lr, 1.0),)
    return [Contender("exact, d_h=8", causal=True, shape=shape, grid=grid),
            Contender("uniform, d_h=8", causal=True, shape=shape, grid=grid, mix="uniform"),
            Contender("elu+1, d_h=8", "linear", causal=True, shape=shape, grid=grid),
            Contender(f"Linformer k={k}, d_h=8", "linformer", proj_len=k, shape=shape, grid=grid)]


def uniform_mix(q, k, v, *, mask=None, causal=False):
    """A mixing step with no scores: each query gets the mean of the values it may see (all, or the causal prefix)."""
    if causal:
        count = torch.arange(1, v.shape[-2] + 1, device=v.device, dtype=v.dtype)[:, None]   # (N, 1)
        return v.cumsum(-2) / count
    return v.mean(-2, keepdim=True).expand_as(v)


def ef_drift(model, start):
    """Relative Frobenius change ||P - P0|| / ||P0|| of every Linformer E and F from `start` (their values at step 0)."""
    now = [p for block in model.blocks for p in (getattr(block.attn, "E", None), getattr(block.attn, "F", None))
           if isinstance(p, torch.nn.Parameter)]
    return [float((p.detach().cpu() - p0).norm() / p0.norm()) for p, p0 in zip(now, start)]


def selection_init_(model, *, generator, noise=SELECTION_NOISE):
    """Set every Linformer layer's E and F to [I_k | 0] (slot j = position j) plus N(0, (noise/√n)²); returns model."""
    for block in model.blocks:
        attn = block.attn
        for P in (getattr(attn, "E", None), getattr(attn, "F", None)):
            if not isinstance(P, torch.nn.Parameter):
                continue
            k, n = P.shape[-2], P.shape[-1]
            with torch.no_grad():
                z = torch.randn(P.shape, generator=generator, dtype=P.dtype)
                P.copy_(z * noise / n ** 0.5)
                j = torch.arange(min(k, n))
                P[..., j, j] += 1.0
    return model


def config(contender, *, n, batch, steps, eval_every, lr, ef_lr_scale=1.0, seed=0, device="cpu"):
    """The TrainConfig of one grid point: the course's cosine recipe with a 30-step warm-up."""
    return TrainConfig(model=contender.model_config(n, seed), arch=contender.arch, steps=steps, batch_size=batch,
                       lr=lr, ef_lr_scale=ef_lr_scale, warmup=30, eval_interval=eval_every, eval_batches=4,
                       seed=seed, device=device)


def run(contender, task, sizes, *, lr, ef_lr_scale=1.0, seed=0, device="cpu"):
    """Train one grid point; returns minilin.train's History (History.model is the trained model)."""
    cfg = config(contender, n=task.seq_len, batch=sizes["batch"], steps=sizes["steps"],
                 eval_every=sizes["eval_every"], lr=lr, ef_lr_scale=ef_lr_scale, seed=seed, device=device)
    model = None
    if contender.init == "selection":
        torch.manual_seed(seed)  # the same draws train() makes for this seed, then E = F replaced
        model = selection_init_(TinyLM(cfg.model), generator=torch.Generator().manual_seed(seed))
    elif contender.init != "default":
        raise ValueError(f"unknown init {contender.init!r}: 'default' or 'selection'")
    if contender.mix == "uniform":
        if model is None:
            torch.manual_seed(seed)
            model = TinyLM(cfg.model)
        for block in model.blocks:
            block.attn.mix = uniform_mix   # an instance attribute shadows the layer's own mixing step
    elif contender.mix != "scores":
        raise ValueError(f"unknown mix {contender.mix!r}: 'scores' or 'uniform'")
    start = [p.detach().clone() for block in (model.blocks if model is not None else [])
             for p in (getattr(block.attn, "E", None), getattr(block.attn, "F", None)) if isinstance(p, torch.nn.Parameter)]
    threads = torch.get_num_threads()  # the grids were trained in one thread; more threads sum in another order, and
    torch.set_num_threads(1 if str(device) == "cpu" else threads)  # 08's lr 0.01 run ends at 0.94 on two, not 0.99
    try:
        history = train(replace(cfg), data=task, model=model, progress=False)
    finally:
        torch.set_num_threads(threads)
    history.ef_start = start       # E, F at step 0 of a selection start (for ef_drift); [] otherwise
    return history


def curve_rows(history, contender, task_name, *, lr, ef_lr_scale, seed):
    """One dict per evaluation of a run (the CSV's rows)."""
    return [{"task": task_name, "model": contender.name, "lr": lr, "ef_lr_scale": ef_lr_scale, "seed": seed,
             "step": step, "val_acc": round(acc, 4), "params": history.params,
             "train_s": round(history.time[-1], 1)} for step, acc in zip(history.eval_step, history.val_acc)]


@contextmanager
def swapped_mix(attn, fn):
    """Temporarily replace an attention layer's mixing step: an instance attribute shadows the `mix` method."""
    attn.mix = fn
    try:
        yield
    finally:
        del attn.mix


def effective_map(attn, q, k):
    """The (B, H, N, n) map a layer applies to its values: softmax(q kᵀ/√d), or Linformer's A F with
    A = softmax(q (E k)ᵀ/√d) when the layer has projections (the layer's own E, F)."""
    if hasattr(attn, "projections"):
        E, F = attn.projections(k.shape[-2])                       # (k, n) each
        return attention_matrix(q, E @ k) @ F                      # (B, H, N, k) @ (k, n)
    return attention_matrix(q, k)


def rank_cut(r, attn=None):
    """A mixing step: the layer's attention map (exact, or Linformer's A F if `attn` is a Linformer layer) cut to
    its best rank-r approximation (truncated SVD, recomputed for every input), times v."""
    return lambda q, k, v, *, mask=None, causal=False: best_rank_approx(effective_map(attn, q, k), r) @ v


def ideal_copy(attn, span):
    """A mixing step: the layer's own output, except that each of the last `span` positions (the copy's answer
    slots) reads exactly the value at its source position: Linformer with E = F = [I_S | 0] and A = I."""
    def mix(q, k, v, *, mask=None, causal=False):
        out = type(attn).mix(attn, q, k, v, mask=mask, causal=causal).clone()
        out[..., -span:, :] = v[..., :span, :]
        return out
    return mix


def answer_rows(attn, span, how):
    """A mixing step: the layer's own map (`effective_map`), its last `span` rows (a copy's answer slots) replaced,
    input by input. how="first": slot j reads the first span position whose value equals position j's (with RoPE in
    one block a value depends only on its token, so this is the letter's first occurrence): one-hot rows on at most
    as many columns as the span has distinct letters, a map of rank <= the alphabet chosen for this input. how = an
    int r: the rows' best rank-r approximation (truncated SVD, the Frobenius-best rank-r map)."""
    def mix(q, k, v, *, mask=None, causal=False):
        P = effective_map(attn, q, k).clone()                                     # (B, H, n, n)
        if how == "first":
            src = v[..., :span, :]                                                # (B, H, S, D)
            same = (src[..., :, None, :] - src[..., None, :, :]).abs().amax(-1) <= 1e-6   # (B, H, S, S)
            first = same.to(torch.uint8).argmax(-1)                               # first equal position
            P[..., -span:, :] = torch.nn.functional.one_hot(first, P.shape[-1]).to(P.dtype)
        else:
            P[..., -span:, :] = best_rank_approx(P[..., -span:, :], int(how))
        return P @ v
    return mix


def model_map(model, x):
    """The (B, H, n, n) map (`effective_map`, float64 on the CPU) that a one-block model's layer applies to its values
    on inputs x (B, n)."""
    attn, seen = model.blocks[0].attn, {}

    def keep(q, k, v, *, mask=None, causal=False):
        seen["P"] = effective_map(attn, q, k)                                     # (B, H, n, n)
        return seen["P"] @ v

    model.eval()
    with torch.no_grad(), swapped_mix(attn, keep):
        model(x)
    return seen["P"].double().cpu()


def map_decode(model, x, span):
    """Notebook 08's argmax decode of a one-block model's own map on copy inputs x (B, n): each head's answer rows
    times the span's one-hot tokens; returns [head 0, head 1, ..., heads summed], the share of slots read right."""
    letters = x[:, :span].cpu()
    one_hot = torch.nn.functional.one_hot(letters, int(letters.max()) + 1)[:, None].double()   # (B, 1, S, V)
    mixed = model_map(model, x)[:, :, -span:, :span] @ one_hot                                 # (B, H, S, V)
    return [float((m.argmax(-1) == letters).double().mean()) for m in (*mixed.unbind(1), mixed.sum(1))]


def selection_oracle(k):
    """A mixing step: Linformer with E = F = [I_k | 0] set by hand, i.e. softmax attention over the first k keys."""
    return lambda q, k_, v, *, mask=None, causal=False: softmax_attention(q, k_[..., :k, :], v[..., :k, :])


def score(model, task, *, mix=None, device="cpu"):
    """Validation accuracy on 4 fixed batches of 8 (generator seed 7), layer 0's mixing step replaced by `mix`."""
    model.eval()
    with torch.no_grad():
        if mix is None:
            return evaluate(model, task, batches=4, batch_size=8, seed=7, device=device)["acc"]
        with swapped_mix(model.blocks[0].attn, mix):
            return evaluate(model, task, batches=4, batch_size=8, seed=7, device=device)["acc"]


def gated_recall_contenders():
    """Notebook 09's recall contenders beyond `recall_contenders` (same task, sizes, causal): decay, gate, delta rule."""
    return [Contender(name, name, causal=True) for name in ("retention", "gla", "deltanet", "gated-deltanet")]


SMALL_STATE = 8      # notebook 09's second state size: heads of 8 dimensions (MODEL's default is dim // heads = 32)


def small_state_recall_contenders(dim_head=SMALL_STATE):
    """Notebook 09's recall contenders with a smaller state: the same model with heads of `dim_head` dimensions
    (each head's state is dim_head x dim_head, exact's cache 2 x dim_head per token and head). Plus one hybrid,
    an exact layer above a Gated DeltaNet layer, and its control, two Gated DeltaNet layers (the hybrid also has
    two layers: without the control a gain could be depth's)."""
    shape = (("dim_head", dim_head),)
    names = (("exact", "sdpa"), ("elu+1", "linear"), ("retention", "retention"), ("gla", "gla"),
             ("deltanet", "deltanet"), ("gated-deltanet", "gated-deltanet"))
    out = [Contender(f"{name}, d_h={dim_head}", attention, causal=True, shape=shape) for name, attention in names]
    out += [Contender(f"hybrid gated-deltanet + exact, d_h={dim_head}", ("gated-deltanet", "sdpa"), causal=True,
                      shape=(*shape, ("depth", 2))),
            Contender(f"gated-deltanet x2, d_h={dim_head}", ("gated-deltanet", "gated-deltanet"), causal=True,
                      shape=(*shape, ("depth", 2)))]
    return out


LOW_LR = 1e-3      # notebook 09's third learning rate, below LRS: the lower edge of LRS was most recall models' best


def low_lr_recall_contenders():
    """Notebook 09's recall models at one more learning rate, LOW_LR: `recall_contenders`' exact and elu+1, the gated models
    with heads of 32, and every small-state model. With it each model's grid is (LOW_LR,) + LRS."""
    models = [c for c in recall_contenders() if c.name in ("exact", "elu+1")] + gated_recall_contenders()
    models += small_state_recall_contenders()
    return [replace(c, grid=((LOW_LR, 1.0),)) for c in models]


def read_grid(name, reference=REFERENCE):
    """One committed grid (a CSV of `tests/limits_runs.py`) as a DataFrame; its '# ' header, which holds the commands,
    machine and date that made it, is skipped."""
    import pandas as pd
    path = Path(reference) / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python tests/limits_runs.py` (see its docstring)")
    return pd.read_csv(path, comment="#")


class CopyGrid:
    """Every committed copy run: limits_copy.csv (the one-block grid), limits_copy_fixes.csv (controls, span sweep,
    rank cuts) and limits_copy_edges.csv (points beyond a grid's edge). `rows` holds every measure; `curves` the
    validation accuracy per step (a point trained in two files keeps the later file's run); `final` its last step."""

    FILES = ("limits_copy.csv", "limits_copy_fixes.csv", "limits_copy_edges.csv")

    def __init__(self, reference=REFERENCE):
        import pandas as pd
        self.rows = pd.concat([read_grid(name, reference) for name in self.FILES], ignore_index=True)
        acc = self.rows[self.rows.measure == "val_acc"]
        self.curves = acc.drop_duplicates(GRID_KEY + ["step"], keep="last")
        self.final = self.curves[self.curves.step == self.curves.groupby(GRID_KEY).step.transform("max")]

    def seeds_at(self, model, task=None, lr=None, seeds=(0, 1, 2)):
        """({seed: final accuracy}, lr) of `model` on `task` (default: the span-63 copy) at `lr`, with E, F at the
        lowest ef_lr_scale trained there (1, or 0 for a frozen E, F); with lr=None at the grid point of highest mean."""
        f = self.final[(self.final.model == model) & (self.final.task == (task or copy_task().name))]
        if f.empty:
            raise ValueError(f"no committed copy run of {model!r} on {task or copy_task().name!r}")
        if lr is None:
            lr, ef = f.groupby(["lr", "ef_lr_scale"]).val_acc.mean().idxmax()
        else:
            ef = f[f.lr == lr].ef_lr_scale.min()
        f = f[(f.lr == lr) & (f.ef_lr_scale == ef)]
        if sorted(f.seed) != list(seeds):
            raise ValueError(f"{model!r} at lr {lr}: seeds {sorted(f.seed)} committed, {list(seeds)} expected")
        return dict(zip(f.seed, f.val_acc)), lr

    def curve(self, model, lr, seed, task=None):
        """(steps, validation accuracies) of one committed run at E, F's common rate."""
        c = self.curves[(self.curves.model == model) & (self.curves.task == (task or copy_task().name))
                        & (self.curves.lr == lr) & (self.curves.seed == seed) & (self.curves.ef_lr_scale == 1.0)]
        return c.step.tolist(), c.val_acc.tolist()

    def rank_cuts(self, model, lr):
        """DataFrame (r x seed): the final accuracy of the trained `model` with its attention map cut to rank r."""
        c = self.rows[(self.rows.model == model) & (self.rows.lr == lr) & (self.rows.measure == "rank_cut")]
        c = c.drop_duplicates(GRID_KEY + ["r"], keep="last")
        return c.assign(r=c.r.astype(int)).pivot(index="r", columns="seed", values="val_acc")


def load_copy_grid(reference=REFERENCE):
    """The committed copy grid (notebook 08): a CopyGrid."""
    return CopyGrid(reference)


def rank_two_ways(grid, lr=SWEEP["lr"], ks=(16, 32, 64), reference=REFERENCE):
    """Notebook 08's controls appendix from the committed runs, all from the selection start. Returns (cut, trained):
    cut {steps: DataFrame (r x seed)}, a k = 64 Linformer's map cut to rank r per head; trained {steps: {k: {seed:
    accuracy}}}, Linformers trained at k; both at `lr`, for 400 steps (the grid) and for the long runs' steps
    (limits_copy_long.csv)."""
    name = lambda k: f"Linformer k={k}, selection init"
    runs = read_grid("limits_copy_long.csv", reference)
    steps = int(runs.step.max())
    last = runs[(runs.step == steps) & (runs.measure == "val_acc")]
    cut = {400: grid.rank_cuts(name(64), lr),
           steps: runs[runs.measure == "rank_cut"].assign(r=lambda d: d.r.astype(int))
           .pivot(index="r", columns="seed", values="val_acc")}
    trained = {400: {k: grid.seeds_at(name(k), lr=lr)[0] for k in ks},
               steps: {k: last[last.model == name(k)].set_index("seed").val_acc.to_dict() for k in ks}}
    return cut, trained


def long_k16(reference=REFERENCE):
    """Notebook 08's section 5: k = 16 from the selection start, trained long (limits_copy_long.csv at SWEEP's rate,
    limits_copy_long_lr1e-2.csv at lr 0.01). Returns (curves, decode): curves {lr: {seed: (steps, accuracies)}};
    decode {"head0", "head1", "sum": {seed: accuracy}}, the argmax decode of each lr 0.01 model's own map."""
    slow, fast = read_grid("limits_copy_long.csv", reference), read_grid("limits_copy_long_lr1e-2.csv", reference)
    curves = {}
    for g in (slow[slow.model == "Linformer k=16, selection init"], fast):
        acc = g[g.measure == "val_acc"]
        curves[float(g.lr.iloc[0])] = {int(s): (c.step.tolist(), c.val_acc.tolist()) for s, c in acc.groupby("seed")}
    dec = fast[fast.measure.str.startswith("decode_")]
    return curves, {m.removeprefix("decode_"): dict(zip(d.seed, d.val_acc)) for m, d in dec.groupby("measure")}


def width_k16(reference=REFERENCE):
    """{d_h: {seed: final accuracy}}: notebook 08's 1200-step k = 16 run (lr 0.01) at head width d_h (its probes appendix)."""
    out = {}
    for name in ("limits_copy_width.csv", "limits_copy_long_lr1e-2.csv"):
        g = read_grid(name, reference)
        g = g[(g.measure == "val_acc") & (g.step == g.step.max())]
        for model, runs in g.groupby("model"):
            d_h = int(model.rsplit("d_h=", 1)[1]) if "d_h=" in model else MODEL["dim"] // MODEL["heads"]
            out[d_h] = dict(zip(runs.seed.astype(int), runs.val_acc))
    return dict(sorted(out.items()))


def load_recall_grid(name="limits_recall_scattered.csv", reference=REFERENCE, step=None):
    """{(model, pairs): {seed: accuracy}} of a committed recall grid, at the final step or at `step`."""
    g = read_grid(name, reference)
    g = g[(g.measure == "val_acc")]
    g = g[g.step == (g.groupby(GRID_KEY).step.transform("max") if step is None else step)]
    pairs = g.task.str.extract(r"pairs=(\d+)")[0].astype(int)
    return {(m, int(p)): dict(zip(s.seed, s.val_acc)) for (m, p), s in g.assign(P=pairs).groupby(["model", "P"])}
