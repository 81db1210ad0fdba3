"""docker-compose.yml, run as processes: what `docker compose --profile http up` starts, with
the compose file's own commands and environment, and what an operator then checks.

There is no container engine here, so each service becomes the process its container runs:

- postgres: the real PostgreSQL server of the test suite; a role and a database are created
  for the service's POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB (names made unique per run,
  since the server is shared), and its health check (`pg_isready -U ... -d ...`) must pass.
- gpu-demo: its Dockerfile's COPY steps are replayed into a temporary root, and its entrypoint
  (deploy/demo-gpu-host/entrypoint.sh, the very script) runs sshd on a loopback port; its
  HEALTHCHECK command must pass before the bots start, as `depends_on` demands.
- migrate: the image's ENTRYPOINT with the service's command (`inferbot db upgrade`) and
  environment, which must exit 0 (`service_completed_successfully`).
- bot-http, two replicas (`deploy.replicas`): the same, each on its own port (containers have
  one network namespace each; here they share the loopback), until the compose health check
  command passes.

What stands in for the container world, and nothing else: service host names (postgres,
gpu-demo) become loopback addresses and ports, the volumes and the image's paths become
directories under a temporary root (the mounted inventory is rewritten for address, port and
login accordingly), the .env file is the environment given here, and Slack is the local fake
Web API (INFERBOT_SLACK_API_URL). Then: /healthz on both replicas, one answered mention, and
`check gpu-demo` (the README's `docker compose run --rm bot check gpu-demo`), from the CLI and
from Slack.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine import make_url

from tests.fixtures.postgres import pg_admin_url
from tests.fixtures.slack import ALLOWED, SECRET, Endpoint
from tests.fixtures.sshd import SSHD, free_ports
from tests.ops.test_deploy import COMPOSE, SERVICES, instructions
from tests.slack.fakes import BOT_TOKEN, FakeSlack
from tests.slack.test_http import VLLM_ERROR, all_text, mention

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.sshd, pytest.mark.slack]

ROOT = Path(__file__).resolve().parents[2]
BOT_IMAGE = ROOT / "Dockerfile"
DEMO_IMAGE = ROOT / SERVICES["gpu-demo"]["build"]["dockerfile"]
BIN = Path(sys.executable).parent  # where `pip install` put the image's entrypoint
HEALTH_TIMEOUT_S = 60


def interpolate(value: str, dotenv: dict[str, str]) -> str:
    """Compose's `${VAR:-default}` and `${VAR}`, from what an .env file would hold."""
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}",
                  lambda m: dotenv.get(m[1]) or (m[2] or ""), value)


def image_steps(dockerfile: Path, op: str) -> list[str]:
    return [arg for name, arg in instructions(dockerfile) if name == op]


def image_env(dockerfile: Path) -> dict[str, str]:
    """The image's ENV lines (`ENV A=1 B=2`)."""
    pairs = [p.split("=", 1) for arg in image_steps(dockerfile, "ENV") for p in shlex.split(arg)]
    return {k: v for k, v in pairs}


def entrypoint(dockerfile: Path) -> list[str]:
    [line] = image_steps(dockerfile, "ENTRYPOINT")[-1:]
    argv: list[str] = json.loads(line)
    return argv


@dataclass
class Machine:
    """The container world mapped onto a temporary directory: named volumes, bind mounts and
    every other absolute path of the images."""

    root: Path
    mounts: dict[str, Path]

    def path(self, inside: str) -> Path:
        for target in sorted(self.mounts, key=len, reverse=True):
            if inside == target or inside.startswith(target.rstrip("/") + "/"):
                return self.mounts[target] / inside[len(target):].lstrip("/")
        return self.root / "rootfs" / inside.lstrip("/")

    def translate(self, value: str) -> str:
        return str(self.path(value)) if value.startswith("/") else value


