"""Offline data for the tiny language model: a byte tokenizer, text corpora, batches, synthetic tasks.

Everything here runs without a network: the default corpus is the English documentation Python ships
(`pydoc_data.topics` of Python 3.11.7, about 466k bytes, kept in `pydoc_topics.txt.gz` beside this file because the
topics change between Python releases; © Python Software Foundation, PSF License), any UTF-8 file can replace it, and two synthetic tasks
(associative recall, span copying) are generated on the fly from a `torch.Generator`.

Tokens are bytes: ids 0..255 are the UTF-8 bytes of the text (so the vocabulary is 256 and the round trip
text -> bytes -> text is lossless), and one extra id, MASK_ID = 256, marks a hidden position (masked-LM
corruption, the answer slots of the synthetic tasks). Models embed 257 ids and predict 256 bytes.

Every batch is a pair (x, targets) of (B, L) long tensors with targets aligned to positions: the loss at
position t compares the model's output at t with targets[t]; IGNORE = -100 marks positions without a loss
(`F.cross_entropy(..., ignore_index=-100)`). For the causal LM the shift lives here: targets[t] = x[t + 1].
"""
import gzip
import hashlib
import math
from pathlib import Path

import torch

VOCAB_SIZE = 256          # byte values, the classes a model predicts
MASK_ID = 256             # an extra input id: a hidden position ([MASK] in BERT)
IGNORE = -100             # target value without a loss (PyTorch's default ignore_index)
MASK_TEXT = "\u2588"      # how decode() shows MASK_ID ("█")
SPLITS = ("train", "val")


def encode(text):
    """Text -> (N,) long tensor of its UTF-8 bytes (ids 0..255)."""
    if not isinstance(text, str):
        raise TypeError(f"encode expects a str, got {type(text).__name__}; for bytes use torch.tensor(list(b))")
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def decode(ids, errors="replace"):
    """Ids (any shape, flattened) -> text. decode(encode(s)) == s for every str s.

    Sampled bytes need not form valid UTF-8: by default invalid sequences become U+FFFD, as a text editor
    would show them (errors="strict" raises instead). MASK_ID is shown as MASK_TEXT.
    """
    ids = torch.as_tensor(ids).flatten().tolist()
    bad = [i for i in ids if not 0 <= i <= MASK_ID]
    if bad:
        raise ValueError(f"ids must lie in 0..{MASK_ID} (bytes and MASK_ID), got {bad[:5]}")
    out, run = [], []
    for i in ids + [MASK_ID]:  # MASK_ID is not a byte: flush the byte run before it
        if i == MASK_ID:
            out.append(bytes(run).decode("utf-8", errors=errors))
            out.append(MASK_TEXT)
            run = []
        else:
            run.append(i)
    return "".join(out)[:-1]  # drop the sentinel's MASK_TEXT


PYDOC_FILE = Path(__file__).with_name("pydoc_topics.txt.gz")
PYDOC_SHA256 = "71f2ff5d99bdc1f9c48c5c2353ad138201c5ca1c377e0226857ef8fa89b8bcee"  # the UTF-8 bytes every stored run used


def pydoc_text():
    """The default corpus: Python 3.11.7's documentation topics (`pydoc_data.topics`, joined by blank lines in sorted
    key order), read from the copy shipped with minilin, so that every Python version trains on the same bytes (the
    topics of 3.11.2, say, are about a thousand bytes longer)."""
    data = gzip.decompress(PYDOC_FILE.read_bytes())
    if hashlib.sha256(data).hexdigest() != PYDOC_SHA256:
        raise RuntimeError(f"{PYDOC_FILE} is not the corpus the stored runs used: restore it from the course's "
                           "repository (git checkout -- minilin/pydoc_topics.txt.gz)")
    return data.decode("utf-8")


def load_text(source="pydoc"):
    """`"pydoc"` (the default corpus) or the path of a UTF-8 text file -> str."""
    if source == "pydoc":
        return pydoc_text()
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(
            f"no corpus named {source!r}: pass 'pydoc' (Python's documentation, shipped with minilin), "
            f"the path of a UTF-8 text file, or a synthetic task ('recall', 'copy')")
    return path.read_text(encoding="utf-8")


