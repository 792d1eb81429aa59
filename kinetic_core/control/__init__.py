"""Layer 7: observing and steering jobs from outside: creating an attempt (``launching``),
THE status resolution (``resolution``), recovery, every wait (``polling``), following logs
and usage. Imports backends and below."""
