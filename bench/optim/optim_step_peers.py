"""PyTorch's optimizer steps on the parameters of optim_step.hodu's MLP
784-256-10, gradients set once; us per step, best of 5 rounds of 200;
each optimizer in its default form (foreach) and fused where PyTorch has
it on the cpu (Lion is not in PyTorch)."""
import time

import torch

torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
for p in m.parameters():
    p.grad = torch.randn_like(p)


def time_steps(opt):
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            opt.step()
        best = min(best, (time.perf_counter() - t0) / 200)
    return best * 1e6


makers = [
    ("Adam", lambda **k: torch.optim.Adam(m.parameters(), lr=1e-6, **k)),
    ("AdamW", lambda **k: torch.optim.AdamW(m.parameters(), lr=1e-6, **k)),
    ("SGD", lambda **k: torch.optim.SGD(m.parameters(), lr=1e-6, **k)),
    ("SGD momentum", lambda **k: torch.optim.SGD(m.parameters(), lr=1e-6, momentum=0.9, **k)),
    ("Adagrad", lambda **k: torch.optim.Adagrad(m.parameters(), lr=1e-6, **k)),
    ("RMSprop", lambda **k: torch.optim.RMSprop(m.parameters(), lr=1e-6, **k)),
    (
        "RMSprop centered momentum",
        lambda **k: torch.optim.RMSprop(m.parameters(), lr=1e-6, momentum=0.9, centered=True, **k),
    ),
]
print("torch", torch.__version__, "threads", torch.get_num_threads())
for name, mk in makers:
    line = f"{name} us/step foreach {time_steps(mk()):.1f}"
    try:
        line += f" fused {time_steps(mk(fused=True)):.1f}"
    except (RuntimeError, TypeError) as e:
        line += f" (fused: {e})"
    print(line)
