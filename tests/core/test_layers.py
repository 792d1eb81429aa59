"""kinetic_core keeps its layers (issue 32): ranks, no cycles, a facade nothing below imports.

Each rule is a plain function in ``layer_rules`` over ``{path: source}``; the tests run it on
the real tree, and again on a copy with one import planted, to show the rule catches it.
"""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

import kinetic_core
from tests.core import layer_rules as rules

ROOT = Path(__file__).resolve().parents[2]
PROVIDERS = ROOT / "providers"

#: What cli and ui may import besides the facade and their own package, and why each is not
#: taken from the facade. Keep it as small as the code needs (a stale entry fails a test).
ALLOWED: dict[str, set[str]] = {
    "kinetic_core.cli": {
        "kinetic_core.control.polling",  # poll_ticks: `jobs top`'s refresh loop, internal
        "kinetic_core.control.usage",  # combine, per_job: the usage table's grouping
        "kinetic_core.ops.gc",  # cutoff_of: parses --older-than as collect_garbage does
        "kinetic_core.runtime.debugging",  # describe: a debug hold's line, internal
        "kinetic_core.ui",  # serve: the facade exports only dashboard_app
        "kinetic_core.util.words",  # plural: "1 job", "2 jobs", no public API
    },
    "kinetic_core.ui": {
        "kinetic_core.data.outputs",  # place, Place: where a job's outputs lie, internal
        "kinetic_core.jobs.listing",  # Query, INTERNAL_TAG_PREFIX: paged listing, internal
        "kinetic_core.storage",  # Storage, open_storage: the store is no public API
    },
}

Sources = Mapping[str, str]


#: Read once per run: most tests only read, and the planted ones copy.
_read = functools.cache(rules.read_sources)


def core_sources() -> dict[str, str]:
    return dict(_read(ROOT, "kinetic_core"))


def provider_sources() -> dict[str, str]:
    return dict(_read(ROOT, "providers"))


def modules_in(sources: Sources) -> set[str]:
    return {rules.module_of(file) for file in sources}


def plant(sources: Sources, plants: list[tuple[str, str]]) -> tuple[dict[str, str], list[str]]:
    """A copy of ``sources`` with each line appended to its file, and each planted file:line."""
    planted = dict(sources)
    wheres = []
    for file, line in plants:
        assert file in planted, f"no such file to plant in: {file}"
        text = planted[file].rstrip("\n")
        planted[file] = f"{text}\n{line}\n"
        wheres.append(f"{file}:{len(text.splitlines()) + 1}")
    return planted, wheres


def fail_message(rule: str, found: list[str]) -> str:
    return f"rule {rule} is broken:\n  " + "\n  ".join(found)


# One name per rule: a sources mapping in, its violations out.
RULES: dict[str, Callable[[Sources], list[str]]] = {
    "1 no cycle between units": lambda s: rules.unit_cycles(rules.find_imports(s)),
    "2 own rank or lower": lambda s: rules.upward_imports(rules.find_imports(s), modules_in(s)),
    "3 facade not imported below it": lambda s: rules.facade_imported_from_below(
        rules.find_imports(s)
    ),
    "4 backend internals only in backends": lambda s: rules.backend_internals_imported_outside(
        rules.find_imports(s)
    ),
    "5 runtime imports nothing above it": lambda s: rules.runtime_imports_above_it(
        rules.find_imports(s)
    ),
    "6 storage imports only util, errors": lambda s: rules.storage_imports_beyond_util(
        rules.find_imports(s)
    ),
    "7 cli, ui: facade and ALLOWED": lambda s: rules.past_the_allow_list(
        rules.find_imports(s), ALLOWED
    ),
    "8 no module cycle": lambda s: rules.module_cycles(rules.find_imports(s)),
}


def check(rule: str) -> None:
    found = RULES[rule](core_sources())
    assert not found, fail_message(rule, found)


def test_layer_units_form_no_cycle() -> None:
    check("1 no cycle between units")


def test_modules_import_only_their_rank_or_lower() -> None:
    check("2 own rank or lower")


def test_nothing_below_the_facade_imports_it() -> None:
    check("3 facade not imported below it")


def test_only_backends_import_one_backend() -> None:
    check("4 backend internals only in backends")


def test_runtime_imports_no_backend_control_or_job_code() -> None:
    """Separate from the rank rule: every job's start waits on what the runtime imports."""
    check("5 runtime imports nothing above it")


def test_storage_imports_only_util_and_errors() -> None:
    check("6 storage imports only util, errors")


