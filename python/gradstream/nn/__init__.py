"""`gradstream.nn`: modules, functional ops and initialisers shaped like `torch.nn`."""
