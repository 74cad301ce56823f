# PolicyPal: one process serving Slack, Teams, /healthz, /readyz and /metrics. Everything it needs,
# the embedding model and the database migrations included, is installed at build time; nothing is
# fetched at run time (tests/test_deployment.py repeats these install steps offline to prove it).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    POLICYPAL_DATA_DIR=/data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY adapters ./adapters
COPY retrieval ./retrieval
RUN pip install --no-cache-dir -e . \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin policypal \
    && mkdir -p /data \
    && chown policypal /data

# Fail the build, not the first request, if the bundled model is missing or its hashes differ.
RUN python -c "from pathlib import Path; from retrieval.embedding import bundled_model_dir; bundled_model_dir(Path('/tmp/model-check'))" \
    && rm -rf /tmp/model-check

USER 10001
VOLUME ["/data"]
EXPOSE 3000
# SIGTERM drains: runs in flight get POLICYPAL_SHUTDOWN_GRACE_S (20 s) to finish, the rest give up with
# a helpdesk case and a reply. Give the container more than that before SIGKILL (docker stop -t 30).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:3000/healthz', timeout=4)"]
CMD ["policypal", "serve", "--host", "0.0.0.0", "--port", "3000"]