def wait_healthy(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    """Run a health-check command until it succeeds, as the engine does (every second here)."""
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while True:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} never became healthy: {done.stdout}{done.stderr}")
        time.sleep(1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, as `docker compose down` sends it, then wait for the exit."""
    proc.terminate()
    proc.wait(timeout=15)


def replay_copies(dockerfile: Path, machine: Machine) -> None:
    """The image's COPY steps (and its chmod of what they copied) into the machine's root."""
    for arg in image_steps(dockerfile, "COPY"):
        *sources, dest = shlex.split(arg)
        for src in sources:
            target = machine.path(dest)
            if (ROOT / src).is_dir():
                shutil.copytree(ROOT / src, target, dirs_exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / src, target)
    for arg in image_steps(dockerfile, "RUN"):
        if arg.startswith("chmod "):
            mode, *paths = shlex.split(arg)[1:]
            for inside in paths:
                where = machine.path(inside.removesuffix("/*"))
                for found in (where.iterdir() if inside.endswith("/*") else [where]):
                    found.chmod(int(mode, 8))


@pytest.fixture
def postgres_service(pg_available: str | None) -> Iterator[tuple[str, str, str]]:
    """The compose postgres service's user and database, on the test server: (user,
    password, database)."""
    if pg_available:
        pytest.skip(pg_available)
    import psycopg

    env = SERVICES["postgres"]["environment"]
    password = interpolate(env["POSTGRES_PASSWORD"], {})
    suffix = uuid.uuid4().hex[:8]
    user, db = f"{env['POSTGRES_USER']}_{suffix}", f"{env['POSTGRES_DB']}_{suffix}"
    admin = make_url(pg_admin_url()).set(drivername="postgresql").render_as_string(
        hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE \"{user}\" LOGIN PASSWORD '{password}'")
        conn.execute(f'CREATE DATABASE "{db}" OWNER "{user}" TEMPLATE template0')
    try:
        yield user, password, db
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{user}"')


@dataclass
class Stack:
    replicas: list[Endpoint]
    program: list[str]  # the bot image's entrypoint, as installed here
    bot_env: dict[str, str]


@pytest.fixture
def stack(tmp_path: Path, fake: FakeSlack, postgres_service: tuple[str, str, str]
          ) -> Iterator[Stack]:
    if not os.path.exists(SSHD):
        pytest.skip("openssh-server is not installed (/usr/sbin/sshd missing)")
    user, password, db = postgres_service
    volumes = {name: tmp_path / "volumes" / name for name in COMPOSE["volumes"]}
    mounts: dict[str, Path] = {}
    bot = SERVICES["bot-http"]
    for spec in [*bot["volumes"], *SERVICES["gpu-demo"]["volumes"]]:
        source, target = spec.split(":")[:2]
        mounts[target] = volumes[source] if source in volumes else ROOT / source
    machine = Machine(tmp_path, mounts)
    for path in volumes.values():
        path.mkdir(parents=True)
    logs = tmp_path / "logs"
    logs.mkdir()
    dotenv = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SECRET,
              "INFERBOT_ALLOWED_USERS": ALLOWED, "POSTGRES_PASSWORD": password}
    admin = make_url(pg_admin_url())
    host, port = admin.host or "127.0.0.1", admin.port or 5432

    with ExitStack() as stack:
        # postgres: healthy when its own health check says so
        test = SERVICES["postgres"]["healthcheck"]["test"][1:]
        test = [{"inferbot": user}.get(a, a) if test[i - 1] == "-U" else
                {"inferbot": db}.get(a, a) if test[i - 1] == "-d" else a
                for i, a in enumerate(test)]
        wait_healthy([*test, "-h", host, "-p", str(port)], "postgres")

        # gpu-demo: the image's files, its entrypoint, its health check
        replay_copies(DEMO_IMAGE, machine)
        [sshd_port] = free_ports(1)
        keys = machine.path("/keys")
        demo_root = machine.path("/opt/demo")
        sshd_config = machine.root / "demo-sshd.conf"
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        demo_env = {**os.environ, **image_env(DEMO_IMAGE), "DEMO_ROOT": str(demo_root),
                    "DEMO_KEYS": str(keys), "DEMO_SSHD_CONFIG": str(sshd_config),
                    "DEMO_CLIENT_UID": str(os.getuid()),
                    "DEMO_KNOWN_HOSTS_NAME": f"[127.0.0.1]:{sshd_port}",
                    "DEMO_SSHD_ARGS": f"-f {sshd_config} -p {sshd_port} "
                                      f"-o ListenAddress=127.0.0.1 "
                                      f"-o PidFile={machine.root}/sshd.pid"}
        [demo_entry] = entrypoint(DEMO_IMAGE)  # on the image's PATH, where COPY put it
        demo = subprocess.Popen([str(machine.path(f"/usr/local/bin/{demo_entry}"))],
                                env=demo_env,
                                stdout=(logs / "gpu-demo.log").open("wb"),
                                stderr=subprocess.STDOUT)
        stack.callback(stop, demo)
        health = json.loads(image_steps(DEMO_IMAGE, "HEALTHCHECK")[0].split("CMD", 1)[1])
        check = health[-1].replace("/keys", str(keys)).replace("/run/sshd.pid",
                                                                f"{machine.root}/sshd.pid")
        wait_healthy([*health[:-1], check], "gpu-demo")

        # the inventory the bot mounts, as its container sees the network and the volumes
        inventory = yaml.safe_load((ROOT / "deploy/demo/hosts.yaml").read_text())
        inventory["known_hosts"] = machine.translate(inventory["known_hosts"])
        inventory["ssh_config"] = machine.translate(inventory["ssh_config"])
        for entry in inventory["hosts"]:
            entry.update(address="127.0.0.1", port=sshd_port, user=getpass.getuser(),
                         key=machine.translate(entry["key"]))
        mounted = machine.root / "hosts.yaml"
        mounted.write_text(yaml.safe_dump(inventory))
        machine.mounts["/etc/inferbot/hosts.yaml"] = mounted

        # the bots' environment: the image's, then the service's, as compose resolves it
        env_vars = {k: interpolate(str(v), dotenv) for k, v in bot["environment"].items()}
        url = make_url(env_vars["INFERBOT_DATABASE_URL"])
        assert (url.host, url.port, url.username, url.database) == (
            "postgres", 5432, "inferbot", "inferbot")
        pg = url.set(host=host, port=port, username=user, database=db)
        env_vars["INFERBOT_DATABASE_URL"] = pg.render_as_string(hide_password=False)
        bot_env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("SLACK_", "INFERBOT_", "XDG_"))}
        bot_env.update({k: machine.translate(v) for k, v in image_env(BOT_IMAGE).items()})
        bot_env.update({k: machine.translate(v) for k, v in env_vars.items()})
        bot_env["INFERBOT_SLACK_API_URL"] = fake.api_url
        bot_env["PATH"] = f"{BIN}:{bot_env.get('PATH', '')}"
        program = [str(BIN / entrypoint(BOT_IMAGE)[0]), *entrypoint(BOT_IMAGE)[1:]]

        # migrate, once, to completion
        migrate = subprocess.run([*program, *SERVICES["migrate"]["command"]], env=bot_env,
                                 capture_output=True, text=True, timeout=120)
        assert migrate.returncode == 0, migrate.stderr

        # bot-http: its replicas, each healthy by the service's own health check
        command = bot["command"]
        container_port = command[command.index("--port") + 1]
        endpoints = []
        for i in range(bot["deploy"]["replicas"]):
            [port_i] = free_ports(1)
            argv = [*program, *[str(port_i) if a == container_port else a for a in command],
                    "--bind", "127.0.0.1"]
            proc = subprocess.Popen(argv, env=bot_env, stdout=subprocess.DEVNULL,
                                    stderr=(logs / f"bot-http-{i}.log").open("wb"))
            stack.callback(stop, proc)
            probe = [a.replace(f":{container_port}/", f":{port_i}/")
                     for a in bot["healthcheck"]["test"][1:]]
            probe[0] = sys.executable if probe[0] == "python" else probe[0]
            wait_healthy(probe, f"bot-http replica {i}")
            endpoints.append(Endpoint(f"http://127.0.0.1:{port_i}/slack/events", fake))
        yield Stack(endpoints, program, bot_env)


def test_compose_stack_answers_a_mention_and_checks_the_demo_host(
        stack: Stack, fake: FakeSlack) -> None:
    for ep in stack.replicas:
        base = ep.url.rsplit("/slack/events", 1)[0]
        with urllib.request.urlopen(f"{base}/healthz", timeout=10) as resp:
            assert resp.status == 200
            assert json.loads(resp.read()) == {"status": "ok", "database": "ok"}

    first, second = stack.replicas
    assert first.event(mention(f"```{VLLM_ERROR}```"))[0] == 200
    answer = fake.recorder.wait_for("chat.update", timeout=30)[0]
    assert "max_model_len needs more KV cache than the GPU has left" in all_text(answer.args)

    # the loop without Slack: `docker compose run --rm bot check gpu-demo`
    done = subprocess.run([*stack.program, "check", "gpu-demo", "--json"], env=stack.bot_env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    [host] = json.loads(done.stdout)["hosts"]
    assert host["host"] == "gpu-demo" and host["error"] is None
    assert host["diagnosis"]["problems"][0]["id"] == "kv-cache-no-blocks"
    assert host["diagnosis"]["facts"]["model"] == "mistralai/Mixtral-8x7B-Instruct-v0.1"

    # and from Slack, on the other replica: `@inferbot check gpu-demo`
    event = mention("check gpu-demo", ts="1717171900.000200", event_id="Ev0CHECKDEMO1")
    event["event"]["user"] = ALLOWED
    assert second.event(event)[0] == 200
    deadline = time.monotonic() + 60
    title = "No GPU memory left for any KV cache block"  # what people read of kv-cache-no-blocks
    texts: list[str] = []
    while time.monotonic() < deadline:
        texts = [all_text(c.args) for c in fake.recorder.of("chat.update")
                 + fake.recorder.of("chat.postMessage")]
        if any(title in t and "gpu-demo" in t for t in texts):
            break
        time.sleep(0.3)
    assert any(title in t and "gpu-demo" in t for t in texts), texts

