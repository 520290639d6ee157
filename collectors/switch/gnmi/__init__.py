"""gNMI streaming telemetry: Capabilities, Subscribe STREAM (SAMPLE + ON_CHANGE), reconnect."""