def train_val_split(tokens, val_fraction=0.1):
    """Deterministic split: the first (1 - val_fraction) of the stream trains, the tail validates.

    A contiguous split (not random windows) keeps every validation byte unseen in training.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    n_val = int(round(len(tokens) * val_fraction))
    return tokens[: len(tokens) - n_val], tokens[len(tokens) - n_val:]


def random_windows(tokens, batch_size, length, *, generator):
    """(batch_size, length) long tensor of contiguous windows starting at uniform random offsets."""
    if len(tokens) < length:
        raise ValueError(f"the token stream ({len(tokens)} tokens) is shorter than one window ({length}); "
                         f"use a longer corpus or a smaller block_size")
    starts = torch.randint(len(tokens) - length + 1, (batch_size,), generator=generator)  # (B,)
    index = starts[:, None] + torch.arange(length)  # (B, length)
    return tokens[index].long()


def next_token_batch(tokens, batch_size, block_size, *, generator):
    """Causal-LM batch: x (B, L) and targets (B, L) with targets[:, t] = x[:, t + 1] (the shift)."""
    window = random_windows(tokens, batch_size, block_size + 1, generator=generator)  # (B, L + 1)
    return window[:, :-1], window[:, 1:]


def mask_tokens(tokens, *, generator, mask_prob=0.15, vocab_size=VOCAB_SIZE, mask_id=MASK_ID):
    """BERT's corruption (Devlin et al. 2018, arXiv 1810.04805, §3.1; Linformer's MLM pretraining too).

    Each position is selected with probability mask_prob; a selected position becomes MASK_ID with prob.
    0.8, a uniformly random byte with prob. 0.1, and stays unchanged with prob. 0.1. Returns
    (corrupted (B, L), targets (B, L)) with targets = the original byte at selected positions, IGNORE elsewhere.
    """
    if not 0.0 < mask_prob <= 1.0:
        raise ValueError(f"mask_prob must be in (0, 1], got {mask_prob}")
    selected = torch.rand(tokens.shape, generator=generator) < mask_prob
    action = torch.rand(tokens.shape, generator=generator)  # < 0.8 mask, < 0.9 random, else keep
    random_bytes = torch.randint(vocab_size, tokens.shape, generator=generator)
    corrupted = torch.where(selected & (action < 0.8), torch.full_like(tokens, mask_id), tokens)
    corrupted = torch.where(selected & (action >= 0.8) & (action < 0.9), random_bytes, corrupted)
    targets = torch.where(selected, tokens, torch.full_like(tokens, IGNORE))
    return corrupted, targets


def masked_lm_batch(tokens, batch_size, block_size, *, generator, mask_prob=0.15):
    """Masked-LM batch: corrupted windows (B, L) and targets (B, L) (IGNORE where not selected)."""
    window = random_windows(tokens, batch_size, block_size, generator=generator)
    return mask_tokens(window, generator=generator, mask_prob=mask_prob)


class ByteCorpus:
    """A byte-level text corpus split into train/val, serving random contiguous batches.

    objective="clm": next-byte targets (the causal LM; only a causal model may train on it).
    objective="mlm": BERT-style masked positions (for bidirectional models such as Linformer).
    """

    requires_causal_model = property(lambda self: self.objective == "clm")

    def __init__(self, source="pydoc", *, text=None, block_size=256, objective="clm", val_fraction=0.1,
                 mask_prob=0.15):
        """source: 'pydoc' or a UTF-8 file path; or pass the text itself as `text` (source is then its name)."""
        if objective not in ("clm", "mlm"):
            raise ValueError(f"objective must be 'clm' (next byte) or 'mlm' (masked bytes), got {objective!r}")
        if text is None:
            text = load_text(source)
            source = source if source == "pydoc" else Path(source).name
        self.name = str(source)
        self.block_size, self.objective, self.mask_prob = block_size, objective, mask_prob
        self.tokens = torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).clone()  # 1 byte each
        self.train, self.val = train_val_split(self.tokens, val_fraction)
        for split, part in (("train", self.train), ("val", self.val)):
            if len(part) < block_size + 1:
                raise ValueError(f"the {split} split has {len(part)} bytes, fewer than block_size + 1 = "
                                 f"{block_size + 1}; use a longer text or a smaller block_size")

    def batch(self, split, batch_size, *, generator, device="cpu"):
        """(x, targets), both (batch_size, block_size) long tensors on `device`."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        tokens = self.train if split == "train" else self.val
        if self.objective == "clm":
            x, y = next_token_batch(tokens, batch_size, self.block_size, generator=generator)
        else:
            x, y = masked_lm_batch(tokens, batch_size, self.block_size, generator=generator,
                                   mask_prob=self.mask_prob)
        return x.to(device), y.to(device)

    def __repr__(self):
        return (f"ByteCorpus({self.name!r}, {len(self.tokens):,} bytes, block_size={self.block_size}, "
                f"objective={self.objective!r})")


