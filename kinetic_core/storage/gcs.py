"""gs:// storage on Google Cloud Storage with the real ``google-cloud-storage`` client.

Create-only writes use ``if_generation_match=0`` (GCS decides the race atomically); every
call runs under the one retry policy of ``kinetic_core.util.retrying`` with this module's
``is_transient``, with the client's own retries disabled so that there is exactly one
policy to reason about, and google errors become the protocol's errors in one place
(``GCSStorage._call``). This is the only module that imports ``google.cloud``: file://
users and the runner never pay for it.
"""

from __future__ import annotations

import io
import os
import secrets
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import IO, Any, BinaryIO, Literal, TypeVar, cast

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage as gcs

from kinetic_core.errors import StorageError
from kinetic_core.util.retrying import transient_retry

__all__ = ["CHUNK_SIZE", "TRANSIENT_RETRY", "GCSStorage", "is_transient"]

T = TypeVar("T")

# Resumable uploads go in chunks of this size (a multiple of 256 KiB, as GCS requires):
# large enough that a multi-GB result takes few requests, small enough to buffer in memory.
CHUNK_SIZE = 16 * 1024 * 1024
# Object metadata key holding a per-write token: lets a retried create-only upload tell
# "my own earlier attempt already created it" from "someone else won" (see _upload).
WRITER_TOKEN = "kinetic-writer"
_TRANSIENT_CODES = frozenset({408, 429, 500, 502, 503, 504})


def is_transient(exc: BaseException) -> bool:
    """Errors worth retrying: throttling, server errors, dropped connections, timeouts."""
    if isinstance(exc, gexc.GoogleAPICallError):
        return exc.code in _TRANSIENT_CODES
    return isinstance(
        exc,
        requests.ConnectionError
        | requests.Timeout
        | requests.exceptions.ChunkedEncodingError
        | auth_exc.TransportError
        | ConnectionError
        | TimeoutError,
    )


# The one retry policy (kinetic_core.util.retrying), told which GCS errors are transient.
TRANSIENT_RETRY = transient_retry(is_transient)


def make_client() -> gcs.Client:
    """A client for the emulator (anonymous) when STORAGE_EMULATOR_HOST is set, else ADC."""
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return gcs.Client(project="test", credentials=AnonymousCredentials())
    return gcs.Client(project=os.environ.get("KINETIC_PROJECT") or None)


def _credentials_error(uri: str, exc: BaseException) -> StorageError:
    return StorageError(
        f"Not allowed to use {uri} ({type(exc).__name__}: {exc}). Check the credentials this "
        "process runs with: GOOGLE_APPLICATION_CREDENTIALS (a service-account key file), "
        "`gcloud auth application-default login`, or on GKE the Workload Identity binding of "
        "the pod's Kubernetes service account; the identity needs roles/storage.objectAdmin "
        "on the bucket."
    )


