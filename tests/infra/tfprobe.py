"""Run parts of infra/terraform with the terraform binary, where it is installed.

The google provider cannot be downloaded, so no resource of relayflow's can be planned; but
variables (with their validations), locals and Terraform's built-in ``terraform_data`` need no
provider. A probe copies the blocks a test is about into a module of its own, calls it with
sample inputs and reads what Terraform made of them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

TERRAFORM_BIN = shutil.which("terraform")
needs_terraform = pytest.mark.skipif(TERRAFORM_BIN is None, reason="terraform is not installed")

# A local of a fmt-formatted locals block starts at two spaces; its continuation lines are
# indented deeper or close it at two spaces (``  }``, ``  ] : {}``).
_LOCAL_START = re.compile(r"^  ([A-Za-z_][\w-]*)\s*=")


def block(text: str, opener: str) -> str:
    """The text of the block that starts with ``opener`` up to its closing brace."""
    start = text.index(opener)
    depth = 0
    for index in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0 and text[index] == "}":
            return text[start : index + 1]
    raise AssertionError(f"unclosed {opener}")


def local(text: str, name: str) -> str:
    """``name = ...`` of a locals block, as written (its comments left out)."""
    lines = text.splitlines()
    starts = ((i, _LOCAL_START.match(line)) for i, line in enumerate(lines))
    first = next(i for i, match in starts if match and match[1] == name)
    taken = [lines[first]]
    for line in lines[first + 1 :]:
        if _LOCAL_START.match(line) or line.startswith(("  #", "}")) or not line.strip():
            break
        taken.append(line)
    return "\n".join(taken)


def terraform_env(root: Path) -> dict[str, str]:
    """No checkpoint calls, no user configuration: only what the probe needs."""
    return {"TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1", "HOME": str(root)}


def hcl(value: Any) -> str:
    """A Python value as an HCL expression (JSON is one)."""
    return json.dumps(value)


def write_calls(root: Path, cases: dict[str, dict[str, Any]], read: str = "") -> None:
    """``root/main.tf``: a call of the module in ``root/probe`` per case, with the case's
    inputs, and an output of the same name with what the call made (``read``: one of its
    outputs, e.g. ".tenant_topics"; the whole module by default)."""
    (root / "main.tf").write_text(
        "\n".join(
            f'module "{name}" {{\n  source = "./probe"\n'
            + "".join(f"  {k} = {hcl(v)}\n" for k, v in inputs.items())
            + f'}}\noutput "{name}" {{ value = module.{name}{read} }}\n'
            for name, inputs in cases.items()
        ),
        encoding="utf-8",
    )


def run(root: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """``terraform init`` (once) and ``terraform COMMAND`` in ``root``; the caller checks."""
    assert TERRAFORM_BIN
    env = terraform_env(root)
    if not (root / ".terraform").exists():
        subprocess.run(
            [TERRAFORM_BIN, "init", "-input=false", "-no-color"],
            cwd=root,
            env=env,
            check=True,
            capture_output=True,
        )
    return subprocess.run(
        [TERRAFORM_BIN, *command, "-input=false", "-no-color"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )


def outputs(root: Path) -> dict[str, Any]:
    """The values of the root's outputs after an apply."""
    assert TERRAFORM_BIN
    done = subprocess.run(
        [TERRAFORM_BIN, "output", "-json", "-no-color"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        env=terraform_env(root),
    )
    return {name: out["value"] for name, out in json.loads(done.stdout).items()}
