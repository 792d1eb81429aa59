"""Layer 1: helpers that know no job (ids, signing, the retry policy, threads, processes,
the backend/storage registry, env vars, which worker am I, port specs, job-free waits).
Imports only ``errors`` and ``states``."""
