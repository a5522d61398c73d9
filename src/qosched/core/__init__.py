"""Vocabulary shared by every level: errors and validation at the boundary."""
