"""The real backend: the same plans run by real processes.

`launch` says where a process stands in a job (its rank, the world size, the root to bootstrap
to) from the variables its launcher set; `bootstrap` joins the ranks over TCP and exchanges what
each must know of the others; `agree` checks that every rank built the same plan; `kernels` is
the arithmetic of NCCL's reductions on the CPU; `shm` one direction of a connection through
shared memory; `execute` runs a rank's channel programs over its connections on real data;
`runner` is `nicksim run`: ranks started or joined, each size run, timed, checked and reported.
"""

__all__ = ["launch", "bootstrap", "agree", "kernels", "shm", "execute", "runner"]
