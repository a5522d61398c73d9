"""Deadline-aware training on a shared cluster: jobs, throughput, traces, policies, simulator."""
