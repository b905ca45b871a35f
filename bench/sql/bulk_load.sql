-- Growth: fills onejob's real `jobs` table (after `onejob migrate`) with rows :lo..:hi.
-- Every constraint and trigger stays in place and is checked per row. The rows are finished
-- jobs (state 'cancelled', dispatch_at NULL: no attempts needed, so the winner/result CHECKs
-- and the attempts foreign key hold, and the dispatch trigger's WHEN is false, so no NOTIFY),
-- all owned by the benchmark's own (tenant, user) so that new keys land at random places
-- among them in the unique index (the worst case). Ids are UUIDv7-like with timestamps in
-- the past, in order, like old onejob jobs. The matching `job_events` rows are not created:
-- intake never reads them (it only appends).
INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params, state, dispatch_at,
                  created_at, updated_at)
SELECT (lpad(to_hex(:t0 + g), 12, '0') || '7' || substr(h, 1, 3) || '8' || substr(h, 4, 15))::uuid,
       'bench', 'bench', sha256(convert_to('bulk-' || g, 'UTF8')), 'bench.chat',
       sha256(convert_to('fp-' || g, 'UTF8')), jsonb_build_object('prompt', 'bench bulk-' || g),
       'cancelled', NULL, to_timestamp((:t0 + g) / 1000.0), to_timestamp((:t0 + g) / 1000.0)
FROM generate_series(:lo::bigint, :hi::bigint) AS g, LATERAL (SELECT md5(g::text) AS h) AS x;
