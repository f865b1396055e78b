"""One head's attention map redrawn by four attentions on the same queries and keys, and a slider explorer.

Given the q, k (and v) one attention head computed on one input, `attention_maps` returns the (N, N) map each
attention applies to the values (output = map @ v):

- exact:     softmax(σ²·q kᵀ/√d)
- Linformer: softmax(σ²·q (E k)ᵀ/√d) E with a random Gaussian E ~ N(0, 1/N), (k, N), used for keys and values
             alike (E = F): an untrained Linformer at the course's "fan_in" scale (minilin.linformer.
             init_projection_; notebook 03), whose projected keys keep the keys' scale. Not the Linformer
             paper's Theorem 2 construction (E = δR, F = e^{-δ}R, R ~ N(0, 1/k)); a trained Linformer learns E, F
- FAVOR+:    φ(σq) φ(σk)ᵀ with rows normalised; m positive orthogonal random features (Performer)
- elu+1:     φ(σq) φ(σk)ᵀ with rows normalised; φ = elu + 1 (Katharopoulos et al.), no randomness

σ multiplies q and k (σ = 1: the head as trained), so σ² scales the logits: large σ sharpens exact attention.
`AttentionExplorer` draws the four maps on one colour scale with each map's error against exact attention, and
`AttentionExplorer.widget()` adds ipywidgets sliders for σ, k and m that redraw them.

Linformer learned for this head: `fit_projection` fits E, F to one head's q, k, v on several training inputs
(Adam on the output error over the answer rows, from the random E above), and `projections={k: (E, F)}` makes
`attention_maps` and `AttentionExplorer` draw softmax(σ²·q (E k)ᵀ/√d) F with those matrices instead.
"""
import math

import torch

from minilin.attention import attention_matrix
from minilin.feature_maps import elu_plus_one
from minilin.performer import orthogonal_gaussian, positive_features

MAPS = ("exact", "Linformer", "FAVOR+", "elu+1")
PROJ_LENS = (4, 8, 16, 32, 64, 128, 256, 512)            # the k slider's stops (those ≤ N are offered)
FEATURE_COUNTS = (4, 16, 64, 256, 1024)                  # the m slider's stops
SIGMAS = (0.125, 0.18, 0.25, 0.35, 0.5, 0.71, 1.0, 1.41, 2.0)  # the σ slider's stops (about factors of √2)


def layer_inputs(model, idx, *, layer=0):
    """What a TinyLM layer's attention mixes on input `idx` (B, N): q, k, v of shape (B, H, N, Dh), after the
    rotary embedding (if any), computed with the model's own modules."""
    if not 0 <= layer < len(model.blocks):
        raise ValueError(f"layer must be in [0, {len(model.blocks)}), got {layer}")
    x = model.embed(idx)
    for block in model.blocks[:layer]:
        x = block(x, causal=model.config.causal)
    block = model.blocks[layer]
    q, k, v = block.attn.project(block.ln1(x))
    if block.attn.rotary is not None:
        q, k = block.attn.rotary(q, k, 0)
    return q, k, v


def _check_head(q, k, v=None):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t is not None and (not isinstance(t, torch.Tensor) or t.ndim != 2 or not t.is_floating_point()):
            got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be one head's (N, D) floating-point tensor, got {got}; "
                             f"pick a head first, e.g. q[0, 0] of a (B, H, N, D) tensor")
    if q.shape != k.shape or (v is not None and v.shape[0] != k.shape[0]):
        raise ValueError(f"q, k, v must have the same length N (and q, k the same D): got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}" + ("" if v is None else f", v {tuple(v.shape)}"))


def _row_normalised(w, name):
    total = w.sum(-1, keepdim=True)
    if not bool((total > 0).all()) or not bool(torch.isfinite(w).all()):
        raise FloatingPointError(f"{name}: a row's weights are not finite or sum to 0 at this input scale; "
                                 f"use float64 inputs or a smaller σ")
    return w / total


def _ticks(size, count=5):
    """About `count` evenly spaced integer tick positions over 0..size-1, both ends included."""
    return sorted({round(i * (size - 1) / (count - 1)) for i in range(count)}) if size > 1 else [0]


def random_projection(proj_len, n, generator):
    """The untrained Linformer E: (proj_len, n) float64 ~ N(0, 1/n) (fan_in), drawn first from `generator`."""
    return torch.randn(proj_len, n, generator=generator, dtype=torch.float64) / math.sqrt(n)


