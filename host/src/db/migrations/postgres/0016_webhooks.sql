-- Webhooks (issue 53, SPEC §18): a tenant's subscriptions, and the outbox of their
-- deliveries, written in the transaction of the event each delivers, so that an event
-- committed is an event delivered (at least once), through restarts and kills.
CREATE TABLE webhooks (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    name TEXT NOT NULL,
    url TEXT NOT NULL,
    -- The event types it takes, as `,type,type,` (or `,*,` for every one), so that an
    -- event's subscriptions are found with one LIKE in either dialect.
    events TEXT NOT NULL,
    -- The signing secret (`whsec_` + base64): kept to sign, never answered again.
    secret TEXT NOT NULL,
    enabled BIGINT NOT NULL,
    -- Why it was disabled (a `410 Gone`), when it was.
    disabled TEXT,
    updated_at TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE webhook_deliveries (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant TEXT NOT NULL,
    webhook TEXT NOT NULL,
    -- `webhook-id`: the event's, the same on every attempt.
    message TEXT NOT NULL,
    type TEXT NOT NULL,
    -- The body as it is sent, made once.
    body TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts BIGINT NOT NULL DEFAULT 0,
    -- Milliseconds since the epoch: when it was made, when it is next due, and until
    -- when a replica holds it (a replica that dies lets it go when that passes).
    created_ms BIGINT NOT NULL,
    next_ms BIGINT NOT NULL,
    claimed_until_ms BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_ms);
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (tenant, webhook, state);

-- Every attempt, for `compute.webhooks.deliveries`.
CREATE TABLE webhook_attempts (
    delivery BIGINT NOT NULL,
    attempt BIGINT NOT NULL,
    tenant TEXT NOT NULL,
    webhook TEXT NOT NULL,
    at TEXT NOT NULL,
    status BIGINT,
    error TEXT,
    duration_ms BIGINT NOT NULL,
    PRIMARY KEY (delivery, attempt)
);
CREATE INDEX webhook_attempts_by_webhook ON webhook_attempts (tenant, webhook, delivery);
