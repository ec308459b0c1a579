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
# the router needs no privilege: it writes nothing of its own (docs/operations.md, "On
# Kubernetes"); a user of its own, with a home for caches
RUN useradd --create-home --uid 10001 kvroute
USER kvroute
EXPOSE 8000
ENTRYPOINT []
CMD ["kvroute", "serve", "--host", "0.0.0.0", "--port", "8000"]
