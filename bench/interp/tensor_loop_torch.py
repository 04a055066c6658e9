import torch

torch.set_num_threads(1)
x = torch.tensor([0.0])
one = torch.tensor([1.0])
for i in range(1000000):
    x = x + one
print(float(x[0]))
