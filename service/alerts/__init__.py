"""Alerts: step-time regression detection (`detect`) and its periodic engine (`engine`), bus
bandwidth below the fabric's acceptance baseline (`busbw`), payloads and signing (`payloads`), the
persistent webhook delivery queue (`delivery`) and storage (`store`)."""
