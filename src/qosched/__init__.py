"""qosched: schedule deep-learning work by the quality of service people ask for."""

__version__ = "0.1.0"
