-- Webhooks: the receivers configured at start-up (their secrets stay in the config file, not
-- here), and an outbox of deliveries. The trigger queues a delivery in the transaction that
-- writes the event, so a change and its notice are committed together or not at all.
CREATE TABLE webhooks (
    id         INTEGER PRIMARY KEY,
    url        TEXT NOT NULL UNIQUE,
    format     TEXT NOT NULL CHECK (format IN ('json', 'slack')),
    kinds_json TEXT NOT NULL,
    enabled    INTEGER NOT NULL DEFAULT 1
);

CREATE TABLE webhook_outbox (
    id              INTEGER PRIMARY KEY,
    webhook_id      INTEGER NOT NULL REFERENCES webhooks(id),
    event_id        INTEGER NOT NULL REFERENCES events(id),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    delivered_at    INTEGER,
    last_error      TEXT,
    UNIQUE (webhook_id, event_id)
);
-- Each webhook's oldest undelivered notice, found by index.
CREATE INDEX webhook_outbox_pending ON webhook_outbox (webhook_id, id) WHERE delivered_at IS NULL;

CREATE TRIGGER events_to_webhooks AFTER INSERT ON events
BEGIN
    INSERT INTO webhook_outbox (webhook_id, event_id, next_attempt_at)
    SELECT w.id, NEW.id, NEW.at FROM webhooks w, json_each(w.kinds_json) k
    WHERE w.enabled = 1 AND k.value = NEW.kind;
END;
