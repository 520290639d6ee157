"""Step-time regression alerts: detection (`detect`), the periodic engine (`engine`), payloads and
signing (`payloads`), the persistent webhook delivery queue (`delivery`) and storage (`store`)."""
