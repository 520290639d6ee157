"""Sinks: where collectors put what they measured. ``factory.make_sink(url)`` builds one; see
``sender`` (queue, batching, spool, retries) and the transports ``http``, ``nats`` and the server's
database transport (loaded by name, never imported here)."""
