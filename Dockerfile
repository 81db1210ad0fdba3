# inferbot: the Slack bot and CLI. `docker compose up` runs it with PostgreSQL (docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    XDG_DATA_HOME=/var/lib/inferbot \
    XDG_CACHE_HOME=/var/cache/inferbot

WORKDIR /src
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY knowledge ./knowledge
# A plain install (every dependency is a default one): the wheel carries the knowledge base
# (bot/knowledge) and the migrations. The source is this checkout, so its version is the pin.
# hadolint ignore=DL3013
RUN pip install /src \
    && rm -rf /src \
    && useradd --system --uid 10001 --home-dir /var/lib/inferbot --create-home inferbot \
    && mkdir -p /var/cache/inferbot \
    && chown inferbot /var/cache/inferbot

# By number: an orchestrator's runAsNonRoot check cannot resolve names inside the image.
USER 10001
WORKDIR /var/lib/inferbot
# Compile the knowledge base once at build time (a cached KB makes the first answer fast).
RUN inferbot kb validate && inferbot kb list > /dev/null

# HTTP mode (`inferbot serve --http`) listens here; Socket Mode opens no port.
EXPOSE 3000
# No HEALTHCHECK: the default command is Socket Mode, which has no port to probe, and a
# crashed bot exits (restart policy). HTTP-mode services probe GET /healthz (docker-compose.yml).
ENTRYPOINT ["inferbot"]
CMD ["serve"]
