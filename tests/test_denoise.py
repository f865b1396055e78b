"""The denoising task and model of notebooks 02 and 03: data, shapes, determinism, a model that learns."""
import pytest
import torch

from minilin.attention import MultiHeadSelfAttention, attention_matrix
from minilin.denoise import Denoiser, held_out_mse, smooth_signal_batch, train_denoiser
from minilin.linformer import LinformerSelfAttention


def exact(dim, heads):
    return MultiHeadSelfAttention(dim, heads)


def test_signal_batch_is_clean_plus_noise_of_the_stated_variance():
    noisy, clean = smooth_signal_batch(4096, 64, torch.Generator().manual_seed(0), noise=0.5)
    assert noisy.shape == clean.shape == (4096, 64)
    assert abs(clean.var().item() - 1.0) < 0.05                      # unit variance, as documented
    assert abs((noisy - clean).var().item() - 0.25) < 0.01           # noise² = the trivial baseline's MSE
    again, _ = smooth_signal_batch(4096, 64, torch.Generator().manual_seed(0), noise=0.5)
    assert torch.equal(noisy, again)


def test_attention_maps_are_the_layers_softmax_matrices():
    torch.manual_seed(0)
    model = Denoiser(16, exact, layers=2)
    x, _ = smooth_signal_batch(3, 16, torch.Generator().manual_seed(1))
    maps = model.attention_maps(x)
    assert len(maps) == 2 and maps[0].shape == (3, 4, 16, 16)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(3, 4, 16))
    a, z = model.blocks[0].attn, model.blocks[0].ln1(model.embed(x))
    torch.testing.assert_close(maps[0], attention_matrix(a.split_heads(a.to_q(z)), a.split_heads(a.to_k(z))))


def test_training_is_deterministic_and_beats_the_trivial_baseline():
    first = train_denoiser(exact, n=32, steps=150, batch=16, layers=1, seed=3)
    second = train_denoiser(exact, n=32, steps=150, batch=16, layers=1, seed=3)
    assert first.losses == second.losses and first.test_mse == second.test_mse
    untrained = Denoiser(32, exact, layers=1)
    # below the trivial baseline (predict the input: 0.25), which an untrained model does not reach
    assert first.test_mse < 0.21 and held_out_mse(untrained, 32) > 0.25


def test_any_attention_module_plugs_in():
    run = train_denoiser(lambda d, h: LinformerSelfAttention(d, h, seq_len=32, proj_len=4), n=32, steps=5,
                         batch=4, layers=1)
    assert len(run.losses) == 5 and run.test_mse > 0


def test_bad_input_names_the_fix():
    model = Denoiser(16, exact, layers=1)
    with pytest.raises(ValueError, match="larger n"):
        model(torch.zeros(2, 32))
    with pytest.raises(ValueError, match="steps and batch"):
        train_denoiser(exact, steps=0)