# ---- synthetic tasks: attention must be sharp to solve them ----
# Both tasks score only answer positions whose answer appears nowhere after them, so the same batch trains a
# causal model and a bidirectional one (exact, Performer and Linformer on one footing); the loss and the
# accuracy cover those positions only (targets IGNORE elsewhere). Symbols are printable bytes, so `decode`
# shows a sequence as text.

KEYS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
VALUES = "0123456789"
FILLER = "."
COPY_MARK = "="
FUSED_IDS = 128  # bytes 128..255 (never ASCII text) encode a fused (key, value) pair


def _ids(chars):
    return torch.tensor([ord(c) for c in chars], dtype=torch.long)


class AssociativeRecall:
    """Key-value recall across a long gap (multi-query associative recall, Zoology, arXiv 2312.04927).

    Layout of one sequence (seq_len tokens), fused=True (default):
        [k1=v1] [k2=v2] ... [kP=vP]  . . . . (filler) . . . .  q1 q2 ... qQ
    Each pair is ONE token (a byte >= 128 that encodes the key and its value; `show` prints it as
    "[k=v]"); then Q queries, each a key (a letter) of the pairs, scored at the query's own position on
    that key's value (a digit). fused=False writes every pair as two tokens, key then value:
        k1 v1 k2 v2 ... kP vP  . . . .  q1 q2 ... qQ
    Nothing after a query reveals its answer, so causal and bidirectional models see the same evidence.
    Either way a query must find the one position (out of seq_len) that holds its key: a sharp, content-
    based lookup. With split pairs it must also read the *next* token, a two-layer induction circuit that
    small models learn only after a long plateau (we measured none in 1500 steps at n=64, d=64); fused
    pairs need one attention step, learned in a few hundred. Chance accuracy is 1 / n_values.
    """

    requires_causal_model = False
    objective = "task"

    def __init__(self, seq_len=256, n_pairs=16, n_queries=None, *, fused=True, n_keys=16, n_values=8):
        n_queries = n_pairs if n_queries is None else n_queries
        if not 1 <= n_pairs <= n_keys <= len(KEYS):
            raise ValueError(f"need 1 <= n_pairs ({n_pairs}) <= n_keys ({n_keys}) <= {len(KEYS)}: "
                             f"keys in one sequence are distinct")
        if not 2 <= n_values <= len(VALUES):
            raise ValueError(f"n_values must be in 2..{len(VALUES)}, got {n_values}")
        if fused and n_keys * n_values > FUSED_IDS:
            raise ValueError(f"fused pairs use the {FUSED_IDS} bytes 128..255: n_keys * n_values = "
                             f"{n_keys * n_values} is too many; lower one of them or use fused=False")
        width = 1 if fused else 2
        if width * n_pairs + n_queries > seq_len:
            raise ValueError(f"{n_pairs} pairs and {n_queries} queries need {width * n_pairs + n_queries} "
                             f"positions, more than seq_len={seq_len}")
        self.seq_len, self.n_pairs, self.n_queries, self.fused = seq_len, n_pairs, n_queries, fused
        self.n_keys, self.n_values = n_keys, n_values
        self.block_size = seq_len
        self.name = f"recall(n={seq_len}, pairs={n_pairs}, queries={n_queries}{'' if fused else ', split'})"

    def batch(self, split, batch_size, *, generator, device="cpu"):
        """(x, targets), both (batch_size, seq_len); targets are IGNORE except at the Q query positions."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        B, P, Q = batch_size, self.n_pairs, self.n_queries
        which_keys = torch.rand(B, self.n_keys, generator=generator).argsort(dim=1)[:, :P]  # (B, P) distinct
        which_values = torch.randint(self.n_values, (B, P), generator=generator)  # (B, P)
        asked = torch.randint(P, (B, Q), generator=generator)  # (B, Q) which pair each query asks about
        keys, values = _ids(KEYS)[which_keys], _ids(VALUES)[which_values]  # (B, P) letters, digits
        x = torch.full((B, self.seq_len), ord(FILLER), dtype=torch.long)
        y = torch.full((B, self.seq_len), IGNORE, dtype=torch.long)
        if self.fused:
            x[:, :P] = 128 + which_keys * self.n_values + which_values  # one byte per (key, value)
        else:
            x[:, 0: 2 * P: 2], x[:, 1: 2 * P: 2] = keys, values
        x[:, self.seq_len - Q:] = keys.gather(1, asked)  # the queries, last Q positions
        y[:, self.seq_len - Q:] = values.gather(1, asked)  # ... scored on their values
        return x.to(device), y.to(device)

    def show(self, ids):
        """A sequence as text, fused pairs written "[k=v]" (decode would show them as U+FFFD)."""
        out = []
        for i in torch.as_tensor(ids).flatten().tolist():
            if self.fused and i >= 128 and i != MASK_ID:
                key, value = divmod(i - 128, self.n_values)
                out.append(f"[{KEYS[key]}={VALUES[value]}]")
            else:
                out.append(decode([i]))
        return "".join(out)

    def __repr__(self):
        return (f"AssociativeRecall(seq_len={self.seq_len}, n_pairs={self.n_pairs}, n_queries={self.n_queries}, "
                f"fused={self.fused})")


class SpanCopy:
    """Copy a span from the start of the sequence to its end (a long-range copying probe).

    Layout:  s1 s2 ... sS  . . . . (filler) . . . .  = █ █ ... █
    S random letters, filler, a copy mark, then S MASK slots whose targets are s1..sS in order. Slot j must
    attend to position j, seq_len - S positions back: sharp and positional. Chance accuracy 1/alphabet.
    """

    requires_causal_model = False
    objective = "task"

    def __init__(self, seq_len=256, span_len=16, *, alphabet=len(KEYS)):
        if 2 * span_len + 1 > seq_len:
            raise ValueError(f"a span of {span_len} needs seq_len >= {2 * span_len + 1}, got {seq_len}")
        if not 2 <= alphabet <= len(KEYS):
            raise ValueError(f"alphabet must be in 2..{len(KEYS)}, got {alphabet}")
        self.seq_len, self.span_len, self.alphabet = seq_len, span_len, alphabet
        self.block_size = seq_len
        self.name = f"copy(n={seq_len}, span={span_len})"

    def batch(self, split, batch_size, *, generator, device="cpu"):
        """(x, targets), both (batch_size, seq_len); targets are IGNORE except at the span_len answer slots."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        S = self.span_len
        span = _ids(KEYS[: self.alphabet])[torch.randint(self.alphabet, (batch_size, S), generator=generator)]
        x = torch.full((batch_size, self.seq_len), ord(FILLER), dtype=torch.long)
        y = torch.full((batch_size, self.seq_len), IGNORE, dtype=torch.long)
        x[:, :S] = span
        x[:, -S - 1] = ord(COPY_MARK)
        x[:, -S:] = MASK_ID
        y[:, -S:] = span
        return x.to(device), y.to(device)

    def __repr__(self):
        return f"SpanCopy(seq_len={self.seq_len}, span_len={self.span_len})"


TASKS = {"recall": AssociativeRecall, "copy": SpanCopy}


def make_data(source="pydoc", *, block_size=256, objective="clm", val_fraction=0.1, mask_prob=0.15):
    """A batch source by name: 'pydoc' or a file path (a ByteCorpus), or 'recall' / 'copy' (a task
    with seq_len = block_size and default sizes)."""
    if source in TASKS:
        return TASKS[source](seq_len=block_size)
    return ByteCorpus(source, block_size=block_size, objective=objective, val_fraction=val_fraction,
                      mask_prob=mask_prob)


def bits(loss_nats):
    """Cross-entropy in nats per token -> bits per token (bits per byte for the byte LM): loss / ln 2."""
    return loss_nats / math.log(2.0)
