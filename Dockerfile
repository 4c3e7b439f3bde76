# syntax=docker/dockerfile:1
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY app ./app
# Every dependency as requirements.lock pins it (hashes checked), then the service itself.
RUN pip install --no-cache-dir --prefix=/install --require-hashes --no-deps -r requirements.lock \
    && pip install --no-cache-dir --prefix=/install --no-deps .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /install /usr/local
COPY LICENSE /usr/share/licenses/toolgate/LICENSE
RUN useradd --system --uid 10001 --no-create-home toolgate \
    && mkdir -p /var/lib/toolgate/run-journal && chown toolgate /var/lib/toolgate/run-journal
# Run records wait here until the database has them (docs/operating.md, "Run records"); mount a
# volume on it so a restarted container replays what a killed one left.
ENV RUN_JOURNAL_DIR=/var/lib/toolgate/run-journal
USER toolgate
EXPOSE 8000
# Validate settings and the function dictionary first, then serve; fails with a plain list.
ENTRYPOINT ["python", "-m", "app", "serve", "--host", "0.0.0.0", "--port", "8000"]
