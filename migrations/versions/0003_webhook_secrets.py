"""Webhook secrets at rest: no PagerDuty routing key in queued delivery bodies.

The delivery job now fills the routing key in at send time from the webhook's (encrypted) column,
so the copies rendered into `deliveries.body` by earlier versions are blanked here. The secrets
themselves are encrypted by the service at start (service/alerts/secretbox.py `reencrypt`): that
needs the key, which migrations do not have. Until then the delivery job reads both forms.

Revision ID: 0003_webhook_secrets
Revises: 0002_alerts
Create Date: 2026-12-14
"""

from alembic import op

revision = "0003_webhook_secrets"
down_revision = "0002_alerts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        UPDATE deliveries d
        SET body = convert_to(jsonb_set(convert_from(d.body, 'UTF8')::jsonb, '{routing_key}', '""')::text, 'UTF8')
        FROM webhooks w
        WHERE w.id = d.webhook_id AND w.format = 'pagerduty'
          AND coalesce(convert_from(d.body, 'UTF8')::jsonb ->> 'routing_key', '') <> ''
    """)


def downgrade() -> None:
    # Nothing to restore: blanked keys are filled in from the webhook at send time by this version
    # only, and encrypted secrets cannot be decrypted without the service's key.
    pass
