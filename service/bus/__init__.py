"""The NATS JetStream ingest bus (scale-out; see docs/scaling.md).

Publishers (collectors' NATS transport, the HTTP API in ``ingest_mode=nats``) put docs/API.md batch
bodies on ``fabricscope.ingest.<kind>``; ``fabricscope writer`` processes share one durable pull
consumer and write them with the same validation and the same idempotent stores as HTTP ingest.
"""
