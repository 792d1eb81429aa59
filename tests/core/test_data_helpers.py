"""``Data.is_dir`` / ``is_gcs`` / ``is_local`` (the kinetic seed's helpers) on real files
and the GCS emulator; ``hf://`` is left out on purpose (see docs/data.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kinetic_core as kc
from kinetic_core.storage import open_storage


def test_local_data_knows_it_is_local_and_whether_it_is_a_folder(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("x")
    for data, is_dir in [
        (kc.Data(tmp_path / "folder"), True),
        (kc.Data(f"file://{tmp_path}/folder"), True),
        (kc.Data(str(tmp_path / "file.txt")), False),
        (kc.Data(f"file://{tmp_path}/file.txt"), False),
        (kc.Data(str(tmp_path / "missing")), False),
    ]:
        assert (data.is_local, data.is_gcs, data.is_dir) == (True, False, is_dir), data


def test_relative_local_data_is_resolved_against_the_working_directory(
    tmp_path: Path, monkeypatch: Any
) -> None:
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path)
    assert kc.Data("here").is_dir and not kc.Data("elsewhere").is_dir


def test_gcs_data_is_gcs_and_a_folder_by_prefix_or_by_what_the_bucket_holds(
    gcs_emulator: Any,
) -> None:
    prefix = f"helpers-{os.urandom(4).hex()}"
    bucket = open_storage(gcs_emulator.uri(prefix))
    bucket.write_bytes("blob.bin", b"x")
    bucket.write_bytes("tree/a.txt", b"a")
    for uri, is_dir in [
        (f"gs://{gcs_emulator.bucket}", True),  # a bucket root, no I/O
        (gcs_emulator.uri(f"{prefix}/anything/"), True),  # a trailing '/', no I/O
        (gcs_emulator.uri(f"{prefix}/tree"), True),  # objects under it
        (gcs_emulator.uri(f"{prefix}/blob.bin"), False),  # the object itself
        (gcs_emulator.uri(f"{prefix}/missing"), False),  # nothing there
    ]:
        data = kc.Data(uri)
        assert (data.is_gcs, data.is_local, data.is_dir) == (True, False, is_dir), uri
