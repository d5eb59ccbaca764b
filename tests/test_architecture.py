"""The layers of docs/architecture.md, enforced: no module imports a higher layer, and no two
modules import each other through any chain, lazy imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS = {
    "routing_rl.core": 0,
    "routing_rl.nets": 1,
    "routing_rl.data": 1,
    "routing_rl.training": 2,
    "routing_rl.envs": 3,
    "routing_rl.agents": 4,
    "routing_rl.app": 5,
}
"""Each folder's floor; a module may import its own floor and those below."""

ALLOWED_UPWARD = {("routing_rl", "routing_rl.envs.registration")}
"""``import routing_rl`` registers the env ids; registration imports nothing of the package."""


def package_modules() -> dict[str, Path]:
    """Module name → file, for every module installed under ``routing_rl``."""
    folders = {"routing_rl": ROOT / "routing_rl", "routing_rl.envs": ROOT / "envs", "routing_rl.agents": ROOT / "agents"}
    modules = {}
    for prefix, folder in folders.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((prefix, *parts))
            if prefix == "routing_rl" and len(parts) and parts[0] in ("envs", "agents"):
                continue
            modules[name] = path
    return modules


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``path`` imports, at any depth of the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = [f"{node.module}.{alias.name}" for alias in node.names]
            # ``from package import submodule`` needs the submodule, not what the package re-exports
            names = submodules if all(name in modules for name in submodules) else [node.module, *submodules]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def layer(module: str) -> int | None:
    matches = [floor for prefix, floor in LAYERS.items() if module == prefix or module.startswith(prefix + ".")]
    return matches[0] if matches else None


def graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imports_of(path, modules) - {name} for name, path in modules.items()}


def test_every_module_belongs_to_a_layer():
    loose = [m for m in package_modules() if m != "routing_rl" and layer(m) is None]
    assert not loose, f"modules outside every layer of docs/architecture.md: {loose}"


def test_no_module_imports_a_higher_layer():
    upward = [
        f"{module} (floor {layer(module)}) imports {target} (floor {layer(target)})"
        for module, targets in graph().items()
        for target in targets
        if (module, target) not in ALLOWED_UPWARD
        and layer(target) is not None
        and (layer(module) is None or layer(target) > layer(module))
    ]
    assert not upward, "imports that climb the layers:\n" + "\n".join(upward)


def test_no_import_cycles():
    edges = graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges.get(module, ())):
            if (module, target) in ALLOWED_UPWARD:
                continue
            if state.get(target) == 1:
                cycles.append(" → ".join(stack[stack.index(target):] + [target]) if target in stack else f"{module} → {target}")
            elif target not in state:
                visit(target, stack + [target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_checker_sees_an_upward_import(tmp_path):
    """The checker itself: a planted upward import is found."""
    planted = tmp_path / "planted.py"
    planted.write_text("def late():\n    from routing_rl.app.runs import train\n")
    modules = package_modules()
    assert "routing_rl.app.runs" in imports_of(planted, modules)
    assert layer("routing_rl.app.runs") > layer("routing_rl.core.graph")