def _check_projections(projections, n, like):
    """projections: None or {k: (E, F)} with E, F of shape (k, n); returns them in q's dtype."""
    if projections is None:
        return {}
    if not isinstance(projections, dict):
        raise ValueError(f"projections must be a dict {{k: (E, F)}}, got {type(projections).__name__}")
    out = {}
    for p, pair in projections.items():
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(t, torch.Tensor) for t in pair)):
            raise ValueError(f"projections[{p!r}] must be a pair (E, F) of tensors, e.g. fit_projection(...)")
        if any(tuple(t.shape) != (p, n) for t in pair):
            raise ValueError(f"projections[{p!r}]: E and F must have shape (k, n) = ({p}, {n}), got "
                             f"{tuple(pair[0].shape)} and {tuple(pair[1].shape)}")
        out[p] = tuple(t.detach().to(like) for t in pair)
    return out


def attention_maps(q, k, *, sigma=1.0, proj_len=32, nb_features=64, seed=0, projections=None):
    """{name: (N, N) map} for MAPS on one head's q, k (N, D): output = map @ v (see the module docstring).

    seed fixes Linformer's E (generator seed) and FAVOR+'s projection (seed + 1), so moving one slider does not
    redraw the other's randomness. projections: {k: (E, F)}, each (k, N); where proj_len is a key, "Linformer" is
    softmax(σ²·q (E k)ᵀ/√d) F with those (e.g. from fit_projection) instead of the random E = F.
    Computed in q's dtype (use float64 for clean comparisons).
    """
    _check_head(q, k)
    n, d = k.shape
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be a positive number, got {sigma}")
    if not (isinstance(proj_len, int) and 1 <= proj_len) or not (isinstance(nb_features, int) and nb_features >= 1):
        raise ValueError(f"proj_len (k) and nb_features (m) must be positive ints, got {proj_len!r}, {nb_features!r}")
    given = _check_projections(projections, n, q)
    q, k = sigma * q, sigma * k
    if proj_len in given:
        E, F = given[proj_len]
    else:
        E = F = random_projection(proj_len, n, torch.Generator().manual_seed(seed)).to(q)   # (k, N), fan_in
    W = orthogonal_gaussian(nb_features, d, generator=torch.Generator().manual_seed(seed + 1), dtype=q.dtype)
    favor = positive_features(q, W, is_query=True) @ positive_features(k, W, is_query=False).T   # (N, N)
    elu = elu_plus_one.query(q) @ elu_plus_one.key(k).T
    return {"exact": attention_matrix(q[None, None], k[None, None])[0, 0],
            "Linformer": attention_matrix(q[None, None], (E @ k)[None, None])[0, 0] @ F,
            "FAVOR+": _row_normalised(favor, "FAVOR+"),
            "elu+1": _row_normalised(elu, "elu+1")}


def map_errors(maps, v, rows=None):
    """Each map's relative error against maps["exact"] over `rows` (a slice or index; None = all):
    {name: {"map": ‖P̂ − P‖_F / ‖P‖_F, "output": ‖(P̂ − P) v‖_F / ‖P v‖_F}}, plus "uniform 1/N", the map that
    averages all N values (a baseline: a map no better than that has learned nothing about this head)."""
    rows = slice(None) if rows is None else rows
    exact = maps["exact"][rows]
    out = {}
    uniform = torch.full_like(maps["exact"], 1.0 / maps["exact"].shape[-1])
    for name, m in {**maps, "uniform 1/N": uniform}.items():
        diff = m[rows] - exact
        out[name] = {"map": float(diff.norm() / exact.norm()), "output": float((diff @ v).norm() / (exact @ v).norm())}
    return out



