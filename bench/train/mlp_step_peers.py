"""The training step of bench/train/mlp_step.hodu in the peers: the MLP
512-256-128-2 (relu), batch 64, cross-entropy, SGD lr 0.01. PyTorch eager
and JAX jit (forward, backward and the update in one jitted function), each
where installed. Usage: mlp_step_peers.py STEPS THREADS. 20 warm-up steps,
then STEPS timed in 5 rounds (as mlp_step.hodu); prints one line per peer:
name, version, us/step over all rounds, us/step of the fastest round.
Threads: torch.set_num_threads; XLA's pool cannot be sized, so the script
that calls this pins the process to THREADS cores (taskset)."""
import sys
import time

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 500
THREADS = int(sys.argv[2]) if len(sys.argv) > 2 else 1


def timed(step):
    for _ in range(20):
        step()
    rounds, total, best = 5, 0.0, None
    for r in range(rounds):
        n = STEPS // rounds if r < rounds - 1 else STEPS - STEPS // rounds * (rounds - 1)
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        t = time.perf_counter() - t0
        total += t
        if n > 0 and (best is None or t / n < best):
            best = t / n
    return total / STEPS * 1e6, (best or 0.0) * 1e6


def torch_step():
    import torch
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    x = torch.randn(64, 512)
    y = (torch.randn(64) > 0).long()
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 2))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return "torch " + torch.__version__ + " eager", timed(step)


def jax_step():
    import jax
    import jax.numpy as jnp
    key = jax.random.PRNGKey(0)
    ks = jax.random.split(key, 5)
    sizes = [(512, 256), (256, 128), (128, 2)]
    params = []
    for k, (i, o) in zip(ks[:3], sizes):
        b = 1.0 / i ** 0.5
        params.append((jax.random.uniform(k, (i, o), minval=-b, maxval=b),
                       jnp.zeros((o,))))
    x = jax.random.normal(ks[3], (64, 512))
    y = (jax.random.normal(ks[4], (64,)) > 0).astype(jnp.int32)

    def loss_fn(ps):
        h = x
        for n, (w, b) in enumerate(ps):
            h = h @ w + b
            if n < len(ps) - 1:
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    @jax.jit
    def update(ps):
        loss, g = jax.value_and_grad(loss_fn)(ps)
        return loss, [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(ps, g)]

    state = [params]

    def step():
        loss, state[0] = update(state[0])
        loss.block_until_ready()
    return "jax " + jax.__version__ + " jit", timed(step)


for peer in (torch_step, jax_step):
    try:
        name, (us, best) = peer()
        print("%s %.1f %.1f" % (name, us, best))
    except ImportError:
        print("%s not-installed - -" % peer.__name__.split("_")[0])
