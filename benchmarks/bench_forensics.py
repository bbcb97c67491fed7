"""Time `nicksim hang diagnose` on a large NCCL_DEBUG=INFO log against grep reading the same file.

Writes a log of `--size` bytes (200 MB by default) of the channel and connection lines a
many-rank NCCL_DEBUG=INFO run prints, with a watchdog timeout near the end, then times
diagnose(read_evidence(...)) in this process and `grep -c WorkNCCL` over the same file (the
cost of just reading it), each the median of `--repeat` runs. Prints both and their ratio.

    python benchmarks/bench_forensics.py [--size 200M] [--repeat 3]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from nicksim.forensics.diagnose import diagnose
from nicksim.forensics.read import read_evidence
from nicksim.studies.perf import parse_size

LINES = (
    "node-{n:03d}:{pid}:{pid} [{d}] NCCL INFO Channel {c:02d}/0 : {r}[{d}] -> {s}[{e}] via P2P/CUMEM/read\n",
    "node-{n:03d}:{pid}:{tid} [{d}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n",
    "node-{n:03d}:{pid}:{pid} [{d}] NCCL INFO Channel {c:02d}/1 : {r}[{d}] -> {s}[{e}] [send] via NET/IB/{d}/GDRDMA\n",
)
WATCHDOG = ("[rank7]:[E816 01:45:40.183009389 ProcessGroupNCCL.cpp:607] [Rank 7] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=80078, OpType=ALLREDUCE, NumelIn=5056, NumelOut=5056, Timeout(ms)=600000) ran "
            "for 600026 milliseconds before timing out.\n")


def write_log(path: Path, nbytes: int) -> None:
    block = "".join(template.format(n=i % 128, pid=1000 + i, tid=2000 + i, d=i % 8, c=i % 32, r=i % 1024,
                                    s=(i + 1) % 1024, e=(i + 1) % 8)
                    for i in range(4096) for template in LINES).encode()
    with open(path, "wb") as f:
        written = 0
        while written < nbytes:
            f.write(block)
            written += len(block)
        f.write(WATCHDOG.encode())


def median_seconds(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="200M")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nccl.log"
        write_log(path, parse_size(args.size, "--size"))
        size_mb = path.stat().st_size / 1e6
        found = diagnose(read_evidence([path]))
        ours = median_seconds(lambda: diagnose(read_evidence([path])), args.repeat)
        grep = median_seconds(lambda: subprocess.run(["grep", "-c", "WorkNCCL", str(path)], capture_output=True),
                              args.repeat)
    print(f"# {size_mb:.0f} MB NCCL_DEBUG=INFO log, median of {args.repeat}: diagnosis '{found.category}'")
    print(f"diagnose {ours:.2f} s ({size_mb / ours:.0f} MB/s)  grep -c {grep:.2f} s  diagnose/grep {ours / grep:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
