"""Tests mirror the package: every module of ``relayflow/core`` has a test module of the same
name at the same place under ``tests/unit`` (``relayflow/core/engine/focus.py`` ->
``tests/unit/engine/test_focus.py``; a top-level core module's is ``tests/unit/test_<name>.py``),
or under ``tests/integration`` for one that an adapter's integration tests cover. A module with
no behaviour of its own is named in ``NO_BEHAVIOUR``, with why.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "relayflow" / "core"
TEST_ROOTS = (ROOT / "tests" / "unit", ROOT / "tests" / "integration")

# Modules (relative to relayflow/core) that need no test module of their own: nothing in them
# decides anything. Each is used, and so exercised, by the tests of the modules that use it.
NO_BEHAVIOUR = {
    # The ports: protocols the adapters implement (their tests are the adapters' in
    # tests/integration and relayflow.testing.memory's), and the plain values they pass.
    "ports.py": "protocols and the frozen values they pass; no logic",
    # One base class and its families, each a "Raised when…" docstring; a constructor that
    # keeps a message and a code.
    "errors.py": "exception classes only",
    # What the engine's entry points answer: enums and frozen dataclasses.
    "engine/outcomes.py": "enums and dataclasses of the engine's answers only",
}


def expected_test(module: Path, core: Path = CORE) -> Path:
    """Where the test module of ``module`` (a file under ``core``) lives, under tests/unit."""
    relative = module.relative_to(core)
    return Path("tests", "unit", *relative.parent.parts, f"test_{relative.name}")


def missing_tests(
    core: Path = CORE, roots: tuple[Path, ...] = TEST_ROOTS, allowed: frozenset[str] = frozenset()
) -> list[tuple[str, Path]]:
    """Every module under ``core`` (``__init__.py`` aside) with no test module of its name at
    its mirrored place under any of ``roots``, unless ``allowed`` names it: (module, where
    its test module should be)."""
    missing = []
    for module in sorted(core.rglob("*.py")):
        relative = module.relative_to(core)
        if module.name == "__init__.py" or relative.as_posix() in allowed:
            continue
        mirrored = Path(*relative.parent.parts, f"test_{relative.name}")
        if not any((root / mirrored).is_file() for root in roots):
            missing.append((relative.as_posix(), expected_test(module, core)))
    return missing


def test_every_core_module_has_a_test_module_of_its_name() -> None:
    missing = missing_tests(allowed=frozenset(NO_BEHAVIOUR))
    shown = [f"relayflow/core/{module}: write {test}" for module, test in missing]
    assert shown == [], (
        "modules of relayflow/core without a test module of their name (write one, or, if the "
        "module decides nothing, name it in NO_BEHAVIOUR with why):\n" + "\n".join(shown)
    )


def test_every_module_said_to_have_no_behaviour_exists_and_has_no_tests_of_its_own() -> None:
    for module in NO_BEHAVIOUR:
        assert (CORE / module).is_file(), f"{module} is gone: take it out of NO_BEHAVIOUR"
        test = ROOT / expected_test(CORE / module)
        assert not test.exists(), f"{module} has {test.relative_to(ROOT)}: not NO_BEHAVIOUR"


def test_a_module_without_tests_is_named_with_where_its_tests_belong(tmp_path: Path) -> None:
    # given a package with a top-level module and a subpackage's module, one of them tested
    core = tmp_path / "core"
    (core / "engine").mkdir(parents=True)
    for name in ("__init__.py", "clock.py", "engine/__init__.py", "engine/focus.py"):
        (core / name).write_text("")
    unit = tmp_path / "unit"
    (unit / "engine").mkdir(parents=True)
    (unit / "engine" / "test_focus.py").write_text("")
    # then only the untested one is named, with its test module's place
    assert missing_tests(core, (unit,)) == [("clock.py", Path("tests/unit/test_clock.py"))]
    # and an integration test of its name, or its being allowed, is enough
    integration = tmp_path / "integration"
    integration.mkdir()
    (integration / "test_clock.py").write_text("")
    assert missing_tests(core, (unit, integration)) == []
    assert missing_tests(core, (unit,), allowed=frozenset({"clock.py"})) == []
    # and a test of the same name in another place does not count
    (unit / "test_focus.py").write_text("")
    (unit / "engine" / "test_focus.py").unlink()
    assert missing_tests(core, (unit, integration)) == [
        ("engine/focus.py", Path("tests/unit/engine/test_focus.py"))
    ]
