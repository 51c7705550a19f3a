"""Digests of each CPU operation a deep fit is made of, on fixed inputs, one thread: where two
CPUs part, if they do.

    python -m tests.unit.pinned_ops    # prints {operation: digest} as JSON, under the pin

The operations and inputs are those of the project's CPU probe (../shared/cpu-probe/probe.py),
in the same order from the same seed, so that its recordings on other machines compare digest
for digest: oneDNN's convolutions, batch norm, pooling, MKL's matrix products, the element-wise
exp/log/tanh family, sums and an SGD step. Inputs come from numpy's PCG64, the same bits on every
machine; a digest is the SHA-256 prefix of an operation's outputs and gradients.
tests/unit/test_cpu_vendors.py runs it pinned, on this CPU and on emulated ones, and compares.

    python -m tests.unit.pinned_ops linear_4096    # leaves those operations out

An operation left out still draws its inputs, so every other digest stays the same; an emulator
runs the 128 x 4096 x 4096 product (two thirds of a fit's arithmetic here) about a hundred times
slower than the CPU it emulates.
"""

from __future__ import annotations

if __name__ == "__main__":  # before numpy and torch load, as the front doors do
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()

import hashlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

SEED = 20261128


def digests(skip: frozenset[str] = frozenset()) -> dict[str, str]:
    import torch
    import torch.nn.functional as F
    from torch.optim.sgd import sgd

    torch.set_num_threads(1)  # float sums depend on the thread count; one CPU of any machine
    rng = np.random.default_rng(SEED)

    def t(*shape: int, scale: float = 1.0, grad: bool = True) -> torch.Tensor:
        x = np.asarray(rng.standard_normal(shape) * scale, dtype=np.float32)
        return torch.from_numpy(x).requires_grad_(grad)

    def digest(*tensors: torch.Tensor) -> str:
        h = hashlib.sha256()
        for x in tensors:
            h.update(x.detach().contiguous().numpy().tobytes())
        return h.hexdigest()[:16]

    def fwd_bwd(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> str:
        out = fn(*inputs)
        out.backward(t(*out.shape, grad=False))
        return digest(out, *[i.grad for i in inputs if i.requires_grad])

    def conv(padding: int) -> Callable[..., torch.Tensor]:
        return lambda a, k, *bias: F.conv2d(a, k, *bias, padding=padding)

    out = {}
    # CNN-F's convolutions at an eighth of its width on 32x32 (conv1-2 5x5, conv3-5 3x3)
    out["conv5x5_c3"] = fwd_bwd(conv(2), t(16, 3, 32, 32), t(8, 3, 5, 5, scale=0.1))
    out["conv5x5_c8"] = fwd_bwd(conv(2), t(16, 8, 16, 16), t(32, 8, 5, 5, scale=0.1))
    out["conv3x3_bias"] = fwd_bwd(conv(1), t(16, 32, 8, 8), t(32, 32, 3, 3, scale=0.1), t(32))
    out["conv3x3_c64"] = fwd_bwd(conv(1), t(16, 64, 8, 8), t(64, 64, 3, 3, scale=0.05))
    out["batchnorm_train"] = fwd_bwd(
        lambda a: F.batch_norm(a, None, None, training=True), t(16, 32, 16, 16)
    )
    out["maxpool2"] = fwd_bwd(lambda a: F.max_pool2d(a, 2), t(16, 32, 16, 16))
    out["relu"] = fwd_bwd(F.relu, t(16, 32, 16, 16))
    # the fully connected layers and the hashing head
    out["linear_512"] = fwd_bwd(F.linear, t(64, 512), t(512, 512, scale=0.05), t(512))
    out["linear_head"] = fwd_bwd(F.linear, t(64, 256), t(48, 256, scale=0.05), t(48))
    big = t(128, 4096), t(4096, 4096, scale=0.01), t(4096)
    if "linear_4096" in skip:
        t(128, 4096, grad=False)  # the output's gradient fwd_bwd would draw
    else:
        out["linear_4096"] = fwd_bwd(F.linear, *big)
    # the losses' pieces: inner products of codes, log(1 + exp), tanh, sums
    out["code_gram"] = fwd_bwd(lambda a: a @ a.t(), t(128, 48))
    z = t(128, 128, scale=8.0)
    out["softplus"] = fwd_bwd(F.softplus, z)
    out["log1p_exp"] = fwd_bwd(lambda a: torch.log1p(torch.exp(-a.abs())) + a.clamp(min=0), z)
    out["tanh"] = fwd_bwd(torch.tanh, t(128, 48, scale=3.0))
    out["sigmoid"] = fwd_bwd(torch.sigmoid, t(128, 128, scale=4.0))
    out["exp_log"] = fwd_bwd(lambda a: torch.log(torch.exp(a) + 1.0), t(4096, scale=3.0))
    out["sum"] = digest(t(1 << 20, grad=False).sum(), t(1000, 1000, grad=False).sum(dim=1))
    out["mean_sq"] = fwd_bwd(lambda a: (a * a).mean(), t(4096, 48))
    # three SGD steps with momentum and weight decay: torch.optim.SGD's arithmetic through its
    # functional form, which, unlike the class, does not import torch._dynamo (a quarter of
    # this module's time under an emulator)
    p = torch.nn.Parameter(t(4096, grad=False))
    momentum_buffers: list[torch.Tensor | None] = [None]
    for _ in range(3):
        p.grad = None
        (p.sin() * p).sum().backward()
        with torch.no_grad():
            sgd(
                [p],
                [p.grad],
                momentum_buffers,
                lr=0.01,
                momentum=0.9,
                weight_decay=5e-4,
                dampening=0.0,
                nesterov=False,
                maximize=False,
            )
    out["sgd_momentum"] = digest(p)
    return out


if __name__ == "__main__":
    print(json.dumps(digests(frozenset(sys.argv[1:])), sort_keys=True))
