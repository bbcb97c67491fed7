"""Every check of the real backend's GPU path, in one run, on a host with an NVIDIA GPU and CuPy.

1. `nicksim topo --system local`: the host as NCCL would detect it (NVML, sysfs).
2. The kernels: cuda_kernels.KERNEL_SOURCE loaded through CuPy (NVRTC), every entry point found.
3. Correctness: `NICKSIM_DEVICE=gpu nicksim run` for every collective on 2, 3, 4 and 8 ranks
   (several ranks share a GPU where there are fewer GPUs: CUDA IPC works between processes on one
   device as between two), odd sizes, a spread of types and operators, `-c 1`; every #wrong must
   be 0.
4. Bandwidth: the reduce kernel (two reads, one write) and the copy kernel on 1 GiB, as memory
   traffic per second over the device's own device-to-device copy (cudaMemcpy), each the median of
   `--repeat` timings with CUDA events; and a 2-rank 64 MiB float all_reduce's busbw.
Writes DIR/gpu_check.json and DIR/gpu_check.txt (what it printed); exits 1 if a check failed, 2
where there is no GPU to check. Run:

    python benchmarks/gpu_check.py --out DIR [--repeat 5] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv")
# (type, operator) pairs each collective runs with: every type once, every operator once.
TYPED = {
    "all_reduce": [("float", "sum"), ("bfloat16", "avg"), ("int32", "avg"), ("half", "max"), ("uint64", "prod")],
    "reduce_scatter": [("double", "min"), ("int8", "sum"), ("uint8", "max")],
    "reduce": [("int64", "sum"), ("uint32", "min")],
    "all_gather": [("half", "sum")], "broadcast": [("int8", "sum")],
    "alltoall": [("float", "sum")], "sendrecv": [("bfloat16", "sum")],
}


def log(lines: list[str], text: str) -> None:
    print(text, flush=True)
    lines.append(text)


def nicksim(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nicksim", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def wrong_counts(out: str) -> list[int]:
    counts = []
    for line in out.splitlines():
        cols = line.split()
        if line.startswith("#") or len(cols) < 13:
            continue
        counts += [int(cols[8]) if cols[8] != "N/A" else 0, int(cols[12]) if cols[12] != "N/A" else 0]
    return counts


def check_collectives(lines: list[str], ranks: list[int], quick: bool) -> list[dict]:
    results = []
    for nranks in ranks:
        for collective in COLLECTIVES:
            for dtype, op in TYPED[collective][:1 if quick else None]:
                args = ["run", collective, "-np", str(nranks), "-b", "1001", "-e", "3000009", "-f", "55", "-n", "2",
                        "-w", "1", "-c", "1", "-d", dtype, "-o", op]
                start = time.perf_counter()
                proc = nicksim(*args, env={"NICKSIM_DEVICE": "gpu", "NICKSIM_TIMEOUT": "60"})
                wrong = wrong_counts(proc.stdout)
                ok = proc.returncode == 0 and wrong and not any(wrong)
                results.append({"nranks": nranks, "collective": collective, "dtype": dtype, "op": op,
                                "rc": proc.returncode, "wrong": wrong, "ok": bool(ok),
                                "seconds": round(time.perf_counter() - start, 1),
                                "error": proc.stderr.strip().splitlines()[-3:] if not ok else []})
                log(lines, f"{'ok  ' if ok else 'FAIL'} {nranks} ranks {collective} {dtype} {op}: rc {proc.returncode}"
                           f" #wrong {wrong} {' '.join(results[-1]['error'])}")
    return results


def kernel_bandwidth(lines: list[str], repeat: int) -> dict:
    import cupy as cp
    from nicksim.realhw.cuda_kernels import gpu_kernels, kernel_names
    module = gpu_kernels()
    missing = []
    for name in kernel_names():
        try:
            module.get_function(name)
        except Exception:  # CuPy raises its own errors for an entry point the module lacks
            missing.append(name)
    n = (1 << 30) // 4
    a, b = cp.ones(n, cp.float32), cp.full(n, 2, cp.float32)
    out = cp.empty_like(a)
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def timed(fn) -> float:
        fn()
        cp.cuda.Device().synchronize()
        samples = []
        for _ in range(repeat):
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return statistics.median(samples)

    reduce_fn = module.get_function("nicksim_reduce_sum_float")
    copy_fn = module.get_function("nicksim_copy_float")
    threads = 512
    blocks = cp.cuda.Device().attributes["MultiProcessorCount"] * 8
    t_memcpy = timed(lambda: cp.cuda.runtime.memcpy(out.data.ptr, a.data.ptr, a.nbytes, 3))  # device to device
    t_copy = timed(lambda: copy_fn((blocks,), (threads,), (a, out, cp.uint64(n))))
    t_reduce = timed(lambda: reduce_fn((blocks,), (threads,), (a, b, out, cp.uint64(n))))
    assert float(out[:1].get()[0]) == 3.0
    memcpy_gbs = 2 * a.nbytes / t_memcpy / 1e9
    result = {"kernels": len(kernel_names()), "missing": missing, "memcpy_GBps": round(memcpy_gbs, 1),
              "copy_kernel_GBps": round(2 * a.nbytes / t_copy / 1e9, 1),
              "reduce_kernel_GBps": round(3 * a.nbytes / t_reduce / 1e9, 1)}
    result["copy_over_memcpy"] = round(result["copy_kernel_GBps"] / memcpy_gbs, 3)
    result["reduce_over_memcpy"] = round(result["reduce_kernel_GBps"] / memcpy_gbs, 3)
    log(lines, f"kernels: {result}")
    return result


def run_busbw(lines: list[str]) -> dict:
    proc = nicksim("run", "all_reduce", "-np", "2", "-b", "64M", "-e", "64M", "-n", "10", "-w", "3", "-c", "0",
                   env={"NICKSIM_DEVICE": "gpu"})
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip() and not line.startswith("#")]
    result = {"rc": proc.returncode, "time_us": float(rows[0][5]) if rows else None,
              "busbw_GBps": float(rows[0][7]) if rows else None, "header": proc.stdout.splitlines()[:2]}
    log(lines, f"64 MiB all_reduce on 2 ranks: {result}")
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one type per collective")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lines: list[str] = []
    from nicksim.realhw.cuda_kernels import gpu_unavailable
    why = gpu_unavailable()
    if not why.startswith("CuPy sees"):
        print(f"gpu_check: nothing to check here: {why}", file=sys.stderr)
        return 2
    log(lines, f"# {why}")
    report: dict = {}
    topo = nicksim("topo", "--system", "local")
    report["topo"] = {"rc": topo.returncode, "out": topo.stdout.splitlines()[:40], "err": topo.stderr.strip()}
    log(lines, f"topo --system local: rc {topo.returncode}\n" + "\n".join(topo.stdout.splitlines()[:40]) + topo.stderr)
    report["kernels"] = kernel_bandwidth(lines, args.repeat)
    report["collectives"] = check_collectives(lines, [2, 3, 4, 8], args.quick)
    report["all_reduce_64M"] = run_busbw(lines)
    failed = [c for c in report["collectives"] if not c["ok"]] + ([1] if report["kernels"]["missing"] else [])
    log(lines, f"# {len(report['collectives']) - len(failed)} of {len(report['collectives'])} runs correct")
    with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(args.out, "gpu_check.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
