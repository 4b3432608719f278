"""`gradstream.optim`: optimizers shaped like `torch.optim`, steppable inside backward."""
