"""`optimizer.step()` of a fused torch Adam, without `Optimizer.step`'s per-call bookkeeping.

For the DQN update by hand (dqn.py): on the connect four network one torch thread spends about as long in
`Optimizer.step`'s Python (hooks, profiler records, gathering each parameter's state into lists, grouping the
tensors by device) as in the fused kernel itself. `FusedAdamStep` gathers those lists once and then calls
the op `torch.optim.Adam` calls for `fused=True` (`_fused_adam_`), with the group's current hyperparameters,
after adding one to the step counts (kept as views of one tensor, so that is one add instead of one per
parameter): the arithmetic and the optimiser's state (and its `state_dict`) are exactly those of
`optimizer.step()`. Whenever that shortcut would not be the same step
(several parameter groups, options the fused kernel call here does not pass, hooks, a parameter without a
gradient or state, or a state loaded since), it calls `optimizer.step()` instead.
"""

from __future__ import annotations

import torch
import torch.optim.optimizer as optimizer_module


class FusedAdamStep:
    """Call it instead of `optimizer.step()` for a `torch.optim.Adam(..., fused=True)` on the CPU."""

    def __init__(self, optimizer: torch.optim.Adam) -> None:
        self.optimizer = optimizer
        self._state: object = None
        self._params: list[torch.Tensor] = []
        self._grads: list[torch.Tensor] = []
        self._exp_avgs: list[torch.Tensor] = []
        self._exp_avg_sqs: list[torch.Tensor] = []
        self._steps: list[torch.Tensor] = []
        #: The parameters' step counts, of which their states' "step" tensors are views (one add for all).
        self._step_counts = torch.zeros(0)

    def __call__(self) -> None:
        if not self._ready():
            self.optimizer.step()
            self._gather()
            return
        group = self.optimizer.param_groups[0]
        beta1, beta2 = group["betas"]
        self._step_counts.add_(1)
        torch._fused_adam_(self._params, self._grads, self._exp_avgs, self._exp_avg_sqs, [], self._steps,
                           lr=group["lr"], beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"],
                           eps=group["eps"], amsgrad=False, maximize=False, grad_scale=None, found_inf=None)

    def _ready(self) -> bool:
        """Whether the gathered lists are still the optimiser's state and gradients, and the shortcut its step."""
        opt = self.optimizer
        if opt.state is not self._state or len(opt.state) != len(self._params):
            return False
        # Any step hook (or a torch that keeps them elsewhere, so none can be seen): the optimiser's own step.
        hooks = (getattr(opt, "_optimizer_step_pre_hooks", None), getattr(opt, "_optimizer_step_post_hooks", None),
                 getattr(optimizer_module, "_global_optimizer_pre_hooks", None),
                 getattr(optimizer_module, "_global_optimizer_post_hooks", None))
        if any(h is None or len(h) for h in hooks):
            return False
        return all(p.grad is g for p, g in zip(self._params, self._grads))

    def _gather(self) -> None:
        """Gather the parameters, gradients and state after a step of the optimiser's own; leave the lists empty
        (so the next call steps through the optimiser again) where the shortcut would not be its step."""
        self._state, self._params = None, []
        opt = self.optimizer
        if len(opt.param_groups) != 1 or getattr(opt, "grad_scale", None) is not None \
                or getattr(opt, "found_inf", None) is not None:
            return
        group = opt.param_groups[0]
        plain = {"fused": True, "amsgrad": False, "maximize": False, "capturable": False, "differentiable": False,
                 "decoupled_weight_decay": False}
        if any(group.get(key) != value for key, value in plain.items()) or isinstance(group["lr"], torch.Tensor):
            return
        params = group["params"]
        if any(p.grad is None or p.grad.is_sparse or p.device.type != "cpu" or p not in opt.state for p in params):
            return
        states = [opt.state[p] for p in params]
        self._params, self._grads = list(params), [p.grad for p in params]
        self._exp_avgs = [s["exp_avg"] for s in states]
        self._exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        # One tensor of step counts, each parameter's "step" a view of it: the same values, one add per step.
        self._step_counts = torch.stack([s["step"] for s in states])
        for i, s in enumerate(states):
            s["step"] = self._step_counts[i]
        self._steps = [s["step"] for s in states]
        self._state = opt.state