def _as_batch(q, k, v):
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        raise ValueError("q, k, v must be tensors: one head's (B, N, D) over B inputs, or (N, D) for one input")
    q, k, v = (t if t.ndim == 3 else t[None] for t in (q, k, v))
    if q.ndim != 3 or k.shape != q.shape or v.shape[:2] != k.shape[:2]:
        raise ValueError(f"q, k, v must be one head's (B, N, D) over the same B inputs and N positions (q, k the "
                         f"same D), got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    return q, k, v


def projection_loss(q, k, v, E, F, rows=None):
    """Linformer's squared relative output error against exact attention on one head, pooled over B inputs:
    Σ ‖softmax(q (E k)ᵀ/√d) (F v) − softmax(q kᵀ/√d) v‖² / Σ ‖softmax(q kᵀ/√d) v‖² over the query `rows`.

    q, k, v: (B, N, D) (or (N, D));  E, F: (k, N).  Its square root is map_errors' "output" error for B = 1.
    """
    q, k, v = _as_batch(q, k, v)
    rows = slice(None) if rows is None else rows
    qs, scale = q[:, rows], 1.0 / math.sqrt(q.shape[-1])
    exact = torch.softmax(qs @ k.transpose(-2, -1) * scale, -1) @ v                  # (B, R, Dv)
    approx = torch.softmax(qs @ (E @ k).transpose(-2, -1) * scale, -1) @ (F @ v)     # (B, R, k) @ (B, k, Dv)
    return ((approx - exact) ** 2).sum() / (exact ** 2).sum()


def fit_projection(q, k, v, *, proj_len, rows=None, steps=300, lr=3e-3, batch_size=8, tied=False, generator=None,
                   return_losses=False):
    """Linformer's E, F (each (proj_len, N), float64) fitted to one head: Adam on projection_loss.

    q, k, v: one head's (B, N, D) on B training inputs (with the copy's sources at fixed positions one E can serve
    every input). Starts from random_projection(proj_len, N, generator), the random E = F that attention_maps
    draws with the same generator seed, then takes `steps` Adam steps (learning rate `lr`), each on `batch_size`
    inputs drawn with `generator` (a fresh minibatch each step: a fixed small set is memorised, not generalised).
    tied=True fits one matrix used for keys and values (E = F, the paper's "kv" sharing). Returns (E, F), and
    with return_losses=True also the list of each step's minibatch loss (to see whether the fit has converged).
    """
    q, k, v = (t.detach().to(torch.float64) for t in _as_batch(q, k, v))
    n = k.shape[1]
    for name, value in (("proj_len", proj_len), ("steps", steps), ("batch_size", batch_size)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive number, got {lr}")
    if not isinstance(generator, torch.Generator):
        raise ValueError("generator must be a torch.Generator (e.g. torch.Generator().manual_seed(0)): the start "
                         "and the minibatches are drawn from it, so the fit repeats exactly")
    E0 = random_projection(proj_len, n, generator)
    E = E0.clone().requires_grad_(True)
    F = E if tied else E0.clone().requires_grad_(True)
    optimiser = torch.optim.Adam([E] if tied else [E, F], lr=lr)
    losses = []
    for _ in range(steps):
        batch = torch.randint(0, q.shape[0], (min(batch_size, q.shape[0]),), generator=generator)
        optimiser.zero_grad()
        loss = projection_loss(q[batch], k[batch], v[batch], E, F, rows)
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))
    fitted = E.detach().clone(), F.detach().clone()
    return (*fitted, losses) if return_losses else fitted

