# Linear regression, 100 x 3, 1000 epochs of full-batch SGD (bench_train.sh).
import sys, time
import torch

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads())
torch.manual_seed(0)
x = torch.randn(100, 3)
y = x @ torch.tensor([[2.0], [-3.0], [0.5]]) + 1.0 + 0.1 * torch.randn(100, 1)
model = torch.nn.Linear(3, 1)
loss_fn = torch.nn.MSELoss()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
t0 = time.perf_counter()
for epoch in range(1000):
    loss = loss_fn(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
t = time.perf_counter() - t0
print("time", t, "loss", loss.item())
