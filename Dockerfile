# The bot as an image. Its dependencies are requirements.txt, the lock, installed as it
# is (--no-deps: no runtime dependency is resolved at build time, and `pip check` fails
# the build if the lock is not whole); then the project itself, as a wheel, --no-deps.
#
#   docker build -t durable-slack-agent .
#   docker run --env-file .env -p 3000:3000 -v bot-data:/data durable-slack-agent
#
# SQLite lives on the /data volume: mount a disk there, or it goes with the container.
# With several replicas, set DATABASE_URL to a PostgreSQL database instead.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent/ agent/
COPY bot/ bot/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# the lock first, in a layer of its own: a change to the code does not reinstall it
COPY requirements.txt /tmp/requirements.txt
RUN pip install --no-deps --requirement /tmp/requirements.txt
COPY --from=build /wheels/ /tmp/wheels/
RUN pip install --no-deps /tmp/wheels/*.whl \
    && pip check \
    && rm -rf /tmp/wheels /tmp/requirements.txt
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/bot bot \
    && mkdir /data \
    && chown bot:bot /data
USER bot
WORKDIR /home/bot
ENV PORT=3000 \
    DATABASE_URL=sqlite:////data/bot.db
VOLUME ["/data"]
EXPOSE 3000
# every mode serves /healthz on PORT: 200 while the store answers, else 503 (urlopen raises)
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '3000'), timeout=4)"]
CMD ["python", "-m", "bot"]
