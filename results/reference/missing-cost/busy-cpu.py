import torch, sys
torch.set_num_threads(1)
a = torch.randn(256, 256)
while True:
    a = (a @ a).tanh_()
