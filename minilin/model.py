"""TinyLM: a small pre-norm Transformer over bytes whose attention is any variant of minilin.variants (exact, SDPA,
Linformer, Performer, linear, efficient, retention, GLA, DeltaNet, Gated DeltaNet) — per layer — so the variants can
be trained and compared on one footing.

    idx (B, N) -> token embedding (+ learned positions) -> depth × [x + attn(LN(x)); x + MLP(LN(x))]
               -> LN -> head -> logits (B, N, 256)

Positions: "learned" absolute embeddings (GPT-2) or "rope" (rotary embeddings, Su et al. 2021, arXiv
2104.09864), which rotate q and k *before* the attention mixes them — so before Performer's feature map,
as the linear-attention literature recommends (RoPE needs no position table, and linear attention then
keeps its O(1)-per-token recurrent form). GLA, DeltaNet and Gated DeltaNet layers take no rotation (as their
papers and flash-linear-attention's layers: the recurrence orders the tokens); retention keeps it (RetNet's xPos
rotation); a hybrid's attention layers keep theirs.

Causal or not: `LMConfig.causal` (True = next-byte LM). Linformer cannot be causal (its E/F projections mix
every position into each projected key, the future included); a causal Linformer model raises ValueError.
Retention, GLA, DeltaNet and Gated DeltaNet are recurrences, causal only: a masked-LM model with them raises too.

Also here: the two reference models we measure TinyLM against — `TransformerEncoderLM` (PyTorch's own
nn.TransformerEncoder, the reference baseline) and `LinearAttentionTransformerBaseline`
(linear-attention-transformer 0.19.1's LinearAttentionTransformerLM, the library baseline).
"""
import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from minilin.attention import ExactSelfAttention, sdpa_attention  # noqa: F401 (re-exported for old imports)
from minilin.data import IGNORE, MASK_ID, VOCAB_SIZE
from minilin.device import canonical_device, same_device
from minilin.variants import ATTENTIONS, VARIANTS, module_for_layer

POSITIONS = ("learned", "rope", "none")
INITS = ("fan_in", "gpt2")  # TinyLM's initialisations (see TinyLM._init_weights)


@dataclass
class LMConfig:
    """TinyLM's shape and attention. Defaults: the CPU-sized reference config (L=256, d=128, 2 layers, 4 heads).

    attention: one name from minilin.variants.ATTENTIONS ("exact", "sdpa", "linformer", "performer",
    "linear", "efficient", "retention", "gla", "deltanet", "gated-deltanet"), or a list with one name per layer (a
    hybrid, e.g. ["performer", "exact"] or ["exact", "gated-deltanet"]). proj_len (Linformer's k): an int, or one
    per layer.
    """
    vocab_size: int = VOCAB_SIZE      # classes predicted; the embedding also has a row for MASK_ID
    block_size: int = 256             # longest sequence (learned positions, Linformer's seq_len)
    dim: int = 128
    depth: int = 2
    heads: int = 4
    dim_head: int | None = None       # default dim // heads
    ff_mult: int = 4
    dropout: float = 0.0
    attention: str | list = "exact"
    positions: str = "learned"
    causal: bool = True               # next-byte LM; False = bidirectional (masked LM, Linformer)
    proj_len: int | list = 64         # Linformer's projected length (the paper's k)
    linformer_sharing: str = "headwise"  # "none", "headwise", "kv", "layerwise" (one E for all layers)
    linformer_projection: str = "linear"  # "linear" (learned E/F), "mean" (pooling), "conv"
    nb_features: int | None = None    # Performer's m; None = int(dim_head · ln dim_head)
    redraw_interval: int | None = 1000  # Performer: redraw features every this many training forwards
    kernel: str = "positive"          # Performer's feature map
    seed: int = 0                     # Performer projection seeds (layer l uses seed + l)
    init: str = "fan_in"              # "fan_in" (default) or "gpt2": see TinyLM._init_weights

    def layer_attention(self):
        """The attention name of each layer (a list of length depth)."""
        kinds = [self.attention] * self.depth if isinstance(self.attention, str) else list(self.attention)
        if len(kinds) != self.depth:
            raise ValueError(f"attention lists one name per layer: got {len(kinds)} names for depth={self.depth}")
        for kind in kinds:
            if kind not in ATTENTIONS:
                raise ValueError(f"unknown attention {kind!r}; choose from {ATTENTIONS}")
        return kinds

    def layer_proj_len(self):
        """Linformer's projected length (the paper's k) for each layer."""
        ks = [self.proj_len] * self.depth if isinstance(self.proj_len, int) else list(self.proj_len)
        if len(ks) != self.depth:
            raise ValueError(f"proj_len lists one length per layer: got {len(ks)} for depth={self.depth}")
        return ks

    def head_dim(self):
        if self.dim_head is not None:
            return self.dim_head
        if self.dim % self.heads:
            raise ValueError(f"dim={self.dim} is not divisible by heads={self.heads}; set dim_head")
        return self.dim // self.heads


