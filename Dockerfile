# One image for every kvroute service (router, emulated workers): see docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY router ./router
COPY workers ./workers
COPY policies ./policies
COPY sim ./sim
COPY bench ./bench
RUN pip install --no-cache-dir -e .
COPY config ./config
ENTRYPOINT []
