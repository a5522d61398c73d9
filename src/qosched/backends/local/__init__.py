"""Running jobs for real on this machine: one worker process per job, pinned to the CPU cores a
scheduler gives it, re-sized in place while it trains. The file protocol between the scheduler
and a worker is in the docstring of ``qosched.backends.local.worker``; its types are in
``qosched.backends.local.protocol``.
"""
