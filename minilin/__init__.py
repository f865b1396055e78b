"""minilin: exact, Linformer and Performer attention built from scratch, with the tests that prove them."""
from minilin.attention import (
    MultiHeadSelfAttention,
    attention_loops,
    attention_matrix,
    check_attention_inputs,
    softmax_attention,
)
from minilin.probes import future_leakage, influence_matrix

__version__ = "0.1.0"
