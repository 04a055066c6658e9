"""PyTorch's F.scaled_dot_product_attention on the cpu at the size of
bench/attention/sdpa.hodu: `sdpa_peers.py HEADS L E THREADS [causal]`.
Prints the best of 5 for the forward (no_grad) and for forward and
backward, in ms, or a line saying torch is not installed."""
import sys
import time

heads, l, e, threads = (int(a) for a in sys.argv[1:5])
causal = len(sys.argv) > 5 and sys.argv[5] == "causal"
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch not-installed")
    sys.exit(0)
torch.set_num_threads(threads)
torch.manual_seed(0)
q, k, v = (torch.randn(heads, l, e, requires_grad=True) for _ in range(3))


def run(backward):
    if backward:
        for t in (q, k, v):
            t.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).sum().backward()
    else:
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)


for backward in (False, True):
    run(backward)
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        run(backward)
        best = min(best, time.perf_counter() - t0)
    what = "fwd+bwd" if backward else "forward"
    print("torch %s %s: %.2f ms" % (torch.__version__, what, best * 1e3))
