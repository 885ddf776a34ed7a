"""No import cycle anywhere in relayflow, module by module: imports inside functions and under
TYPE_CHECKING count, as at the top of a module.

import-linter's ``acyclic_siblings`` contract (pyproject.toml, run by ``make lint``) forbids
cycles between the children of each package; it does not see a cycle through a package's own
``__init__`` (``pkg`` imports ``pkg.a``, which imports ``pkg`` again), which this test does.
"""

from __future__ import annotations

import grimp


def cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """One cycle through each set of modules that import each other, shortest first found,
    starting and ending at the same module."""
    found: dict[frozenset[str], tuple[str, ...]] = {}
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported == module:
                cycle: tuple[str, ...] = (module, module)
            else:
                back = graph.find_shortest_chain(importer=imported, imported=module)
                if back is None:
                    continue
                cycle = (module, *back)
            found.setdefault(frozenset(cycle), cycle)
    return sorted(found.values())


def test_no_module_of_relayflow_imports_itself_through_others() -> None:
    graph = grimp.build_graph("relayflow", include_external_packages=False, cache_dir=None)
    shown = [" -> ".join(cycle) for cycle in cycles(graph)]
    assert shown == [], "import cycles (break each one):\n" + "\n".join(shown)


def test_a_cycle_through_a_packages_init_is_named() -> None:
    graph = grimp.ImportGraph()
    graph.add_import(importer="pkg", imported="pkg.a")
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    assert cycles(graph) == [("pkg", "pkg.a", "pkg.b", "pkg")]