CAUSAL_LINFORMER = (
    "Linformer cannot be causal: E and F project the whole sequence (all n positions, the future included) "
    "onto k slots before any query looks at them, so every output would depend on later tokens "
    "(lucidrains/linformer#4). For a next-byte LM use attention='exact', 'sdpa', 'performer', 'linear', "
    "'efficient', 'retention', 'gla', 'deltanet' or 'gated-deltanet'; for Linformer use causal=False with the masked-LM objective "
    "(ByteCorpus(objective='mlm'), `--objective mlm`).")  # notebook 07 prints it: change both together


class Rotary:
    """Rotary position embedding (RoPE, arXiv 2104.09864): rotate feature pairs of q and k by position·θ_i.

    q, k: (B, H, N, D) with even D; position of token n is offset + n. θ_i = base^(-2i/D). The pairs are
    (x_i, x_{i+D/2}) ("rotate half", GPT-NeoX layout). q_m·k_n then depends on m − n only. A plain callable
    (no parameters), used as MultiHeadSelfAttention.rotary: (q, k, offset) -> (q, k).
    """

    def __init__(self, dim_head, base=10000.0):
        if dim_head % 2:
            raise ValueError(f"rotary embeddings rotate pairs of features: dim_head must be even, got {dim_head}")
        self.dim_head, self.base = dim_head, base

    def cos_sin(self, n, offset, device, dtype):
        half = self.dim_head // 2
        theta = self.base ** (-torch.arange(half, dtype=torch.float64) / half)  # (D/2,)
        angle = torch.arange(offset, offset + n, dtype=torch.float64)[:, None] * theta  # (N, D/2)
        angle = torch.cat([angle, angle], dim=-1)  # (N, D)
        return angle.cos().to(device=device, dtype=dtype), angle.sin().to(device=device, dtype=dtype)

    @staticmethod
    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)

    def __call__(self, q, k, offset=0):
        cos, sin = self.cos_sin(q.shape[-2], offset, q.device, q.dtype)
        return q * cos + self.rotate_half(q) * sin, k * cos + self.rotate_half(k) * sin


def make_attention(config, layer, shared_E=None):
    """The attention module of layer `layer` (0-based), as named by config.layer_attention()[layer].

    shared_E: with linformer_sharing="layerwise", the E parameter of the model's first Linformer layer.
    """
    if config.causal and not VARIANTS[config.layer_attention()[layer]].causal:
        raise ValueError(CAUSAL_LINFORMER)
    return module_for_layer(config, layer, **({"E": shared_E} if shared_E is not None else {}))


class MLP(nn.Module):
    def __init__(self, dim, mult=4, dropout=0.0):
        super().__init__()
        self.fc, self.proj = nn.Linear(dim, mult * dim), nn.Linear(mult * dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-norm Transformer block: x + attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, config, layer, shared_E=None):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(config.dim), nn.LayerNorm(config.dim)
        self.attn = make_attention(config, layer, shared_E)
        self.mlp = MLP(config.dim, config.ff_mult, config.dropout)

    def forward(self, x, *, causal):
        x = x + self.attn(self.ln1(x), causal=causal)
        return x + self.mlp(self.ln2(x))

    def step(self, x_t, state=None):
        y, state = self.attn.step(self.ln1(x_t), state)
        x = x_t + y
        return x + self.mlp(self.ln2(x)), state


