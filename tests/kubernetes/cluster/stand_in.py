"""What the JobSet and Kueue stand-in controllers share: the API client, a level-triggered
reconcile loop woken by watches, and metav1.Condition bookkeeping.

Why level-triggered: like controller-runtime's reconcilers upstream, each pass reads the
current objects and moves them one step towards what they should be; a watch event only wakes
the loop early (a resync every few seconds covers a missed event), so the stand-ins survive a
control-plane restart without special cases.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from node_agent import Kube, KubeError, now_rfc3339

RESYNC_SECONDS = 5.0
log = logging.getLogger("stand-in")


def client(kubeconfig: str, user_agent: str) -> Kube:
    """The node agent's JSON REST client, under this controller's own user agent (so the audit
    log tells its requests from kinetic's)."""
    kube = Kube(kubeconfig)
    kube.headers["User-Agent"] = user_agent
    return kube


def merge_patch(kube: Kube, path: str, body: dict[str, Any]) -> dict[str, Any]:
    return kube.request("PATCH", path, body, "application/merge-patch+json")


def delete(kube: Kube, path: str, propagation: str = "Background") -> None:
    """Delete, ignoring an object already gone."""
    try:
        kube.request("DELETE", path, {"propagationPolicy": propagation})
    except KubeError as err:
        if err.status != 404:
            raise


def find_condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def is_true(obj: dict[str, Any], kind: str) -> bool:
    cond = find_condition(obj, kind)
    return bool(cond and cond.get("status") == "True")


def set_condition(
    conditions: list[dict[str, Any]], kind: str, status: str, reason: str, message: str
) -> bool:
    """apimachinery's meta.SetStatusCondition: lastTransitionTime changes only with status.
    Returns whether anything changed."""
    for cond in conditions:
        if cond["type"] != kind:
            continue
        if (cond["status"], cond["reason"], cond["message"]) == (status, reason, message):
            return False
        if cond["status"] != status:
            cond["lastTransitionTime"] = now_rfc3339()
        cond.update(status=status, reason=reason, message=message)
        return True
    conditions.append(
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        }
    )
    return True


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """A controller owner reference (controller-runtime's SetControllerReference)."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> bool:
    uid = owner["metadata"]["uid"]
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def _watch_forever(kube: Kube, path: str, wake: threading.Event) -> None:
    while True:
        try:
            version = kube.request("GET", f"{path}?limit=1")["metadata"]["resourceVersion"]
            for _ in kube.watch(path, version):
                wake.set()
        except Exception as err:  # any failure: back off, list again
            log.debug("watch %s: %s", path, err)
            time.sleep(1.0)
        wake.set()


def run(name: str, watched: list[str], reconcile: Callable[[Kube], None], argv: list[str]) -> None:
    """Parse ``--kubeconfig``, start one watch thread per path, and reconcile on every wake-up
    and every RESYNC_SECONDS until SIGTERM."""
    parser = argparse.ArgumentParser(description=f"{name} stand-in controller")
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(message)s")
    kube = client(args.kubeconfig, f"kinetic-{name}-stand-in")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    wake = threading.Event()
    for path in watched:
        threading.Thread(target=_watch_forever, args=(kube, path, wake), daemon=True).start()
    while True:
        wake.wait(RESYNC_SECONDS)
        wake.clear()
        try:
            reconcile(kube)
        except Exception:  # a conflict or a restart: the next pass retries
            log.exception("reconcile failed; retrying")
            time.sleep(0.5)
