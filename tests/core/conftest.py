"""Fixtures for core tests (the GCS emulator fixture is shared: see tests/conftest.py)."""
