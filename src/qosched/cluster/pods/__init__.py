"""Pods placed on GPU nodes, as Alibaba's GPU-sharing trace (``cluster-trace-gpu-v2023``) records
them: a pod asks for CPU, memory and either whole GPUs or part of one; the cluster's nodes carry
GPUs of several types. This package reads such traces and node lists, measures fragmentation as
"Beware of Fragmentation" (Weng et al., USENIX ATC'23) defines it, and places pods by FGD and
its baselines.
"""
