"""A module that fails to import, loaded by import path in test_capture.py."""

raise RuntimeError("this module fails as it is imported")
