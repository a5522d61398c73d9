"""Kernel-level GPU sharing (FgGR): kernels' resource needs estimated without running the model,
an interference score, priority admission policies, a GPU simulator and a PyTorch runtime."""
