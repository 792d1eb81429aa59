"""``target_options()``: the Target described for the providers' saved configurations."""

from __future__ import annotations

import dataclasses

import pytest

import kinetic_core as kc


def option(name: str) -> kc.TargetOption:
    [found] = [o for o in kc.target_options() if o.name == name]
    return found


def test_every_target_field_is_described_with_a_valid_example() -> None:
    options = kc.target_options()
    assert [o.name for o in options] == [f.name for f in dataclasses.fields(kc.Target)]
    for o in options:
        assert o.help and o.example is not None, (
            f"describe {o.name} in kinetic_core/config/options.py"
        )
    kc.Target(**{o.name: o.example for o in options}).validate()
    assert {o.name for o in options if o.secret} == {"signing_key", "kubeconfig"}


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("max_recoveries", "3", 3),
        ("recover_on_exit_codes", "75,143", [75, 143]),
        ("recover_on_exit_codes", "[75]", [75]),
        ("spot", "true", True),
        ("life_span", "60", 60.0),
        ("node_selector", '{"pool": "tpu"}', {"pool": "tpu"}),
        ("env", "A,B_*", ["A", "B_*"]),
        ("pod_template", "/etc/pod.yaml", "/etc/pod.yaml"),  # a path stays a path
        ("pod_template", '{"dnsPolicy": "None"}', {"dnsPolicy": "None"}),
        ("namespace", "42", "42"),  # text options are never converted
        ("max_recoveries", 3, 3),  # already typed
    ],
)
def test_parse_reads_text_as_the_options_type(name: str, text: object, value: object) -> None:
    assert option(name).parse(text) == value


def test_unparseable_text_is_a_config_error_naming_the_option() -> None:
    with pytest.raises(kc.ConfigError, match="max_recoveries"):
        option("max_recoveries").parse("three")
    with pytest.raises(kc.ConfigError, match="pod_template"):
        option("pod_template").parse("{not json")


def test_json_schema_of_lists_dicts_and_secrets() -> None:
    assert option("recover_on_exit_codes").json_schema() == {
        "type": ["array", "null"],
        "items": {"type": "integer"},
    }
    assert option("pod_template").json_types == ["object", "string", "null"]
    assert option("kubeconfig").json_schema()["format"] == "password"