class TinyLM(nn.Module):
    """A byte-level Transformer LM with a chosen attention per layer (see the module docstring).

    forward(idx, targets=None) -> (logits (B, N, vocab_size), loss or None); targets (B, N) are aligned with
    positions (the data supplies the next-byte shift), IGNORE = -100 marks positions without a loss.
    """

    def __init__(self, config=None):
        super().__init__()
        config = LMConfig() if config is None else config
        kinds = config.layer_attention()
        if config.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {config.positions!r}")
        if config.causal and "linformer" in kinds:
            raise ValueError(CAUSAL_LINFORMER)
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size + 1, config.dim)  # + 1: the MASK_ID row
        self.pos_emb = nn.Embedding(config.block_size, config.dim) if config.positions == "learned" else None
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList()
        shared_E = None
        for layer in range(config.depth):
            self.blocks.append(Block(config, layer, shared_E))
            if (config.linformer_sharing == "layerwise" and shared_E is None and kinds[layer] == "linformer"
                    and config.linformer_projection != "mean"):  # mean pooling has no learned E to share
                shared_E = self.blocks[-1].attn.E  # one E for the whole model (Linformer §4)
        self.ln_f = nn.LayerNorm(config.dim)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)
        self.rotary = Rotary(config.head_dim()) if config.positions == "rope" else None
        for block in self.blocks:  # GLA, DeltaNet, Gated DeltaNet take none: their positions come from the recurrence
            if getattr(block.attn, "takes_rotary", True):
                block.attn.rotary = self.rotary
        if config.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {config.init!r}")
        self.apply(self._init_weights if config.init == "fan_in" else self._init_weights_gpt2)
        for block in self.blocks:  # GPT-2: the residual projections scaled down by 1/√(2·depth)
            for proj in (block.attn.to_out, block.mlp.proj):
                std = proj.in_features ** -0.5 if config.init == "fan_in" else 0.02
                nn.init.normal_(proj.weight, std=std / math.sqrt(2 * config.depth))

    @staticmethod
    def _init_weights(module):
        # init="fan_in" (the default): embeddings N(0, 1) (as nn.Embedding and nn.TransformerEncoder have), Linear
        # weights N(0, 1/fan_in), zero biases, residual projections further scaled by 1/√(2·depth) (GPT-2).
        # Linformer's E/F and Performer's projection are not Linear/Embedding: untouched. Measured at the default
        # shape (L=256, d=128, 2 layers, batch 16, 600 steps, sdpa, one seed), val bits/byte under recipe plain
        # (constant lr 3e-3, no warm-up) / cosine (warm-up + cosine) at lr 3e-3 / cosine at lr 1e-2:
        #   init="gpt2" (every weight N(0, 0.02))           3.19 / 2.46 / 2.30
        #   N(0, 1) embeddings, Linear N(0, 0.02)           2.57 / 2.93 / 2.53
        #   init="fan_in"                                   2.27 / 2.62 / 2.13
        # An early Adam step moves each weight by about lr (3e-3): 15% of a 0.02 weight, 3% of a 1/√128 one; the
        # GPT-2 init only trained well behind a warm-up. results/reference/ holds the comparison with
        # nn.TransformerEncoder over recipes and seeds (notebook 07 shows it).
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=module.in_features ** -0.5)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=1.0)

    @staticmethod
    def _init_weights_gpt2(module):
        # init="gpt2" (GPT-2 / nanoGPT): every Linear and Embedding weight N(0, 0.02²), zero biases; the residual
        # projections 0.02/√(2·depth). It needs a learning-rate warm-up (see _init_weights); notebook 08's
        # experiments were designed with it.
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def embed(self, idx, offset=0):
        if idx.dtype != torch.long or idx.ndim != 2:
            raise ValueError(f"idx must be a (batch, seq) long tensor of byte ids, got {idx.dtype} {tuple(idx.shape)}")
        x = self.tok_emb(idx)  # (B, N, dim)
        if self.pos_emb is not None:
            n = idx.shape[1]
            if offset + n > self.config.block_size:
                raise ValueError(f"position {offset + n - 1} is past block_size={self.config.block_size} "
                                 f"(learned positions); crop the input or use positions='rope'")
            x = x + self.pos_emb(torch.arange(offset, offset + n, device=idx.device))
        return self.drop(x)

    def forward(self, idx, targets=None):
        n = idx.shape[1]
        if n > self.config.block_size and (self.pos_emb is not None or "linformer" in self.config.layer_attention()):
            raise ValueError(f"sequence length {n} > block_size={self.config.block_size}")
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x, causal=self.config.causal)
        logits = self.head(self.ln_f(x))  # (B, N, vocab)
        return logits, (None if targets is None else lm_loss(logits, targets))

    def can_step(self):
        """Can every layer decode token by token (exact/sdpa with a cache, Performer with its state)?"""
        return self.config.causal and all(block.attn.recurrent for block in self.blocks)

    def step(self, idx_t, state=None):
        """Consume one token per sequence: idx_t (B,) -> (logits (B, vocab), state); state=None starts.

        Performer, linear and the gated layers keep a fixed-size state, exact layers a key/value cache. Feeding
        x[:, 0], x[:, 1], ... gives the same logits as forward(x) at each position (asserted in tests/test_model.py).
        """
        if not self.can_step():
            kinds = self.config.layer_attention()
            can = ", ".join(n for n, v in VARIANTS.items() if v.recurrent)
            raise ValueError(f"step needs a causal model whose every layer can decode incrementally "
                             f"({can}); got causal={self.config.causal}, attention={kinds}")
        position = 0 if state is None else state["position"]
        layers = [None] * len(self.blocks) if state is None else state["layers"]
        x = self.embed(idx_t[:, None], offset=position)  # (B, 1, dim)
        new_layers = []
        for block, s in zip(self.blocks, layers):
            x, s = block.step(x, s)
            new_layers.append(s)
        logits = self.head(self.ln_f(x))[:, 0]  # (B, vocab)
        return logits, {"position": position + 1, "layers": new_layers}

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, *, temperature=1.0, top_k=None, generator=None, recurrent=None):
        """Sample max_new_tokens bytes after the prompt idx (B, T) -> (B, T + max_new_tokens).

        recurrent=True: feed tokens one at a time through `step` (Performer: constant memory per token);
        False: re-run the model on the whole prefix (cropped to block_size) for every new token; None: recurrent
        when every layer supports it. temperature=0 is greedy; top_k keeps the k likeliest bytes.
        Sampling draws from `generator`, so the two modes give the same text (tests/test_model.py).
        """
        if not self.config.causal:
            raise ValueError("generate needs a causal model (causal=True); a masked LM fills in MASK_ID slots instead")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if recurrent is None:  # a recurrent decoder cannot slide learned positions past block_size
            recurrent = self.can_step() and (self.pos_emb is None
                                             or idx.shape[1] + max_new_tokens <= self.config.block_size)
        was_training = self.training
        self.eval()
        out = idx
        if recurrent:
            logits, state = None, None
            for t in range(idx.shape[1]):
                logits, state = self.step(idx[:, t], state)
        for i in range(max_new_tokens):
            if not recurrent:
                logits = self(out[:, -self.config.block_size:])[0][:, -1]  # (B, vocab)
            nxt = sample_next(logits, temperature=temperature, top_k=top_k, generator=generator)  # (B,)
            out = torch.cat([out, nxt[:, None]], dim=1)
            if recurrent and i + 1 < max_new_tokens:
                logits, state = self.step(nxt, state)
        self.train(was_training)
        return out


