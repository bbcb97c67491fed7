"""Time `nicksim hang diagnose` on a large log against grep reading the same file.

Writes a log of `--size` bytes (100 MB by default) and times diagnose(read_evidence(...)) in this
process against `grep -c WorkNCCL` over the same file (the cost of just reading it), each the median
of `--repeat` runs; prints both, their ratio and the peak memory of the diagnosis.

`--lines realistic` (the default) mixes what a hung job's logs hold, by line count: NCCL's COLL
lines (NCCL_DEBUG_SUBSYS=COLL: one per call per rank, 60%), the training script's own lines (12%),
channel and connection INFO lines (10%), "Connected all rings" (6%), Python traceback lines (3%),
Init COMPLETE and NCCL_* settings (2% each), NCCL WARN lines (2%), PyTorch's watchdog timeouts, its
progress lines and DistBackendErrors (1% each), from 1024 ranks. `--lines channels` writes only the
channel and connection lines a many-rank NCCL_DEBUG=INFO run prints, which the reader passes over.

    python benchmarks/bench_forensics.py [--size 100M] [--repeat 3] [--lines realistic|channels]
"""
from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import tempfile
import time
import tracemalloc
from pathlib import Path

from nicksim.forensics.diagnose import diagnose
from nicksim.forensics.read import read_evidence
from nicksim.studies.perf import parse_size

CHANNELS = (
    (1, "node-{h:03d}:{pid}:{pid} [{d}] NCCL INFO Channel {c:02d}/0 : {r}[{d}] -> {s}[{e}] via P2P/CUMEM/read\n"),
    (1, "node-{h:03d}:{pid}:{tid} [{d}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n"),
    (1, "node-{h:03d}:{pid}:{pid} [{d}] NCCL INFO Channel {c:02d}/1 : {r}[{d}] -> {s}[{e}] [send] via "
        "NET/IB/{d}/GDRDMA\n"),
)
REALISTIC = (
    (60, "node-{h:03d}:{pid}:{pid} [{d}] NCCL INFO AllReduce: opCount {op:x} sendbuff 0x7f5c2a{op:06x} recvbuff "
         "0x7f5c2a{op:06x} count 1048576 datatype 7 op 0 root 0 comm 0x55d5c9a0e0e0 [nranks=1024] stream "
         "0x55d5c8b0c4a0\n"),
    (6, "node-{h:03d}:{pid}:{tid} [{d}] NCCL INFO Channel {c:02d}/1 : {r}[{d}] -> {s}[{e}] [send] via "
        "NET/IB/{d}/GDRDMA\n"),
    (4, "node-{h:03d}:{pid}:{pid} [{d}] NCCL INFO Channel {c:02d}/0 : {r}[{d}] -> {s}[{e}] via P2P/CUMEM/read\n"),
    (2, "node-{h:03d}:{pid}:{pid} [{d}] NCCL INFO comm 0x55d5c9a0e0e0 rank {r} nranks 1024 cudaDev {d} nvmlDev {d} "
        "busId 18000 commId 0x8e3b1c6a4f2d0a11 - Init COMPLETE\n"),
    (2, "node-{h:03d}:{pid}:{pid} [{d}] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22.\n"),
    (12, "[rank{r}]:[I1201 03:14:15.418265 train.py:210] step {op} | loss 2.3141 | lr 3.0e-04 | grad_norm 0.912 | "
         "412.3 TFLOPs\n"),
    (3, "[rank{r}]:   File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 2501, "
        "in all_reduce\n"),
    (1, "[rank{r}]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp"
        ":317, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"),
    (2, "node-{h:03d}:{pid}:{tid} [{d}] NCCL WARN Cuda failure 'invalid device ordinal'\n"),
    (1, "[rank{r}]:[E1201 03:24:15.418265 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum={op}, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) "
        "ran for 600026 milliseconds before timing out.\n"),
    (1, "[rank{r}]:[E1201 03:24:15.418265 ProcessGroupNCCL.cpp:2395] [PG ID 0 PG GUID 0(default_pg) Rank {r}]  "
        "failure detected by watchdog at work sequence id: {op} PG status: last enqueued work: {op}, last "
        "completed work: {op}\n"),
    (6, "node-{h:03d}:{pid}:{tid} [{d}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n"),
)


def write_log(path: Path, nbytes: int, templates=REALISTIC) -> None:
    """`nbytes` of the templates' lines, drawn by weight from 1024 ranks (the same file every run)."""
    pool = [template for weight, template in templates for _ in range(weight)]
    draw = random.Random(1)
    with open(path, "w") as f:
        written, i = 0, 0
        while written < nbytes:
            chunk = []
            for _ in range(10000):
                i += 1
                r = draw.randrange(1024)
                chunk.append(draw.choice(pool).format(h=r // 8, pid=1000 + r, tid=2000 + r, d=r % 8, c=i % 32, r=r,
                                                      s=(r + 1) % 1024, e=(r + 1) % 8, op=i // 1024))
            text = "".join(chunk)
            f.write(text)
            written += len(text)


def median_seconds(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100M")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lines", choices=("realistic", "channels"), default="realistic")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nccl.log"
        write_log(path, parse_size(args.size, "--size"), REALISTIC if args.lines == "realistic" else CHANNELS)
        size_mb = path.stat().st_size / 1e6
        tracemalloc.start()
        found = diagnose(read_evidence([path]))
        peak_mb = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
        ours = median_seconds(lambda: diagnose(read_evidence([path])), args.repeat)
        grep = median_seconds(lambda: subprocess.run(["grep", "-c", "WorkNCCL", str(path)], capture_output=True),
                              args.repeat)
    print(f"# {size_mb:.0f} MB log of {args.lines} lines, median of {args.repeat}: diagnosis '{found.category}', "
          f"peak Python memory {peak_mb:.0f} MB")
    print(f"diagnose {ours:.2f} s ({size_mb / ours:.0f} MB/s)  grep -c {grep:.2f} s ({size_mb / grep:.0f} MB/s)  "
          f"diagnose/grep {ours / grep:.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
