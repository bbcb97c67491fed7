"""The real backend: the same plans run by real processes.

`launch` says where a process stands in a job (its rank, the world size, the root to bootstrap
to) from the variables its launcher set; `bootstrap` joins the ranks over TCP and exchanges what
each must know of the others; `agree` checks that every rank built the same plan; `kernels` is
the arithmetic of NCCL's reductions on the CPU; `shm` one direction of a connection through
shared memory; `net` one over TCP sockets, moved by a proxy thread, and `net_ib` one over IB
verbs as NCCL's net_ib moves it, through `verbs` (pyverbs, shimmed across rdma-core releases);
`execute` runs a rank's channel programs over its connections on real data; `runner` is
`nicksim run`: ranks started or joined, each size run, timed, checked and reported. On GPUs (NICKSIM_DEVICE=gpu), `cuda_ipc`
gives the connections in GPU memory and the arithmetic as `cuda_kernels`' CuPy kernels. `host`
describes this host for the DES (its copy bandwidth, the link between hosts), so measured runs can
calibrate it.
"""

__all__ = ["launch", "bootstrap", "agree", "kernels", "shm", "execute", "runner", "cuda_kernels", "cuda_ipc", "verbs",
           "net", "net_ib", "host"]
