"""PyTorch eager peer of unary.hodu: the same ops on 203,530 f32 values,
us per op, best of 5 rounds of 200, no_grad, default threads."""
import time

import torch

n = 203530
x = torch.randn(n) * 3
xp = torch.rand(n) * 10 + 0.01


def time_op(f, a):
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            f(a)
        best = min(best, (time.perf_counter() - t0) / 200)
    return best * 1e6


ops = [
    ("neg", torch.neg, x), ("abs", torch.abs, x), ("exp", torch.exp, x),
    ("log", torch.log, xp), ("sqrt", torch.sqrt, xp), ("rsqrt", torch.rsqrt, xp),
    ("tanh", torch.tanh, x), ("sigmoid", torch.sigmoid, x), ("relu", torch.relu, x),
    ("gelu", torch.nn.functional.gelu, x), ("silu", torch.nn.functional.silu, x),
    ("erf", torch.erf, x), ("erfc", torch.erfc, x), ("floor", torch.floor, x),
    ("ceil", torch.ceil, x), ("round", torch.round, x), ("sign", torch.sign, x),
    ("sin", torch.sin, x), ("clamp", lambda a: torch.clamp(a, -1, 1), x),
]
print("torch", torch.__version__, "threads", torch.get_num_threads())
with torch.no_grad():
    for name, f, a in ops:
        print(name, "us", time_op(f, a))