def sample_next(logits, *, temperature=1.0, top_k=None, generator=None):
    """logits (B, V) -> (B,) sampled ids; temperature 0 = argmax; top_k keeps the k likeliest (k >= 1)."""
    if not (temperature >= 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a positive int or None (no cut), got {top_k!r}")
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if generator is not None and not same_device(generator.device, probs.device):
        gen_device = canonical_device(generator.device)  # multinomial draws on the generator's device
        return torch.multinomial(probs.to(gen_device), 1, generator=generator)[:, 0].to(probs.device)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def lm_loss(logits, targets):
    """Mean cross-entropy in nats over positions whose target is not IGNORE: logits (B, N, V), targets (B, N)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                           ignore_index=IGNORE)


def count_parameters(model):
    """Trainable parameters (buffers such as Performer's projection do not count)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ---- reference models ----------------------------------------------------------------------------------

class TransformerEncoderLM(nn.Module):
    """The reference baseline: PyTorch's own nn.TransformerEncoder as a causal byte LM.

    Token + learned position embeddings, depth × nn.TransformerEncoderLayer under the square causal mask,
    a linear head; PyTorch's default init. pytorch_defaults=False (arch "torch-encoder"): TinyLM's block
    shape — feed-forward ff_mult·dim, GELU, pre-norm, config.dropout, a final LayerNorm — so the two differ
    only in code. pytorch_defaults=True (arch "torch-encoder-defaults"): the layer as PyTorch constructs it
    with only (dim, heads) given — feed-forward 2048, ReLU, post-norm, dropout 0.1.
    """

    def __init__(self, config=None, *, pytorch_defaults=False):
        super().__init__()
        config = LMConfig() if config is None else config
        if not config.causal:
            raise ValueError("TransformerEncoderLM is a causal LM only (the reference baseline); use TinyLM for a masked LM")
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size + 1, config.dim)
        self.pos_emb = nn.Embedding(config.block_size, config.dim)
        if pytorch_defaults:
            layer = nn.TransformerEncoderLayer(config.dim, config.heads, batch_first=True)
        else:
            layer = nn.TransformerEncoderLayer(config.dim, config.heads, config.ff_mult * config.dim,
                                               dropout=config.dropout, activation="gelu", batch_first=True,
                                               norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.depth, enable_nested_tensor=False)
        self.ln_f = nn.Identity() if pytorch_defaults else nn.LayerNorm(config.dim)  # post-norm ends normalised
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        n = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(n, device=idx.device))
        causal = nn.Transformer.generate_square_subsequent_mask(n, device=idx.device)  # (N, N) -inf above diag
        x = self.encoder(x, mask=causal, is_causal=True)
        logits = self.head(self.ln_f(x))
        return logits, (None if targets is None else lm_loss(logits, targets))


