-- The idempotency key an attempt forwarded upstream, recorded when it starts, so that a
-- reconciler can later ask the provider about exactly that request.
ALTER TABLE attempts ADD COLUMN upstream_key text;
