"""NCCL's all-reduce at W = 1 on GPU 0, through PyTorch (gpu-check.sh's nccl step).

NCCL refuses several ranks on one GPU, so on a one-GPU machine W = 1 is the only comparison with
ruccl-perf there is. One process, an in-memory store (no network), float sum, 1 MiB .. 256 MiB;
prints one `NCCL:` line per size (algbw, bytes counted once, as nccl-tests does).
"""

import torch
import torch.distributed as dist

dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
print(f"NCCL: version {'.'.join(map(str, torch.cuda.nccl.version()))} (PyTorch {torch.__version__})")
size = 1 << 20
while size <= 256 << 20:
    tensor = torch.ones(size // 4, dtype=torch.float32, device="cuda:0")
    for _ in range(5):
        dist.all_reduce(tensor)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        dist.all_reduce(tensor)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000 / 20
    print(f"NCCL: nccl W=1 all-reduce float sum {size} B: algbw {size / seconds / 1e9:.2f} GB/s")
    size *= 16
dist.destroy_process_group()
