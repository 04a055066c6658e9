# Linear regression with hand-written gradients in NumPy: the fallback of
# bench_train.sh where PyTorch is not installed. Same sizes as linreg.py.
import time
import numpy as np

rng = np.random.default_rng(0)
x = rng.standard_normal((100, 3)).astype(np.float32)
y = x @ np.array([[2.0], [-3.0], [0.5]], np.float32) + 1.0 + 0.1 * rng.standard_normal((100, 1)).astype(np.float32)
bound = 1 / np.sqrt(3)
w = rng.uniform(-bound, bound, (1, 3)).astype(np.float32)
b = rng.uniform(-bound, bound, (1,)).astype(np.float32)
t0 = time.perf_counter()
for epoch in range(1000):
    err = x @ w.T + b - y
    loss = np.mean(err * err)
    g = 2 * err / err.size
    w -= 0.05 * (g.T @ x)
    b -= 0.05 * g.sum(0)
t = time.perf_counter() - t0
print("time", t, "loss", float(loss))
