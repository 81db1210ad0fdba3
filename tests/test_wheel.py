"""The wheel is the product: built from the sources, installed into a fresh virtual environment
(not editable, no test tools), every subcommand runs on a fresh HOME with nothing configured,
and each failure a new user meets is its exit code and one line on stderr, never a traceback.
"""

from __future__ import annotations

import ctypes.util
import json
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from bot.collect.inventory import InventoryFile

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
# What the image copies to build (Dockerfile): nothing else goes into the wheel.
SOURCES = ("pyproject.toml", "README.md", "bot", "knowledge")
SUBCOMMANDS = ("diagnose", "size", "history", "resolve", "db", "kb", "check", "serve", "doctor")


@dataclass
class Installed:
    bin: Path
    home: Path
    work: Path

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """`inferbot ARGS` as a new user runs it: a fresh HOME, no INFERBOT_*/SLACK_* set."""
        base = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8"}
        return subprocess.run([str(self.bin / "inferbot"), *args], env={**base, **env},
                              cwd=self.work, capture_output=True, text=True, timeout=120)


def one_line_error(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("inferbot: "), done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, src / name)
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist),
                    str(src)], check=True, capture_output=True, timeout=600)
    [wheel] = dist.glob("inferbot-*.whl")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True)
    pip = env_dir / "bin" / "pip"
    subprocess.run([str(pip), "install", "-q", str(wheel)], check=True, capture_output=True,
                   timeout=900)
    home = tmp / "home"
    home.mkdir()
    work = tmp / "work"
    work.mkdir()
    yield Installed(env_dir / "bin", home, work)


def test_the_wheel_carries_no_editable_link_and_every_dependency(installed: Installed) -> None:
    done = subprocess.run([str(installed.bin / "python"), "-c",
                           "import bot, slack_bolt, paramiko, pynvml, sqlalchemy, alembic, "
                           "psycopg, matplotlib; print(bot.__file__)"],
                          capture_output=True, text=True, timeout=120, cwd=installed.work)
    assert done.returncode == 0, done.stderr
    assert "site-packages" in done.stdout and str(ROOT) not in done.stdout


@pytest.mark.parametrize("command", ["", *SUBCOMMANDS])
def test_every_subcommand_has_help(installed: Installed, command: str) -> None:
    done = installed.run(*[command] * bool(command), "--help")
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert done.stdout.startswith(f"usage: inferbot {command}".rstrip())


def test_a_fresh_home_diagnoses_and_keeps_history_in_embedded_sqlite(installed: Installed
                                                                     ) -> None:
    assert json.loads(installed.run("history", "--json").stdout) == []
    example = ROOT / "examples" / "vllm-max-model-len.log"
    done = installed.run("diagnose", str(example))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "incident 1: first time seen" in done.stdout
    [row] = json.loads(installed.run("history", "--json").stdout)
    assert row["incident_id"] == 1
    assert (installed.home / ".local/share/inferbot/inferbot.db").is_file()
    assert installed.run("resolve", "1", "--fix", "--max-model-len 32768").returncode == 0
    assert one_line_error(installed.run("resolve", "99", "--fix", "x"), 1) == (
        "inferbot: no incident 99 in the incident store")
    for args in (["db", "upgrade"], ["kb", "validate"], ["kb", "list"],
                 ["size", "llama-3.1-8b", "--gpu", "H100"]):
        done = installed.run(*args)
        assert done.returncode == 0 and not done.stderr, (args, done.stderr)


def test_serve_without_tokens_names_them_and_the_readme_section(installed: Installed) -> None:
    socket = one_line_error(installed.run("serve"), 2)
    assert "not set: SLACK_BOT_TOKEN, SLACK_APP_TOKEN" in socket
    assert '"Slack", "Create the app"' in socket
    http = one_line_error(installed.run("serve", "--http"), 2)
    assert "not set: SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET" in http


def test_doctor_names_an_unsupported_database_url(installed: Installed) -> None:
    done = installed.run("doctor", INFERBOT_DATABASE_URL="mysql://u@h/db")
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    [line] = [ln for ln in done.stdout.splitlines() if "INFERBOT_DATABASE_URL" in ln]
    assert line.startswith("FAIL config: INFERBOT_DATABASE_URL=mysql://u@h/db: unsupported "
                           "scheme mysql://")
    assert "MySQLdb" not in done.stdout and "driver" not in line
    # any other command says the same, in one line
    assert "unsupported scheme mysql://" in one_line_error(
        installed.run("history", INFERBOT_DATABASE_URL="mysql://u@h/db"), 2)


def test_check_without_inventory_names_the_path_and_shows_a_working_example(
        installed: Installed) -> None:
    done = installed.run("check", "gpu-07")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    first, *example = done.stderr.splitlines()
    path = installed.home / ".config" / "inferbot" / "hosts.yaml"
    assert first.startswith(f"inferbot: no inventory at {path}: ")
    assert len(example) == 2
    inventory = InventoryFile.model_validate(yaml.safe_load("\n".join(example)))
    assert [h.name for h in inventory.hosts] == ["gpu-07"]


def test_check_local_without_a_gpu_driver_says_what_to_install(installed: Installed) -> None:
    if ctypes.util.find_library("nvidia-ml") or shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver")
    line = one_line_error(installed.run("check", "--local", "--no-store",
                                        INFERBOT_ALLOW_LOCALHOST="true"), 1)
    assert "no NVIDIA driver" in line and "install the NVIDIA driver" in line


def test_postgresql_without_libpq_says_what_to_install(installed: Installed,
                                                       tmp_path: Path) -> None:
    """psycopg's own failure when libpq cannot be loaded (its ImportError, as it words it),
    from a stand-in package earlier on the path: this machine has libpq."""
    fake = tmp_path / "nolibpq" / "psycopg"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        'raise ImportError("no pq wrapper available.\\nAttempts made:\\n- couldn\'t import '
        "psycopg 'python' implementation: libpq library not found\")\n")
    env = {"PYTHONPATH": str(fake.parent), "INFERBOT_DATABASE_URL": "postgresql://u@db/x"}
    line = one_line_error(installed.run("history", **env), 1)
    assert "psycopg with libpq" in line and "pip install 'psycopg[binary]'" in line
    assert "libpq5" in line
    done = installed.run("diagnose", str(ROOT / "examples" / "vllm-max-model-len.log"), **env)
    assert done.returncode == 0 and "Traceback" not in done.stderr  # answered, then spooled
    assert done.stderr.startswith("inferbot: warning: incident not stored yet")

