# The fabricscope image: API (`serve`), `migrate`, switch collector (`collect`), host agent (`agent`).
#   docker build -t fabricscope:local .
#   docker run --rm fabricscope:local --help
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md fabricscope-legacy.pth ./
COPY fabricscope ./fabricscope
COPY service ./service
COPY collectors ./collectors
COPY migrations ./migrations
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[all]'

FROM python:3.11-slim-bookworm
# ethtool: the agent's `ethtool: subprocess` mode; iproute2: `ip`/`rdma` for people debugging in the container.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ethtool iproute2 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/fabricscope --create-home fabricscope
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels 'fabricscope[all]' && rm -rf /wheels
USER fabricscope
WORKDIR /var/lib/fabricscope
ENV PYTHONUNBUFFERED=1 \
    FABRICSCOPE_LOG_JSON=true \
    FABRICSCOPE_DATA_DIR=/var/lib/fabricscope/data
EXPOSE 8000
ENTRYPOINT ["fabricscope"]
CMD ["serve", "--host", "0.0.0.0"]
