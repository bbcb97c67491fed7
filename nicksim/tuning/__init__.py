"""NCCL's time model and its per-call decision: the cost table of latencies and bandwidths per
collective, algorithm and protocol (cost), the choice of algorithm, protocol, channels and threads for
one call (choose), and nicksim's own estimate where NCCL has no time model, point-to-point calls (p2p).
"""

__all__ = ["cost", "choose"]
