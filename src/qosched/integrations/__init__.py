"""Callbacks that make the trainers people use report to qosched (optional extras)."""
