"""Extra links: each kind of job link is an Airflow operator link fed by XCom."""

from __future__ import annotations

from kinetic_airflow.links import LINKS, XCOM_KEYS, link_xcoms

import kinetic_core as kc


def test_every_link_kind_has_an_operator_link_and_an_xcom() -> None:
    assert [link.xcom_key for link in LINKS] == [XCOM_KEYS[k] for k in kc.LINK_KINDS]
    job = kc.JobHandle.from_dict(
        {"job_id": "k0123abcd-2", "storage": "gs://b/p", "target": {"backend": "local"}}
    )
    assert link_xcoms(job) == {
        "kinetic_job_url": "",
        "kinetic_logs_url": "",
        "kinetic_files_url": "https://console.cloud.google.com/storage/browser/b/p/jobs/k0123abcd-2",
    }
    assert link_xcoms(None) == dict.fromkeys(XCOM_KEYS.values(), "")


def test_openlineage_dataset_names_follow_the_naming_spec() -> None:
    from kinetic_airflow.lineage import data_uri, dataset_name

    assert dataset_name("gs://bucket/kinetic/outputs/k1") == ("gs://bucket", "kinetic/outputs/k1")
    assert dataset_name("file:///data/outputs/k1") == ("file", "/data/outputs/k1")
    # Data arguments: a gs:// prefix (trailing /) names the folder; a local path is absolute
    assert dataset_name(data_uri(kc.Data("gs://bucket/raw/2026/"))) == ("gs://bucket", "raw/2026")
    assert dataset_name(data_uri(kc.Data("gs://bucket"))) == ("gs://bucket", "/")
    assert dataset_name(data_uri(kc.Data("file:///data/train.csv"))) == ("file", "/data/train.csv")
    assert dataset_name(data_uri(kc.Data("/data/images/"))) == ("file", "/data/images")
