"""Generic controller runtime with client-go / controller-runtime semantics.

It imports nothing else of mlops_platform (enforced by import-linter).
"""
