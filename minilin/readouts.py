"""Notebook 08's readout probes: how many letters a linear and a small MLP readout recover from the token weights of
a one-block copying model's answer slots (`limits.model_map`), beside the model's own accuracy."""
import torch

from minilin.limits import model_map


def answer_token_weights(model, x, span):
    """Each answer slot's token weights in a one-block model on inputs x (B, n) of a copy of `span` letters: every
    head's answer row of its map (`effective_map`) times the one-hot tokens of the whole input, i.e. how much weight
    the slot puts on each token. Returns (features (B * span, H * T) float64, letters (B * span,)), T the model's
    tokens (its embedding's rows, MASK included), letters the slots' answers."""
    T = model.tok_emb.num_embeddings
    one_hot = torch.nn.functional.one_hot(x.cpu(), T)[:, None].double()           # (B, 1, n, T)
    weights = model_map(model, x)[:, :, -span:, :] @ one_hot                      # (B, H, S, T)
    return weights.permute(0, 2, 1, 3).reshape(-1, weights.shape[1] * weights.shape[3]), x[:, :span].reshape(-1).cpu()


def probe_readouts(train, test, *, hidden=256, steps=1500, seed=0):
    """Fit two readouts of classes from features, train = (X, y), and score both on test = (X, y): a logistic
    (linear) readout (L-BFGS) and a one-hidden-layer MLP (`hidden` GELU units, Adam, batches of 512), both on
    features standardised by the training set (features constant there are dropped). Returns {"linear": accuracy,
    "mlp": accuracy}."""
    (X, y), (Xt, yt) = train, test
    varies = X.std(0) > 0
    X, Xt = X[:, varies], Xt[:, varies]
    classes, y_all = torch.unique(torch.cat([y, yt]), return_inverse=True)
    y, yt = y_all[:len(y)], y_all[len(y):]
    mu, sd = X.mean(0), X.std(0) + 1e-9
    X, Xt = ((X - mu) / sd).double(), ((Xt - mu) / sd).double()
    acc = lambda f: float((f(Xt).argmax(-1) == yt).double().mean())
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        linear = torch.nn.Linear(X.shape[1], len(classes)).double()
        mlp = torch.nn.Sequential(torch.nn.Linear(X.shape[1], hidden), torch.nn.GELU(),
                                  torch.nn.Linear(hidden, len(classes))).double()
        opt = torch.optim.LBFGS(linear.parameters(), max_iter=200)

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(linear(X), y)
            loss.backward()
            return loss
        opt.step(closure)
        adam = torch.optim.Adam(mlp.parameters(), 1e-3)
        for _ in range(steps):
            i = torch.randint(len(X), (512,))
            loss = torch.nn.functional.cross_entropy(mlp(X[i]), y[i])
            adam.zero_grad()
            loss.backward()
            adam.step()
        with torch.no_grad():
            return {"linear": acc(linear), "mlp": acc(mlp)}


def readout_probe(model, task, *, n_train=512, n_test=64, device="cpu", **fit):
    """Notebook 08's probe: how many letters a linear and an MLP readout recover from a one-block model's answer-slot
    token weights (`answer_token_weights`), fitted on n_train validation inputs (generator seed 11) and scored on
    n_test others (seed 12) (`probe_readouts`). Returns {"linear", "mlp", "model"}: "model" is the model's own
    accuracy on the same n_test inputs."""
    x, _ = task.batch("val", n_train, generator=torch.Generator().manual_seed(11))
    xt, yt = task.batch("val", n_test, generator=torch.Generator().manual_seed(12))
    model = model.to(device).eval()
    out = probe_readouts(answer_token_weights(model, x.to(device), task.span_len),
                         answer_token_weights(model, xt.to(device), task.span_len), **fit)
    with torch.no_grad():
        logits = model(xt.to(device))[0][:, -task.span_len:].argmax(-1).cpu()
    return {**out, "model": float((logits == yt[:, -task.span_len:]).double().mean())}
