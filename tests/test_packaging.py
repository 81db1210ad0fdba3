"""The wheel carries everything an installed inferbot needs: every code package, the knowledge
base (bot/knowledge) and the migrations. The package list is explicit (the KB is mapped in
from the top of the repository), so this test keeps it in step with the tree."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_and_kb_folder_is_listed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    code = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "bot").rglob("*.py")
            if "__pycache__" not in p.parts}
    knowledge = {"bot.knowledge", *(f"bot.knowledge.{d.name}" for d in
                                    (ROOT / "knowledge").iterdir() if d.is_dir())}
    assert code | knowledge == listed
    assert config["package-dir"]["bot.knowledge"] == "knowledge"
    data = config["package-data"]
    assert all(data.get(pkg) == ["*.yaml"] for pkg in knowledge)
