"""W9 peer: one data-parallel DP-SGD step of the W5 CNN (global batch 64), as a
PyTorch user writes it: Opacus's `make_private` on a model wrapped in its
`DifferentiallyPrivateDistributedDataParallel` (DDP over the gloo backend),
noise multiplier 1.0, clip norm 1.0, SGD lr 0.05. Modes (the same total work):

  1 process x 1 thread, 1 process x 2 threads   batch 64 in one process (Opacus, no DDP)
  2 processes x 1 thread                         batch 32 per process, DDP over gloo

Each mode runs a fixed number of steps after a warm-up (every rank the same
count) and prints one JSON line (peers.py's fields) from rank 0, with
`bytes_sent_per_step`: the gradient bytes one process hands the others per
step in gloo's ring all-reduce (2 (P-1)/P x 4 bytes x parameters).

Run (outside the repo's build; the same virtual environment as peers.py):
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PEERS/bin/python benches/peers/w9_ddp.py
"""
import json
import os
import sys
import time

for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(v, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

GLOBAL_BATCH, C, NOISE, LR = 64, 1.0, 1.0, 0.05
WARMUP, REPS = 3, 15


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3)
        self.conv2 = torch.nn.Conv2d(32, 64, 3)
        self.fc1 = torch.nn.Linear(9216, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = torch.flatten(F.max_pool2d(x, 2), 1)
        return self.fc2(F.relu(self.fc1(x)))


def data(rank, world):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(GLOBAL_BATCH, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (GLOBAL_BATCH,), generator=g)
    local = GLOBAL_BATCH // world
    return x[rank * local:(rank + 1) * local], y[rank * local:(rank + 1) * local]


def private(model, x, y):
    from opacus import PrivacyEngine
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=len(x))
    engine = PrivacyEngine()
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                                                   noise_multiplier=NOISE, max_grad_norm=C, poisson_sampling=False)
    return model, optimizer


def timed(step):
    t0 = time.perf_counter()
    step()
    first = (time.perf_counter() - t0) * 1e3
    for _ in range(WARMUP - 1):
        step()
    times = []
    for _ in range(REPS):
        t = time.perf_counter()
        step()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return {"median_ms": times[REPS // 2], "min_ms": times[0], "max_ms": times[-1], "reps": REPS,
            "first_call_ms": first}


def emit(mode, processes, threads, st, extra=None):
    n_params = 1199882
    line = {"workload": "W9_dp_sgd_data_parallel", "library": "opacus", "mode": mode, "dtype": "float32",
            "sizes": {"B": GLOBAL_BATCH, "processes": processes, "n_params": n_params}, **st, "threads": threads}
    line.update(extra or {})
    print(json.dumps(line), flush=True)


def one_step(model, optimizer, x, y):
    def step():
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return step


def single(threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x, y = data(0, 1)
    model, optimizer = private(CNN(), x, y)
    emit(f"1 process x {threads} thread(s)", 1, threads, timed(one_step(model, optimizer, x, y)))


def ddp_worker(rank, world, port):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
    torch.manual_seed(0)
    x, y = data(rank, world)
    model, optimizer = private(DPDDP(CNN()), x, y)
    st = timed(one_step(model, optimizer, x, y))
    if rank == 0:
        n = sum(p.numel() for p in model.parameters())
        emit(f"{world} processes x 1 thread (DDP, gloo)", world, 1, st,
             {"bytes_sent_per_step": int(2 * (world - 1) / world * 4 * n)})
    dist.destroy_process_group()


def main():
    modes = sys.argv[1:] or ["single", "ddp"]
    if "single" in modes:
        single(1)
        single(2)
    if "ddp" in modes:
        mp.spawn(ddp_worker, args=(2, 29500 + os.getpid() % 1000), nprocs=2, join=True)


if __name__ == "__main__":
    main()
