"""FusedAdamStep (learners/adam_step.py): the step of the fused torch Adam it shortcuts, bit for bit, and the
optimiser's own step wherever the shortcut would not be that."""

from __future__ import annotations

import io

import torch
from torch import nn

from pzasync.learners.adam_step import FusedAdamStep
from pzasync.learners.networks import adam


def pair():
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    b = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    b.load_state_dict(a.state_dict())
    return a, b


def set_grads(net: nn.Module, seed: int) -> None:
    """The same gradients for a given seed, written into the existing `.grad` tensors where there are some."""
    gen = torch.Generator().manual_seed(seed)
    for p in net.parameters():
        g = torch.randn(p.shape, generator=gen)
        if p.grad is None:
            p.grad = g
        else:
            p.grad.copy_(g)


def assert_same(opt_a, opt_b, net_a, net_b) -> None:
    for x, y in zip(net_a.parameters(), net_b.parameters()):
        assert torch.equal(x, y)
    state_a, state_b = opt_a.state_dict()["state"], opt_b.state_dict()["state"]
    assert state_a.keys() == state_b.keys()
    for key in state_a:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(state_a[key][name], state_b[key][name]), name


def counting_step(opt) -> list[int]:
    calls = []
    step = opt.step
    opt.step = lambda *args, **kwargs: (calls.append(1), step(*args, **kwargs))[1]
    return calls


def test_the_shortcut_takes_the_optimizers_steps_bit_for_bit_and_follows_the_learning_rate():
    net_a, net_b = pair()
    opt_a, opt_b = adam(net_a.parameters(), 1e-2), adam(net_b.parameters(), 1e-2)
    fast = FusedAdamStep(opt_b)
    through = counting_step(opt_b)
    for seed in range(6):
        if seed == 3:
            for opt in (opt_a, opt_b):
                opt.param_groups[0]["lr"] = 3e-3
        set_grads(net_a, seed)
        set_grads(net_b, seed)
        opt_a.step()
        fast()
        assert_same(opt_a, opt_b, net_a, net_b)
    assert len(through) == 1  # only the first step went through the optimiser (it makes the state)
    assert opt_b.state_dict()["state"][0]["step"] == 6


def test_a_loaded_state_new_gradients_or_a_hook_send_the_step_through_the_optimizer():
    net_a, net_b = pair()
    opt_a, opt_b = adam(net_a.parameters(), 1e-2), adam(net_b.parameters(), 1e-2)
    fast = FusedAdamStep(opt_b)
    through = counting_step(opt_b)
    for seed in range(2):
        set_grads(net_a, seed)
        set_grads(net_b, seed)
        opt_a.step()
        fast()
    saved = io.BytesIO()
    torch.save(opt_b.state_dict(), saved)  # the step counts are views of one tensor: they save and load
    saved.seek(0)
    opt_b.load_state_dict(torch.load(saved))
    opt_b.zero_grad(set_to_none=True)
    hooked = []
    for seed in range(2, 7):
        if seed == 5:
            handle = opt_b.register_step_pre_hook(lambda *args: hooked.append(1))
        if seed == 6:
            handle.remove()
        set_grads(net_a, seed)
        set_grads(net_b, seed)
        opt_a.step()
        fast()
        assert_same(opt_a, opt_b, net_a, net_b)
    assert hooked == [1]
    # The first step, the one after the load (and new gradients) and the hooked one; then the shortcut again.
    assert len(through) == 3
