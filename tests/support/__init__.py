"""Helpers for tests that run real external parts (the vLLM CPU engine, tiny random-weight models)."""
