"""The ``qosched`` command."""