def test_cli_and_ui_import_the_facade_and_their_allow_list() -> None:
    check("7 cli, ui: facade and ALLOWED")


def test_allow_list_has_no_stale_entry() -> None:
    found = rules.stale_allowances(rules.find_imports(core_sources()), ALLOWED)
    assert not found, fail_message("7 ALLOWED as small as the code needs", found)


def test_core_import_graph_has_no_cycle() -> None:
    check("8 no module cycle")


def test_providers_use_only_the_public_core_api() -> None:
    found = rules.provider_imports_past_the_api(provider_sources(), set(kinetic_core.__all__))
    assert not found, fail_message("8 providers use kinetic_core.__all__", found)


def test_core_top_level_has_at_most_16_entries() -> None:
    found = rules.too_many_top_level(rules.top_level_entries(ROOT))
    assert not found, fail_message("9 at most 16 entries in kinetic_core/", found)


@pytest.mark.parametrize(
    ("rule", "plants"),
    [
        pytest.param(
            "1 no cycle between units",
            [
                (
                    "kinetic_core/backends/local/backend.py",
                    "from kinetic_core.control import recovery",
                )
            ],
            id="1-backend-imports-control",
        ),
        pytest.param(
            "1 no cycle between units",
            [
                ("kinetic_core/errors.py", "from kinetic_core.states import JobStatus"),
                ("kinetic_core/states.py", "from kinetic_core.errors import KineticError"),
            ],
            id="1-same-rank-cycle",
        ),
        pytest.param(
            "2 own rank or lower",
            [
                (
                    "kinetic_core/backends/local/backend.py",
                    "from kinetic_core.control import recovery",
                )
            ],
            id="2-backend-imports-control",
        ),
        pytest.param(
            "2 own rank or lower",
            [("kinetic_core/records/envelope.py", "import kinetic_core.batch")],
            id="2-records-imports-batch",
        ),
        pytest.param(
            "2 own rank or lower",
            [("kinetic_core/__init__.py", "from kinetic_core.cli import app")],
            id="2-facade-imports-cli",
        ),
        pytest.param(
            "2 own rank or lower",
            [("kinetic_core/jobs/handle.py", "import kinetic_core.runner")],
            id="2-old-module-name",
        ),
        pytest.param(
            "3 facade not imported below it",
            [("kinetic_core/jobs/handle.py", "import kinetic_core")],
            id="3-import-facade",
        ),
        pytest.param(
            "3 facade not imported below it",
            [("kinetic_core/runtime/runner.py", "from kinetic_core import __version__")],
            id="3-name-from-facade",
        ),
        pytest.param(
            "4 backend internals only in backends",
            [
                (
                    "kinetic_core/jobs/listing.py",
                    "from kinetic_core.backends.kubernetes import accelerators",
                )
            ],
            id="4-listing-imports-kubernetes",
        ),
        pytest.param(
            "4 backend internals only in backends",
            [("kinetic_core/ops/gc.py", "from kinetic_core.backends import local")],
            id="4-gc-imports-local-backend",
        ),
        pytest.param(
            "5 runtime imports nothing above it",
            [("kinetic_core/runtime/runner.py", "import kinetic_core.backends.kubernetes.client")],
            id="5-runner-imports-kubernetes-client",
        ),
        pytest.param(
            "5 runtime imports nothing above it",
            [("kinetic_core/runtime/signals.py", "from kinetic_core.control import polling")],
            id="5-signals-imports-control",
        ),
        pytest.param(
            "6 storage imports only util, errors",
            [("kinetic_core/storage/gcs.py", "from kinetic_core.config import target")],
            id="6-storage-imports-config",
        ),
        pytest.param(
            "7 cli, ui: facade and ALLOWED",
            [("kinetic_core/cli/app.py", "from kinetic_core.jobs import submission")],
            id="7-cli-imports-submission",
        ),
        pytest.param(
            "7 cli, ui: facade and ALLOWED",
            [("kinetic_core/ui/views.py", "from kinetic_core.control import recovery")],
            id="7-ui-imports-recovery",
        ),
        pytest.param(
            "8 no module cycle",
            [("kinetic_core/records/layout.py", "from kinetic_core.jobs import listing")],
            id="8-layout-imports-listing",
        ),
        pytest.param(
            "8 no module cycle",
            [
                ("kinetic_core/errors.py", "from kinetic_core.states import JobStatus"),
                ("kinetic_core/states.py", "from kinetic_core.errors import KineticError"),
            ],
            id="8-errors-states",
        ),
    ],
)
def test_rule_reports_a_planted_violation(rule: str, plants: list[tuple[str, str]]) -> None:
    """A rule that cannot fail proves nothing: each one must name the line planted."""
    sources, wheres = plant(core_sources(), plants)
    found = RULES[rule](sources)
    for where in wheres:
        assert any(message.startswith(f"{where} ") for message in found), (where, found)


