"""Signals to a running job's function (neuro's ``send_signal``), through storage.

One mechanism on every backend: ``send_signal`` writes a create-only request record
``jobs/{id}/signals/{request}.json`` (job id, signal name, target worker; an HMAC when a
signing key is set) and the runner's sidecar thread (``sidecar.py``), which lists that
folder every ``POLL_SECONDS``, raises the signal in its own process, on the main thread
(where Python runs signal handlers), and writes an ack per worker
(``jobs/{id}/signal-acks/{request}-worker-{k}.json``). No exec into a pod, no pid on the
submitter's side: it works wherever the runner can read storage.

A request naming another job, or without a valid HMAC when the runner holds a signing
key, is ignored and logged. Signals that stop or kill a job are refused when asked
(SIGTERM is how ``cancel()`` stops it); so is a signal whose default action would end the
process when the function installed no handler for it: the ack says so.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from kinetic_core.errors import ConfigError, SignalRefused
from kinetic_core.records import layout
from kinetic_core.records.lifecycle import read_json
from kinetic_core.runtime.decided_stop import DecidedStop
from kinetic_core.storage import Storage
from kinetic_core.util import signing

#: How often the runner looks for new requests (``KINETIC_SIGNAL_POLL_SECONDS``).
POLL_SECONDS = 2.0
POLL_ENV = "KINETIC_SIGNAL_POLL_SECONDS"
#: How long ``send_signal(wait=True)`` waits for the acks by default.
ACK_WAIT = 30.0

#: Signals that would stop or kill the job, with what to do instead.
REFUSED = {
    "SIGTERM": "SIGTERM is how a job is stopped: use cancel() (`kinetic jobs cancel ID`)",
    "SIGKILL": "SIGKILL ends the job without a result: use cancel() (`kinetic jobs cancel ID`)",
    "SIGSTOP": "SIGSTOP would freeze the job until its deadline: it cannot be sent",
    "SIGTSTP": "SIGTSTP would freeze the job until its deadline: it cannot be sent",
    "SIGTTIN": "SIGTTIN would freeze the job until its deadline: it cannot be sent",
    "SIGTTOU": "SIGTTOU would freeze the job until its deadline: it cannot be sent",
}
#: Signals whose default action leaves the process running (the rest end it).
HARMLESS_DEFAULT = frozenset({"SIGCHLD", "SIGCONT", "SIGURG", "SIGWINCH"})
REQUEST_ID = re.compile(r"^[0-9]{20}-[0-9a-f]{12}$")


@dataclass(frozen=True)
class SignalAck:
    """What worker ``worker`` did with a request: ``delivered``, or ``note`` says why not."""

    worker: int
    delivered: bool
    at: float
    note: str = ""


@dataclass(frozen=True)
class SignalRequest:
    """One signal sent to a job: ``worker`` None means every worker. ``acks`` holds what
    the workers reported (filled by ``send_signal(wait=True)``)."""

    job_id: str
    request_id: str
    signal: str
    worker: int | None = None
    acks: tuple[SignalAck, ...] = ()

    @property
    def delivered(self) -> bool:
        """Every ack that came back says delivered (and at least one came back)."""
        return bool(self.acks) and all(a.delivered for a in self.acks)


def signal_name(sig: int | str | signal.Signals) -> str:
    """``"SIGUSR1"`` for ``signal.SIGUSR1``, ``10``, ``"10"``, ``"usr1"`` or ``"SIGUSR1"``.

    A request carries the name, not the number: numbers differ between platforms (the
    runner resolves the name on its own). ConfigError for anything that is no signal here;
    SignalRefused for one that would stop or kill the job."""
    text = str(sig.value if isinstance(sig, signal.Signals) else sig).strip()
    try:
        name = (
            signal.Signals(int(text)).name
            if text.isdigit()
            else signal.Signals[_with_sig(text.upper())].name
        )
    except (KeyError, ValueError):
        raise ConfigError(
            f"{sig!r} is not a signal: give a name (SIGUSR1, USR1) or a number (10)."
        ) from None
    if name in REFUSED:
        raise SignalRefused(f"{name} is not sent to a job: {REFUSED[name]}.")
    return name


def _with_sig(text: str) -> str:
    return text if text.startswith("SIG") else f"SIG{text}"


def check_can_signal(job_id: str, status: str, name: str) -> None:
    """SignalRefused unless the job runs (its function may have a handler by now)."""
    if status == "RUNNING":
        return
    if status == "PENDING":
        raise SignalRefused(
            f"Job {job_id} has not started yet, so its function cannot have a handler for "
            f"{name}: send it once `kinetic jobs status {job_id}` says RUNNING."
        )
    raise SignalRefused(
        f"Job {job_id} is {status}: it has no process left to signal. Nothing was sent."
    )


# ---- records (both sides) -----------------------------------------------------------------


def signed(fields: dict[str, Any], signing_key: str | None) -> bytes:
    """``fields`` as JSON, with ``hmac`` over them when a signing key is set."""
    data = dict(fields)
    if signing_key:
        data["hmac"] = signing.mac(signing_key, fields)
    return json.dumps(data, sort_keys=True).encode()


def read_bound(
    storage: Storage, key: str, job_id: str, signing_key: str | None
) -> tuple[dict[str, Any] | None, str]:
    """The record at ``key`` if it names ``job_id`` and, when a key is set, is signed with
    it; else (None, why not). A missing or torn record is (None, "")."""
    data = read_json(storage, key)
    if data is None:
        return None, ""
    signature = data.pop("hmac", None)
    if data.get("job_id") != job_id:
        return None, f"it names job {data.get('job_id')!r}"
    if signing_key and not signing.valid(signing_key, data, signature):
        return None, "it is unsigned or its signature is invalid (forged, or another key)"
    return data, ""


def request(
    storage: Storage, job_id: str, name: str, worker: int | None, signing_key: str | None
) -> SignalRequest:
    """Write the create-only request record (ids sort in the order they were asked)."""
    request_id = f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}"
    fields = {
        "job_id": job_id,
        "request_id": request_id,
        "signal": name,
        "worker": worker,
        "at": time.time(),
        "host": os.uname().nodename,
    }
    storage.write_bytes(
        layout.signal_request(job_id, request_id), signed(fields, signing_key), create_only=True
    )
    return SignalRequest(job_id, request_id, name, worker)


def read_acks(
    storage: Storage, req: SignalRequest, workers: list[int], signing_key: str | None
) -> tuple[SignalAck, ...]:
    """The acks of ``req`` that came back so far, from ``workers``."""
    acks = []
    for k in workers:
        data, _ = read_bound(
            storage, layout.signal_ack(req.job_id, req.request_id, k), req.job_id, signing_key
        )
        if data is not None and data.get("request_id") == req.request_id:
            acks.append(
                SignalAck(
                    k,
                    bool(data.get("delivered")),
                    float(data.get("at") or 0),
                    str(data.get("note") or ""),
                )
            )
    return tuple(acks)


# ---- the runner's side --------------------------------------------------------------------


class Watcher:
    """Delivers the requests meant for worker ``worker`` of job ``job_id``, each once, and
    stops the runner once the job was decided stopped (``decided_stop``): ``tick()`` is
    called by the runner's sidecar thread.

    One listing of the job's folder per tick shows both: ``outcome.json`` (read only once
    it is there) and the ``signals`` folder (listed only once it is there), so a tick of a
    job nobody signals costs the one listing it cost before the stop check."""

    def __init__(self, storage: Storage, job_id: str, worker: int, signing_key: str | None) -> None:
        self.storage, self.job_id, self.worker, self.key = storage, job_id, worker, signing_key
        self.seen: set[str] = set()
        self.decided = DecidedStop(storage, job_id, worker)

    def tick(self) -> None:
        here = set(self.storage.list_names(layout.job_dir(self.job_id)))
        if layout.OUTCOME in here:
            self.decided.check()
        if layout.SIGNALS in here:
            self._requests()

    def close(self) -> None:
        """The runner is ending (the sidecar stops): record a stop on a decided end."""
        self.decided.ended()

    def _requests(self) -> None:
        names = sorted(self.storage.list_names(layout.signals_dir(self.job_id)))
        for file_name in names:
            request_id = file_name.removesuffix(".json")
            if request_id in self.seen or not REQUEST_ID.fullmatch(request_id):
                continue
            self.seen.add(request_id)
            self._handle(request_id)

    def _handle(self, request_id: str) -> None:
        key = layout.signal_request(self.job_id, request_id)
        data, problem = read_bound(self.storage, key, self.job_id, self.key)
        if data is None or data.get("request_id") != request_id:
            if data is None and not problem:
                self.seen.discard(request_id)  # torn or not there yet: look again next tick
                return
            _say(f"ignored signal request {self.storage.location(key)}: {problem or 'id differs'}")
            return
        if data.get("worker") not in (None, self.worker):
            return
        delivered, note = deliver(str(data.get("signal")))
        _say(f"signal {data.get('signal')}: {note}")
        fields = {
            "job_id": self.job_id,
            "request_id": request_id,
            "worker": self.worker,
            "delivered": delivered,
            "note": note,
            "at": time.time(),
        }
        self.storage.write_bytes(
            layout.signal_ack(self.job_id, request_id, self.worker), signed(fields, self.key)
        )


def deliver(name: str) -> tuple[bool, str]:
    """Raise ``name`` in this process, on the main thread (it runs Python's handlers, and
    its sleeps are interrupted); refused when that would end the process unhandled."""
    try:
        sig = signal.Signals[name]
    except KeyError:
        return False, f"{name} is no signal on this machine"
    if name in REFUSED:
        return False, REFUSED[name]
    if signal.getsignal(sig) is signal.SIG_DFL and name not in HARMLESS_DEFAULT:
        return False, (
            f"not delivered: the function installed no handler for {name}, whose default action "
            f"would end the job; install one (signal.signal(signal.{name}, handler)) first"
        )
    signal.pthread_kill(threading.main_thread().ident or 0, sig)
    return True, f"delivered to pid {os.getpid()}"


def _say(text: str) -> None:
    """A line in the job's own log (the runner's stderr), where its user looks."""
    print(f"kinetic: {text}", file=sys.stderr, flush=True)