class GCSStorage:
    """Storage under ``gs://bucket/prefix``; keys are object names below the prefix."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        rest = self.uri[len("gs://") :]
        self.bucket_name, _, prefix = rest.partition("/")
        self.prefix = prefix.strip("/")
        self._client: gcs.Client | None = None
        self._bucket: gcs.Bucket | None = None
        self._checked = False  # the bucket was seen to exist (checked once, lazily)
        self._lock = threading.Lock()

    # ---- plumbing -------------------------------------------------------------------------
    def _name(self, key: str) -> str:
        key = key.strip("/")
        return f"{self.prefix}/{key}" if self.prefix and key else (self.prefix or key)

    def location(self, key: str) -> str:
        return f"gs://{self.bucket_name}/{self._name(key)}"

    def _missing_bucket(self) -> StorageError:
        return StorageError(
            f"GCS bucket {self.bucket_name!r} (storage root {self.uri}) does not exist. Create "
            f"it (`gcloud storage buckets create gs://{self.bucket_name}`) or fix KINETIC_STORAGE "
            "/ storage= to name an existing bucket."
        )

    def _get_bucket(self) -> gcs.Bucket:
        """The client and bucket, built lazily: a handle can exist without credentials."""
        if self._bucket is None:
            with self._lock:
                if self._bucket is None:
                    with self._errors(""):
                        self._client = make_client()
                    self._bucket = self._client.bucket(self.bucket_name)
        if not self._checked:
            # objects.list (not buckets.get) so object-level roles suffice; 404 = no bucket.
            def probe() -> None:
                list(self._list_blobs(prefix=self.prefix, max_results=1))

            self._call(probe, "", missing="bucket")
            self._checked = True
        return self._bucket

    def _list_blobs(self, **kwargs: Any) -> Any:
        assert self._client is not None
        return self._client.list_blobs(self.bucket_name, retry=None, **kwargs)

    def _call(
        self,
        op: Callable[[], T],
        key: str,
        *,
        missing: Literal["file", "bucket"] = "file",
    ) -> T:
        """Run ``op`` under the retry policy, its errors mapped by ``_errors``."""
        with self._errors(key, missing=missing):
            return TRANSIENT_RETRY.copy()(op)

    @contextmanager
    def _errors(self, key: str, *, missing: Literal["file", "bucket"] = "file") -> Iterator[None]:
        """THE mapping of google errors to the Storage protocol's errors (StorageError,
        FileNotFoundError). ``missing`` says what a 404 means for this call.
        PreconditionFailed passes through: only the create-only caller knows what it means.
        """
        try:
            yield
        except gexc.PreconditionFailed:
            raise
        except gexc.NotFound as exc:
            if missing == "bucket":
                raise self._missing_bucket() from exc
            raise FileNotFoundError(self.location(key)) from exc
        except (FileNotFoundError, FileExistsError):
            raise
        except (
            gexc.GoogleAPICallError,
            requests.RequestException,
            auth_exc.TransportError,
            OSError,
        ) as exc:
            if isinstance(exc, gexc.Unauthorized | gexc.Forbidden):
                raise _credentials_error(self.uri, exc) from exc
            raise StorageError(
                f"GCS request for {self.location(key)} failed: {type(exc).__name__}: {exc}"
                + (" (gave up after retrying)" if is_transient(exc) else "")
            ) from exc
        except auth_exc.GoogleAuthError as exc:  # no credentials, refresh failed...
            raise _credentials_error(self.uri, exc) from exc

    # ---- reads ----------------------------------------------------------------------------
    def read_bytes(self, key: str) -> bytes:
        blob = self._get_bucket().blob(self._name(key))
        return self._call(lambda: cast(bytes, blob.download_as_bytes(retry=None)), key)

    @contextmanager
    def open_read(self, key: str) -> Iterator[BinaryIO]:
        """Download to an anonymous temporary file (seekable, gone when closed)."""
        blob = self._get_bucket().blob(self._name(key))
        with tempfile.TemporaryFile(prefix="kinetic-gcs-") as fh:

            def download() -> None:
                fh.seek(0)
                fh.truncate()
                blob.download_to_file(fh, retry=None)

            self._call(download, key)
            fh.seek(0)
            yield cast(BinaryIO, fh)

    def exists(self, key: str) -> bool:
        blob = self._get_bucket().blob(self._name(key))
        return self._call(lambda: bool(blob.exists(retry=None)), key)

    def list_names(self, prefix: str) -> list[str]:
        self._get_bucket()
        base = self._name(prefix)
        base = f"{base}/" if base else ""

        def listing() -> set[str]:
            pages = self._list_blobs(prefix=base, delimiter="/")
            names = {b.name[len(base) :] for b in pages}  # consuming the pages fills .prefixes
            names.update(p[len(base) :].rstrip("/") for p in pages.prefixes)
            return names

        names = self._call(listing, prefix, missing="bucket")
        return sorted(n for n in names if n and not n.startswith("."))

    # ---- writes ---------------------------------------------------------------------------
    def write_bytes(self, key: str, data: bytes, *, create_only: bool = False) -> None:
        self._upload(key, io.BytesIO(data), len(data), create_only)

    @contextmanager
    def open_write(self, key: str, *, create_only: bool = False) -> Iterator[BinaryIO]:
        """Stream into a local temporary file; upload it only if the block exits cleanly.

        No existence pre-check for ``create_only`` (unlike file://): it would cost a round
        trip on every submit, and the generation precondition at upload is the real guard.
        """
        with tempfile.TemporaryFile(prefix="kinetic-gcs-") as fh:
            yield cast(BinaryIO, fh)
            size = fh.seek(0, os.SEEK_END)
            self._upload(key, fh, size, create_only)

    def _upload(self, key: str, stream: IO[bytes], size: int, create_only: bool) -> None:
        """One atomic object upload (multipart up to 8 MiB, resumable above).

        A create-only upload carries a fresh writer token in its metadata. If a retry ends
        in 412 because our own earlier attempt succeeded (its response was lost), the token
        on the existing object is ours, so this is success, not FileExistsError.
        """
        bucket = self._get_bucket()
        name = self._name(key)
        blob = bucket.blob(name, chunk_size=CHUNK_SIZE)
        token = secrets.token_hex(16)
        if create_only:
            blob.metadata = {WRITER_TOKEN: token}

        def upload() -> None:
            stream.seek(0)
            blob.upload_from_file(
                stream,
                size=size,
                content_type="application/octet-stream",
                if_generation_match=0 if create_only else None,
                retry=None,
            )

        try:
            self._call(upload, key, missing="bucket")
        except gexc.PreconditionFailed as exc:
            existing = self._call(lambda: bucket.get_blob(name, retry=None), key)
            if existing is not None and (existing.metadata or {}).get(WRITER_TOKEN) == token:
                return  # our first attempt won; only its response was lost
            raise FileExistsError(self.location(key)) from exc

    def put_file(self, key: str, source: str, *, create_only: bool = False) -> None:
        with open(source, "rb") as fh:
            self._upload(key, fh, os.fstat(fh.fileno()).st_size, create_only)

    def get_file(self, key: str, dest: str) -> None:
        blob = self._get_bucket().blob(self._name(key), chunk_size=CHUNK_SIZE)

        def download() -> None:
            with open(dest, "wb") as fh:
                blob.download_to_file(fh, retry=None)

        self._call(download, key)

    def walk(self, prefix: str) -> list[str]:
        self._get_bucket()
        base = self._name(prefix)
        base = f"{base}/" if base else ""
        names = self._call(
            lambda: [b.name[len(base) :] for b in self._list_blobs(prefix=base)],
            prefix,
            missing="bucket",
        )
        return sorted(n for n in names if n and not n.endswith("/"))

    def local_path(self, key: str) -> str | None:
        return None

    # ---- deletes --------------------------------------------------------------------------
    def delete(self, key: str) -> None:
        blob = self._get_bucket().blob(self._name(key))
        # Absent is fine (also: a retried delete whose first try succeeded).
        with suppress(FileNotFoundError):
            self._call(lambda: blob.delete(retry=None), key)

    def delete_prefix(self, prefix: str) -> None:
        base = self._name(prefix)
        base = f"{base}/" if base else ""
        self._get_bucket()
        names = self._call(
            lambda: [b.name for b in self._list_blobs(prefix=base)], prefix, missing="bucket"
        )
        for name in names:
            self.delete(name[len(self.prefix) + 1 :] if self.prefix else name)
