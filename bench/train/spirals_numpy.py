# Two-spirals MLP with hand-written gradients and Adam in NumPy: the
# fallback of bench_train.sh where PyTorch is not installed. Same sizes
# and steps as spirals.py.
import math, time
import numpy as np

rng = np.random.default_rng(42)
n = 500
t = np.sqrt(rng.random(n))
theta = t * 3.5 * math.pi
arm = np.stack([t * np.cos(theta), t * np.sin(theta)], 1)
x = (np.concatenate([arm, -arm]) + 0.02 * rng.standard_normal((2 * n, 2))).astype(np.float32)
y = np.concatenate([np.zeros(n, np.int64), np.ones(n, np.int64)])


def linear(fan_in, fan_out):
    bound = 1 / math.sqrt(fan_in)
    return [rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
            rng.uniform(-bound, bound, (fan_out,)).astype(np.float32)]


params = linear(2, 64) + linear(64, 64) + linear(64, 2)
m = [np.zeros_like(p) for p in params]
v = [np.zeros_like(p) for p in params]


def step(xb, yb):
    w1, b1, w2, b2, w3, b3 = params
    h1 = np.maximum(xb @ w1.T + b1, 0)
    h2 = np.maximum(h1 @ w2.T + b2, 0)
    z = h2 @ w3.T + b3
    z = z - z.max(1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    dz = p
    dz[np.arange(len(yb)), yb] -= 1
    dz /= len(yb)
    dh2 = (dz @ w3) * (h2 > 0)
    dh1 = (dh2 @ w2) * (h1 > 0)
    return [dh1.T @ xb, dh1.sum(0), dh2.T @ h1, dh2.sum(0), dz.T @ h2, dz.sum(0)]


t0 = time.perf_counter()
k = 0
for epoch in range(150):
    perm = rng.permutation(2 * n)
    for i in range(0, 2 * n, 100):
        idx = perm[i:i + 100]
        grads = step(x[idx], y[idx])
        k += 1
        for j, g in enumerate(grads):
            m[j] = 0.9 * m[j] + 0.1 * g
            v[j] = 0.999 * v[j] + 0.001 * g * g
            params[j] -= (0.01 / (1 - 0.9 ** k)) * m[j] / (np.sqrt(v[j]) / math.sqrt(1 - 0.999 ** k) + 1e-8)
el = time.perf_counter() - t0
w1, b1, w2, b2, w3, b3 = params
h = np.maximum(np.maximum(x @ w1.T + b1, 0) @ w2.T + b2, 0) @ w3.T + b3
print("time", el, "accuracy", float((h.argmax(1) == y).mean()))
