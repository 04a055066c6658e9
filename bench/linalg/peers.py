"""The same linalg calls in NumPy and PyTorch (f32, one thread): best of 5
rounds, ms per call. Usage: python3 bench/linalg/peers.py"""
import time
import warnings

import numpy as np

warnings.simplefilter("ignore")  # det of 1024 x 1024 overflows f32, as in Hodu


def best_ms(f, a, calls):
    best = 1e30
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            f(a)
        best = min(best, (time.perf_counter() - t0) * 1000.0 / calls)
    return best


def run(name, lib):
    rng = np.random.default_rng(0)
    for n in (64, 256, 1024):
        x = rng.standard_normal((n, n)).astype(np.float32)
        spd = x @ x.T + np.eye(n, dtype=np.float32) * n
        b = rng.standard_normal((n, 1)).astype(np.float32)
        calls = 2 if n == 1024 else 10 if n == 256 else 100
        if lib == "torch":
            import torch
            x, spd, b = torch.from_numpy(x), torch.from_numpy(spd), torch.from_numpy(b)
            la = torch.linalg
            fs = {"inv": la.inv, "solve": lambda m: la.solve(m, b), "det": la.det,
                  "cholesky": la.cholesky, "qr": la.qr,
                  "svd": lambda m: la.svd(m, full_matrices=False), "eigh": la.eigh}
        else:
            la = np.linalg
            fs = {"inv": la.inv, "solve": lambda m: la.solve(m, b), "det": la.det,
                  "cholesky": la.cholesky, "qr": la.qr,
                  "svd": lambda m: la.svd(m, full_matrices=False), "eigh": la.eigh}
        for op, f in fs.items():
            m = spd if op in ("cholesky", "eigh") else x
            print(f"{name} n={n} {op} {best_ms(f, m, calls):.3f}")


run("numpy " + np.__version__, "numpy")
try:
    import torch
    torch.set_num_threads(1)
    run("torch " + torch.__version__, "torch")
except ImportError:
    print("torch not installed: pip install torch for its figures")
