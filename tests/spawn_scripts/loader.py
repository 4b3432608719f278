"""Plain PyTorch: a DataLoader whose worker processes build tensors. Prints, as JSON, what
`torch` is in the main process and in each worker, and the batches.

usage: loader.py START_METHOD
"""

import json
import sys

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Squares(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        x = torch.arange(3, dtype=torch.float32) + i
        return {
            "x": x * x,
            "torch": torch.__name__,
            "tensor_module": type(x).__module__,
            "worker": get_worker_info().id,
        }


if __name__ == "__main__":
    loader = DataLoader(Squares(), batch_size=2, num_workers=2, multiprocessing_context=sys.argv[1])
    batches = [
        {
            "x": b["x"].tolist(),
            "torch": sorted(set(b["torch"])),
            "tensor_module": sorted(set(b["tensor_module"])),
            "worker": b["worker"].tolist(),
        }
        for b in loader
    ]
    main = {"torch": torch.__name__, "tensor_module": type(torch.zeros(1)).__module__}
    print(json.dumps({"main": main, "batches": batches}))
