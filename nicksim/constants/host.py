"""What the host spends enqueuing one GPU's collective call, the cost that bounds nccl-tests' loop
when one thread drives several GPUs.

nccl-tests (src/common.cu, BenchTime and startColl) times `iters` iterations queued back to back:
each iteration, every thread calls the collective once for each of its `-g` GPUs inside one
ncclGroupStart/End, and NCCL's group end prepares and launches each communicator's kernel in turn
on that thread (group.cc doLaunches: the plan, the work upload, cudaLaunchKernel per GPU). Nothing
waits for the GPUs until the last iteration, so an iteration costs the longer of the two sides:
the GPUs' time for the call, and the thread's time to enqueue it on its `-g` GPUs.

HOST_CALL_US is that enqueue per GPU: the plateau of small calls (where the GPUs' part is 10-25 us)
in public nccl-tests runs with one thread for eight GPUs (`-g 8`), divided by eight:

- Azure ND A100 v4 (2x EPYC 7V12), NCCL 2.18.5: 42-45 us (5.3-5.6 per GPU);
- 8x A100 SXM4 with NCCL from pip: 39-41 us (4.9-5.1);
- 8x RTX 4090 on 2x EPYC 7542 (blog.chlc.cc, 2025): 38.7-44 us (4.8-5.5);
- Azure ND H100 v5 (Xeon 8480C), NCCL 2.18.5, NVLS forced: 42-45 us from 64 KiB to 2 MiB (5.3-5.6),
  though its calls of 1-8 KiB took 25.6 us (3.2): the figure is a typical one, not a law;
- Together AI H100 node, NCCL 2.26.2, Ring forced: 34.8-35.1 us (4.4).

Their median is 5.2 us; 5 us is used. It agrees with NVIDIA's own account of the launch path
("Getting Started with CUDA Graphs", NVIDIA technical blog, 2019: 3.8 us per kernel when launches,
not kernels, set the pace) plus NCCL's host work around each launch. One thread per GPU (`-g 1`,
the usual MPI run) enqueues 5 us per iteration, below any collective's time on the GPUs, so the
bound only shows where one thread drives several GPUs.
"""
from __future__ import annotations

__all__ = ["HOST_CALL_US"]

HOST_CALL_US = 5.0
