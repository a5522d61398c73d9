"""Running jobs for real on this machine: one runner process per job, pinned to the CPU cores a
scheduler gives it, re-sized in place while it trains. The file protocol between the scheduler
and a runner is in the docstring of ``qosched.backends.local.runner``; its types are in
``qosched.trainingjob.protocol``.
"""
