# syntax=docker/dockerfile:1
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /install /usr/local
RUN useradd --system --uid 10001 --no-create-home toolgate
USER toolgate
EXPOSE 8000
# Validate settings and the function dictionary first, then serve; fails with a plain list.
ENTRYPOINT ["python", "-m", "app", "serve", "--host", "0.0.0.0", "--port", "8000"]
