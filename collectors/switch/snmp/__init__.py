"""SNMP (v2c, v3 authPriv) port counters: numeric OID tables, pure parse, asyncio fetch."""
