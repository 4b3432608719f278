"""The pieces of `gradstream.nn.functional`, by theme; that module re-exports them all."""
