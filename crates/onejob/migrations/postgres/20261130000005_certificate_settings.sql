-- A certificate also records the provider's request-shaping settings (adapter, URLs, model,
-- structured output form, max_tokens…) as a hash: changing them voids it, like changing the
-- kind's template or output schema. Earlier runs have no hash and certify nothing.
ALTER TABLE certificates ADD COLUMN settings_hash text NOT NULL DEFAULT '';
