import sys

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000000
torch.set_num_threads(1)
x = torch.tensor([0.0])
one = torch.tensor([1.0])
for i in range(n):
    x = x + one
print(float(x[0]))
