"""The cluster simulator and its command never import torch: `qosched sim cluster` starts in a
fraction of torch's import time. Run in a fresh interpreter, where nothing imported it before."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.process


def test_simulating_a_cluster_imports_no_torch():
    program = textwrap.dedent(
        """
        import sys
        import qosched.cli.cluster
        from qosched.cluster.fidelity import configure
        from qosched.cluster.generate import GeneratorConfig, generate_trace
        from qosched.cluster.simulator import SimConfig, simulate
        from qosched.cluster.spec import ClusterSpec
        from qosched.cluster.throughput import ThroughputModel

        tables = ThroughputModel.bundled("A100")
        jobs = generate_trace(GeneratorConfig(jobs=12, cluster_workers=16, seed=1), tables)
        for name in ("qos", "elasticflow", "edf", "las"):
            for fidelity in ("sound", "artifact"):
                policy, config = configure(name, fidelity, SimConfig())
                simulate(ClusterSpec.from_flags(2, 8), tables, policy, jobs, config)
        print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"
