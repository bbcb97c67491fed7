"""What NCCL derives from a System before it prices anything: path types and bandwidths (paths), the
transport of each connection (transports), the graph search (search) and the graphs it finds (graphs),
the double binary tree (trees), channels across nodes (connect), the CollNet set-up (collnet) and
multi-node clusters (cluster).
"""

__all__ = ["paths", "transports", "graphs", "search", "trees", "connect", "collnet", "cluster"]
