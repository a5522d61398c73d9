"""Cluster policies, registered by name. Importing this package registers the built-in ones."""

from qosched.cluster.policies import (  # noqa: F401  (registration)
    baselines,
    chronus,
    elasticflow,
    gandiva,
    pollux,
    qos,
    themis,
)
from qosched.cluster.policies.base import Policy, create_policy, policy_names, register

__all__ = ["Policy", "create_policy", "policy_names", "register"]