class LinearAttentionTransformerBaseline(nn.Module):
    """The library baseline: `linear-attention-transformer` 0.19.1's LinearAttentionTransformerLM.

    Its global heads compute efficient attention (Shen et al., arXiv 1812.01243); causal=True uses its
    `causal_linear_attn` (φ_q = softmax over features, φ_k = exp). Sizes from LMConfig; positions: learned
    absolute (use_axial_pos_emb=False) or its rotary embedding. Wrapped to TinyLM's (logits, loss) interface;
    the extra output class for MASK_ID is dropped.
    """

    def __init__(self, config=None):
        super().__init__()
        from linear_attention_transformer import LinearAttentionTransformerLM
        config = LMConfig() if config is None else config
        self.config = config
        self.net = LinearAttentionTransformerLM(
            num_tokens=config.vocab_size + 1, dim=config.dim, depth=config.depth, max_seq_len=config.block_size,
            heads=config.heads, dim_head=config.head_dim(), causal=config.causal,
            ff_dropout=config.dropout, attn_layer_dropout=config.dropout,
            use_axial_pos_emb=False, use_rotary_emb=config.positions == "rope")

    def forward(self, idx, targets=None):
        logits = self.net(idx)[..., : self.config.vocab_size]  # (B, N, vocab)
        return logits, (None if targets is None else lm_loss(logits, targets))


def _no_mixing(q, k, v, *, mask=None, causal=False):
    return v.new_zeros(*q.shape[:-1], v.shape[-1])  # (B, H, N, Dv): no query reads any key


class AttentionOffLM(TinyLM):
    """The baseline that reads no context: TinyLM with exact (sdpa) attention whose every mixing step returns zeros.

    The weights are those of TinyLM(attention="sdpa") for the same seed (the same parameters and the same draws);
    only `mix` differs. Each position still sees its own byte through the residual stream, so this model can
    learn at best a bigram: "the model uses its context" has to beat it, not just the unigram entropy.
    `step` and `generate` work (the key/value cache fills but is never read).
    """

    def __init__(self, config=None):
        config = LMConfig() if config is None else config
        super().__init__(replace(config, attention="sdpa"))
        for block in self.blocks:
            block.attn.mix = _no_mixing


ARCHS = {"tinylm": TinyLM, "attention-off": AttentionOffLM, "torch-encoder": TransformerEncoderLM,
         "torch-encoder-defaults": lambda config: TransformerEncoderLM(config, pytorch_defaults=True),
         "linear-attention-transformer": LinearAttentionTransformerBaseline}


def build_model(config, arch="tinylm"):
    """A model by architecture name (ARCHS) from an LMConfig."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose from {sorted(ARCHS)}")
    return ARCHS[arch](config)