@pytest.mark.parametrize(
    ("rule", "file", "line"),
    [
        pytest.param(
            "1 no cycle between units",
            "kinetic_core/__init__.py",
            "from kinetic_core.ui import views",
            id="1-facade-reexports-ui",
        ),
        pytest.param(
            "2 own rank or lower",
            "kinetic_core/__init__.py",
            "from kinetic_core.ui import views",
            id="2-facade-reexports-ui",
        ),
        pytest.param(
            "2 own rank or lower",
            "kinetic_core/jobs/listing.py",
            "from kinetic_core import backends",
            id="2-protocol-package-from-rank-8",
        ),
        pytest.param(
            "3 facade not imported below it",
            "kinetic_core/util/ids.py",
            "from kinetic_core import errors",
            id="3-module-from-kinetic_core",
        ),
        pytest.param(
            "4 backend internals only in backends",
            "kinetic_core/backends/local/kind.py",
            "from kinetic_core.backends.kubernetes import client",
            id="4-inside-backends",
        ),
        pytest.param(
            "4 backend internals only in backends",
            "kinetic_core/jobs/listing.py",
            "import kinetic_core.backends",
            id="4-protocol-package",
        ),
        pytest.param(
            "7 cli, ui: facade and ALLOWED",
            "kinetic_core/cli/app.py",
            "from kinetic_core import __version__",
            id="7-name-from-facade",
        ),
    ],
)
def test_rule_lets_an_allowed_import_pass(rule: str, file: str, line: str) -> None:
    """The exceptions the rules name stay allowed, so no rule is stricter than written."""
    sources, (where,) = plant(core_sources(), [(file, line)])
    found = RULES[rule](sources)
    assert not [m for m in found if m.startswith(f"{where} ")], found


@pytest.mark.parametrize(
    "line",
    [
        "from kinetic_core.jobs.handle import JobHandle",
        "import kinetic_core.batch",
        "from kinetic_core import _EXPORTS",
        "x = kc.moved",
    ],
)
def test_provider_rule_reports_a_planted_violation(line: str) -> None:
    sources, (where,) = plant(provider_sources(), [("providers/kinetic_prefect/calling.py", line)])
    found = rules.provider_imports_past_the_api(sources, set(kinetic_core.__all__))
    assert any(message.startswith(where) for message in found), found


def test_allow_list_rule_reports_a_planted_stale_entry() -> None:
    allowed = {**ALLOWED, "kinetic_core.cli": ALLOWED["kinetic_core.cli"] | {"kinetic_core.batch"}}
    found = rules.stale_allowances(rules.find_imports(core_sources()), allowed)
    assert any("kinetic_core.batch," in message for message in found), found


def test_top_level_rule_reports_a_planted_entry() -> None:
    entries = rules.top_level_entries(ROOT)
    planted = [*entries, *(f"extra{n}.py" for n in range(17 - len(entries)))]
    assert rules.too_many_top_level(planted)


def test_imports_read_every_form_and_no_string() -> None:
    """The import semantics the rules rest on: submodule names, the facade, relative, nested."""
    source = textwrap.dedent(
        """\
        import kinetic_core
        from kinetic_core import ui, __version__
        import kinetic_core.jobs.listing as listing
        from . import listing
        from .listing import Query
        if TYPE_CHECKING:
            from kinetic_core.ui import dashboard_app
        def f():
            from .. import jobs
        NAME = "kinetic_core.runner"
        import kinetic_core_extras
        """
    )
    sources = {
        "kinetic_core/__init__.py": "",
        "kinetic_core/ui/__init__.py": "",
        "kinetic_core/jobs/__init__.py": "",
        "kinetic_core/jobs/listing.py": "",
        "kinetic_core/jobs/handle.py": source,
    }
    found = {(imp.line, imp.target) for imp in rules.find_imports(sources)}
    assert found == {
        (1, "kinetic_core"),
        (2, "kinetic_core.ui"),
        (2, "kinetic_core"),
        (3, "kinetic_core.jobs.listing"),
        (4, "kinetic_core.jobs.listing"),
        (5, "kinetic_core.jobs.listing"),
        (7, "kinetic_core.ui"),
        (9, "kinetic_core.jobs"),
    }