class AttentionExplorer:
    """The four maps of one head side by side, on one colour scale, with their errors against exact attention.

    q, k, v: one head's (N, D) tensors (e.g. layer_inputs(...)[i][0, h]); rows: which query rows to draw and
    score (a slice; default all); row_label/col_label: axis labels; title: the figure's title; projections:
    {k: (E, F)} fitted to this head (fit_projection), drawn instead of the random E where learned=True.
    figure(...) draws one setting (for a static figure); widget() returns sliders + the redrawn figure.
    """

    def __init__(self, q, k, v, *, rows=None, row_label="query position", col_label="key position", title="",
                 seed=0, projections=None):
        _check_head(q, k, v)
        self.q, self.k, self.v = q, k, v
        self.projections = _check_projections(projections, k.shape[0], q)
        self.rows = slice(None) if rows is None else rows
        self.row_label, self.col_label, self.title, self.seed = row_label, col_label, title, seed
        self.proj_lens = [p for p in PROJ_LENS if p <= k.shape[0]] or [k.shape[0]]
        self.last = None   # (settings, errors) of the latest drawing

    def set_projections(self, projections):
        """Replace the learned projections {k: (E, F)} (each (k, N)), e.g. with fit_projection's for this head."""
        self.projections = _check_projections(projections, self.k.shape[0], self.q)

    def compute(self, sigma=1.0, proj_len=32, nb_features=64, learned=False):
        """(maps, errors) for one setting; maps are the drawn rows only. learned: Linformer with the given
        projections[proj_len] instead of the random E."""
        if learned and proj_len not in self.projections:
            raise ValueError(f"no learned projection for k={proj_len} (have k in {sorted(self.projections)}); fit "
                             f"one with fit_projection and pass projections={{k: (E, F)}} to AttentionExplorer")
        maps = attention_maps(self.q, self.k, sigma=sigma, proj_len=proj_len, nb_features=nb_features,
                              seed=self.seed, projections=self.projections if learned else None)
        errors = map_errors(maps, self.v, self.rows)
        return {name: m[self.rows] for name, m in maps.items()}, errors

    def error_table(self, errors):
        """The errors against exact attention as a table (rows: Linformer, FAVOR+, elu+1, uniform 1/N)."""
        import pandas as pd
        return pd.DataFrame({"map error": {n: round(e["map"], 3) for n, e in errors.items() if n != "exact"},
                             "output error": {n: round(e["output"], 3) for n, e in errors.items() if n != "exact"}})

    def figure(self, sigma=1.0, proj_len=32, nb_features=64, learned=False):
        """A matplotlib figure of the four maps at one setting (learned: see compute); sets self.last.

        exact, FAVOR+ and elu+1 are probability maps: one shared colour scale (square-root, so that weights near
        1/N stay visible next to the sharp ones). Linformer's map AE has signed entries: its own diverging scale
        centred on 0, with its own colour bar.
        """
        import matplotlib.pyplot as plt
        from matplotlib.colors import PowerNorm
        maps, errors = self.compute(sigma, proj_len, nb_features, learned)
        order = ("exact", "FAVOR+", "elu+1", "Linformer")
        hi = max(float(maps[name].max()) for name in order[:3])
        edge = float(maps["Linformer"].abs().max())
        fig, axes = plt.subplots(1, 4, figsize=(17, 4.4), constrained_layout=True)
        images = {}
        for ax, name in zip(axes, order):
            m = maps[name].detach().cpu().numpy()
            if name == "Linformer":
                images[name] = ax.imshow(m, cmap="RdBu_r", vmin=-edge, vmax=edge, aspect="auto",
                                         interpolation="nearest")
            else:
                images[name] = ax.imshow(m, cmap="magma", norm=PowerNorm(0.5, vmin=0.0, vmax=hi), aspect="auto",
                                         interpolation="nearest")
            kind = "learned for this head" if learned else "random E"
            detail = {"exact": "", "Linformer": f", k={proj_len} ({kind})", "FAVOR+": f", m={nb_features}",
                      "elu+1": ""}[name]
            err = "" if name == "exact" else f"\nerror: map {errors[name]['map']:.2f}, output {errors[name]['output']:.2f}"
            ax.grid(False)   # a style's grid lines would cross the map
            ax.set(title=f"{name}{detail}{err}", xlabel=self.col_label, xticks=_ticks(m.shape[1]),
                   yticks=_ticks(m.shape[0]) if ax is axes[0] else [])
        axes[0].set_ylabel(self.row_label)
        fig.colorbar(images["exact"], ax=axes[:3], shrink=0.9, label="attention weight (one scale, square-root)")
        fig.colorbar(images["Linformer"], ax=axes[3], shrink=0.9, label="map entry (signed)")
        fig.suptitle(f"{self.title}  σ = {sigma:g} (q, k scaled by σ); all-uniform map's error: "
                     f"{errors['uniform 1/N']['map']:.2f}".strip())
        self.last = ({"sigma": sigma, "proj_len": proj_len, "nb_features": nb_features, "learned": learned}, errors)
        return fig

    def widget(self, sigma=1.0, proj_len=32, nb_features=64, learned=False):
        """Sliders for σ, k and m over the figure; moving one redraws the four maps and the error table. With
        projections, a toggle switches Linformer between the random E and the E, F learned for this head (its
        k slider then offers the fitted k only)."""
        import io

        import ipywidgets as widgets
        import matplotlib.pyplot as plt

        style = {"description_width": "initial"}
        ks = [p for p in self.proj_lens if p in self.projections] if self.projections else self.proj_lens
        sliders = {
            "sigma": widgets.SelectionSlider(options=list(SIGMAS), value=_nearest(SIGMAS, sigma),
                                             description="σ (scale of q and k)", style=style,
                                             continuous_update=False),
            "proj_len": widgets.SelectionSlider(options=ks, value=_nearest(ks, proj_len),
                                                description="Linformer k", style=style, continuous_update=False),
            "nb_features": widgets.SelectionSlider(options=list(FEATURE_COUNTS),
                                                   value=_nearest(FEATURE_COUNTS, nb_features),
                                                   description="Performer m", style=style, continuous_update=False),
        }
        if self.projections:
            sliders["learned"] = widgets.ToggleButtons(options=[("random E", False), ("learned for this head", True)],
                                                       value=bool(learned), description="Linformer E", style=style)
        # the figure as a PNG in an Image widget and the table as HTML: updating them is a value change, with no
        # output capture (an Output widget redrawn while a notebook runs unattended can stall the runner)
        image, table = widgets.Image(format="png"), widgets.HTML()

        def redraw(_=None):
            settings = {name: s.value for name, s in sliders.items()}
            fig = self.figure(**settings)
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png", dpi=80)
            plt.close(fig)
            image.value = buffer.getvalue()
            table.value = self.error_table(self.last[1]).to_html()

        for s in sliders.values():
            s.observe(redraw, names="value")
        redraw()
        box = widgets.VBox([widgets.HBox(list(sliders.values())), image, table])
        box.sliders, box.redraw, box.image, box.table = sliders, redraw, image, table   # for checks
        return box


def _nearest(options, value):
    return min(options, key=lambda o: abs(math.log(o) - math.log(value)))
