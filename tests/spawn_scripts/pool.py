"""A `multiprocessing` pool of spawned processes whose task imports torch only when it runs
(the main module never imports it). Prints, as JSON, what each task saw."""

import json
import multiprocessing


def task(i):
    import torch

    x = torch.full((2,), float(i))
    return [i, torch.__name__, type(x).__module__, (x * x).tolist()]


if __name__ == "__main__":
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        print(json.dumps(pool.map(task, range(4))))
