# Two-spirals MLP 2-64-64-2, Adam, batches of 100 from 1000 points,
# 150 epochs = 1500 steps (bench_train.sh). Batches by randperm and
# indexing, the fastest way in PyTorch for data already in memory.
import math, sys, time
import torch

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads())
torch.manual_seed(42)
n = 500
t = torch.sqrt(torch.rand(n))
theta = t * 3.5 * math.pi
arm = torch.stack([t * torch.cos(theta), t * torch.sin(theta)], 1)
x = torch.cat([arm, -arm]) + 0.02 * torch.randn(2 * n, 2)
y = torch.cat([torch.zeros(n, dtype=torch.long), torch.ones(n, dtype=torch.long)])
model = torch.nn.Sequential(
    torch.nn.Linear(2, 64), torch.nn.ReLU(),
    torch.nn.Linear(64, 64), torch.nn.ReLU(),
    torch.nn.Linear(64, 2),
)
loss_fn = torch.nn.CrossEntropyLoss()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
t0 = time.perf_counter()
for epoch in range(150):
    perm = torch.randperm(2 * n)
    for i in range(0, 2 * n, 100):
        idx = perm[i:i + 100]
        loss = loss_fn(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
el = time.perf_counter() - t0
with torch.no_grad():
    acc = (model(x).argmax(1) == y).float().mean().item()
print("time", el, "accuracy", acc)
