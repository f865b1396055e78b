"""Adapters to the third-party libraries: move weights between their modules and ours, so that equality of
outputs and gradients can be asserted (float64). Each adapter names the peer class and version it targets.

Peers: `linformer` 0.2.3 (LinformerSelfAttention), `performer-pytorch` 1.1.4 (FastAttention),
`linear-attention-transformer` 0.19.1 (SelfAttention, LinearAttentionTransformer).
"""

# ---- linformer (package `linformer`) ----

# ---- performer-pytorch ----

# ---- linear-attention-transformer ----
