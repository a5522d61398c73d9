"""GPU-sharing policies, registered by name: qosched's FgGR-style priority admission and the
baselines (exclusive, time slicing, naive concurrency, priority streams, Orion's rule)."""

from qosched.gpushare.policies import baselines, fggr  # noqa: F401  (registers the policies)
from qosched.gpushare.policies.base import create_policy, policy_names, register

__all__ = ["create_policy", "policy_names", "register"]
