"""Layer 5: what runs inside the job: the runner and its bootstrap, the sidecar (signals,
telemetry), log capture, the preemption notice, version checks, debug holds. Imports data
and below, never a backend, the control layer or anything above: it is on the critical path
of every job, so each module imports only what it uses."""
