-- The idempotency key an attempt forwarded upstream (see the PostgreSQL twin).
ALTER TABLE attempts ADD COLUMN upstream_key TEXT;
