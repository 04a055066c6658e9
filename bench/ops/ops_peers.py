"""PyTorch eager peer of ops.hodu: the same ops on f32 [512, 512], us per
op, best of 5 rounds of 100, no_grad, default threads."""
import time

import torch

x = torch.randn(512, 512)
y = torch.randn(512, 512)
yp = torch.rand(512, 512) + 0.5
row = torch.randn(512)
col = torch.randn(512, 1)
c = x > y
idx = torch.randint(0, 512, (512,))
F = torch.nn.functional


def time_op(f):
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(100):
            f()
        best = min(best, (time.perf_counter() - t0) / 100)
    return best * 1e6


ops = [
    ("add", lambda: x + y), ("mul", lambda: x * y), ("div", lambda: x / yp),
    ("maximum", lambda: torch.maximum(x, y)), ("square", lambda: x ** 2),
    ("pow", lambda: yp ** y), ("gt", lambda: x > y), ("where", lambda: torch.where(c, x, y)),
    ("add_row", lambda: x + row), ("mul_col", lambda: x * col), ("add_scalar", lambda: x + 1.5),
    ("sum_all", lambda: x.sum()), ("sum_axis0", lambda: x.sum(0)), ("sum_axis1", lambda: x.sum(1)),
    ("mean_axis1", lambda: x.mean(1)), ("max_axis1", lambda: x.max(1)),
    ("argmax_axis1", lambda: x.argmax(1)), ("var_axis1", lambda: x.var(1)),
    ("logsumexp_axis1", lambda: torch.logsumexp(x, 1)), ("softmax", lambda: torch.softmax(x, -1)),
    ("log_softmax", lambda: torch.log_softmax(x, -1)), ("layer_norm", lambda: F.layer_norm(x, (512,))),
    ("cumsum_axis1", lambda: torch.cumsum(x, 1)), ("sort_axis1", lambda: torch.sort(x, dim=-1, stable=True)),
    ("topk10", lambda: torch.topk(x, 10)), ("transpose_copy", lambda: x.T.contiguous()),
    ("concat0", lambda: torch.cat([x, y], 0)), ("index_rows", lambda: x[idx]),
    ("matmul", lambda: x @ y), ("cast_f16", lambda: x.half()),
]
print("torch", torch.__version__, "threads", torch.get_num_threads())
with torch.no_grad():
    for name, f in ops:
        print(name, "us", time_op(f))
