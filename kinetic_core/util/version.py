"""The package version: what envelopes record and the runner compares, importable from
below the facade (nothing imports ``kinetic_core`` itself for it)."""

__version__ = "0.1.0"
