"""relayflow.app: RELAYFLOW_APP names a registry (or a factory of one); every way it can be
wrong is refused with a message naming the target and the problem."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from relayflow.app import AppError, load_registry
from relayflow.settings import DEFAULT_APP, Settings

FLOW = """
from relayflow import ActionStep, Flow, Registry

def step(ctx):
    return {{}}

def flow(name="hello", version=1):
    return Flow(name=name, version=version, steps=(ActionStep("say", step),))
{body}
"""


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def write_app(app_dir: Path, module: str, body: str) -> None:
    package = app_dir / module.split(".")[0]
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / f"{module.split('.')[1]}.py").write_text(FLOW.format(body=textwrap.dedent(body)))


def refusal(target: str) -> str:
    with pytest.raises(AppError) as info:
        load_registry(target, Settings())
    message = str(info.value)
    assert message.startswith(f"RELAYFLOW_APP={target!r}: ")
    return message


def test_the_default_app_is_the_reference_app() -> None:
    registry = load_registry(DEFAULT_APP, Settings())
    assert registry.names() == ["approval", "fleet", "registration"]


def test_the_reference_apps_payment_flow_runs_where_there_is_a_keyset() -> None:
    """Its card and token are sealed: without a keyset the services would refuse to start."""
    with_keyset = Settings(sensitive_keyset="{}")  # read by the services, not by the app
    assert "payment" in load_registry(DEFAULT_APP, with_keyset).names()


def test_a_registry_object_is_loaded(app_dir: Path) -> None:
    write_app(app_dir, "team1.flows", "registry = Registry([flow()])")
    assert load_registry("team1.flows:registry", Settings()).names() == ["hello"]


def test_a_factory_is_called_with_the_settings(app_dir: Path) -> None:
    write_app(
        app_dir,
        "team2.flows",
        """
        def build(settings):
            return Registry([flow(name=settings.location.replace("-", "_"))])
        """,
    )
    registry = load_registry("team2.flows:build", Settings(location="europe-west1"))
    assert registry.names() == ["europe_west1"]


def test_a_factory_without_parameters_is_called_without_them(app_dir: Path) -> None:
    write_app(app_dir, "team3.flows", "def build():\n    return Registry([flow()])")
    assert load_registry("team3.flows:build", Settings()).names() == ["hello"]


def test_a_target_that_is_not_module_colon_attribute_is_refused() -> None:
    assert "expected 'package.module:attribute'" in refusal("myflows.flows")


def test_a_module_that_does_not_exist_is_named() -> None:
    message = refusal("no_such_package.flows:registry")
    assert "no module named 'no_such_package'" in message
    assert "PYTHONPATH" in message


def test_a_module_whose_own_import_fails_says_what_failed(app_dir: Path) -> None:
    write_app(app_dir, "team4.flows", "import a_dependency_nobody_installed")
    message = refusal("team4.flows:registry")
    assert "importing 'team4.flows' failed" in message
    assert "a_dependency_nobody_installed" in message


def test_a_module_with_a_syntax_error_is_refused(app_dir: Path) -> None:
    write_app(app_dir, "team5.flows", "registry = Registry([flow()]")
    assert "SyntaxError" in refusal("team5.flows:registry")


def test_a_missing_attribute_is_named(app_dir: Path) -> None:
    write_app(app_dir, "team6.flows", "registry = Registry([flow()])")
    assert "has no attribute 'registy'" in refusal("team6.flows:registy")


def test_something_that_is_not_a_registry_is_refused(app_dir: Path) -> None:
    write_app(app_dir, "team7.flows", "registry = [flow()]")
    assert "is a list, not a Registry or a callable that returns one" in refusal(
        "team7.flows:registry"
    )


def test_a_factory_that_returns_something_else_is_refused(app_dir: Path) -> None:
    write_app(app_dir, "team8.flows", "def build(settings):\n    return [flow()]")
    assert "returned a list, not a Registry" in refusal("team8.flows:build")


def test_a_factory_that_raises_says_why(app_dir: Path) -> None:
    write_app(app_dir, "team9.flows", "def build(settings):\n    raise KeyError('API_URL')")
    assert "building the registry failed: KeyError: 'API_URL'" in refusal("team9.flows:build")


def test_two_flows_of_one_name_and_version_are_refused(app_dir: Path) -> None:
    write_app(app_dir, "team10.flows", "registry = Registry([flow(), flow()])")
    message = refusal("team10.flows:registry")
    assert "flow 'hello' version 1 is registered twice" in message


def test_two_versions_of_one_flow_are_fine(app_dir: Path) -> None:
    write_app(app_dir, "team11.flows", "registry = Registry([flow(), flow(version=2)])")
    registry = load_registry("team11.flows:registry", Settings())
    assert registry.versions("hello") == [1, 2]
    assert registry.get("hello").version == 2


def test_an_empty_registry_is_refused(app_dir: Path) -> None:
    write_app(app_dir, "team12.flows", "registry = Registry()")
    assert "the registry has no flows" in refusal("team12.flows:registry")


def test_an_invalid_flow_defined_at_import_is_refused_as_such(app_dir: Path) -> None:
    write_app(app_dir, "team13.flows", "registry = Registry([flow(name='Bad Name')])")
    message = refusal("team13.flows:registry")
    assert "defines an invalid flow" in message and "'Bad Name'" in message
