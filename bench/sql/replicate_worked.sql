-- docs/SCALING.md: what a million jobs leave in PostgreSQL. Run by bench/harness.py's
-- `footprint` part in a database that holds jobs really worked by onejob (N jobs through the
-- API and a worker on onejob-fake), this copies them, with their attempts and events, :lo..:hi
-- times over, as if the same jobs had arrived again every `shift` (the span of the originals,
-- plus a minute): copy c has every timestamp moved c x shift later, and new job and attempt
-- ids made the way onejob makes them, UUIDv7, whose first 48 bits are milliseconds: the
-- original id with c x shift added to those (so ids stay unique and grow with time, and the
-- primary keys and the other indexes on ids fill the way production's do: at their right
-- end, not at random places), a new key hash (sha256 of the old one and c: as random as a
-- real key's), the same params, results and states. Rows are inserted in time order. Every
-- constraint and trigger stays in place; the job and its winning attempt are inserted in one
-- statement, so the circular foreign keys (attempt -> job, job's winner -> attempt) are checked
-- at its end. The originals are the rows that exist when a copy pass starts with :lo = 1 (kept
-- in onejob_replicate_source, created here on the first pass, with the shift).
CREATE TABLE IF NOT EXISTS onejob_replicate_source AS SELECT id FROM jobs;

-- Milliseconds of a UUIDv7 (its first 48 bits).
CREATE FUNCTION pg_temp.uuid_ms(u uuid) RETURNS bigint IMMUTABLE LANGUAGE sql AS
$$ SELECT ('x' || lpad(substr(replace(u::text, '-', ''), 1, 12), 16, '0'))::bit(64)::bigint $$;
-- The same UUID, ms milliseconds later.
CREATE FUNCTION pg_temp.uuid_later(u uuid, ms bigint) RETURNS uuid IMMUTABLE LANGUAGE sql AS
$$ SELECT (lpad(to_hex(pg_temp.uuid_ms(u) + ms), 12, '0') || substr(replace(u::text, '-', ''), 13))::uuid $$;

CREATE TABLE IF NOT EXISTS onejob_replicate_shift AS
SELECT ceil(greatest(
            extract(epoch FROM (SELECT max(t) - min(t) FROM (
                SELECT created_at AS t FROM jobs UNION ALL SELECT updated_at FROM jobs
                UNION ALL SELECT started_at FROM attempts UNION ALL SELECT deadline_at FROM attempts
                UNION ALL SELECT lease_expires_at FROM attempts UNION ALL SELECT finished_at FROM attempts
                UNION ALL SELECT at FROM job_events) ts)) * 1000,
            (SELECT max(pg_temp.uuid_ms(id)) - min(pg_temp.uuid_ms(id)) FROM jobs),
            (SELECT max(pg_temp.uuid_ms(id)) - min(pg_temp.uuid_ms(id)) FROM attempts)))::bigint + 60000 AS ms;

WITH copies AS (SELECT c, c * (SELECT ms FROM onejob_replicate_shift) AS ms,
                       make_interval(secs => c * (SELECT ms FROM onejob_replicate_shift) / 1000.0) AS later
                FROM generate_series(:lo::int, :hi::int) AS c),
src AS (SELECT j.* FROM jobs j JOIN onejob_replicate_source s USING (id)),
new_jobs AS (
    INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params, state, version, attempts,
                      completed_by, result, error, dispatch_at, created_at, updated_at, recoveries, environment)
    SELECT pg_temp.uuid_later(j.id, ms), j.tenant, j.user_id, sha256(j.key_hash || int4send(c)), j.kind,
           j.fingerprint, j.params, j.state, j.version, j.attempts, pg_temp.uuid_later(j.completed_by, ms),
           j.result, j.error, j.dispatch_at + later, j.created_at + later, j.updated_at + later, j.recoveries,
           j.environment
    FROM src j, copies
    ORDER BY c, j.id
    RETURNING 1),
new_attempts AS (
    INSERT INTO attempts (id, job_id, number, provider, state, hedge, task_id, worker, lease_expires_at,
                          deadline_at, started_at, acknowledged_at, finished_at, error, unknown_since,
                          reconcile_at, reconcile_checks, upstream_key, key_spent)
    SELECT pg_temp.uuid_later(a.id, ms), pg_temp.uuid_later(a.job_id, ms), a.number, a.provider, a.state, a.hedge,
           a.task_id, a.worker, a.lease_expires_at + later, a.deadline_at + later, a.started_at + later,
           a.acknowledged_at + later, a.finished_at + later, a.error, a.unknown_since + later,
           a.reconcile_at + later, a.reconcile_checks, a.upstream_key, a.key_spent
    FROM attempts a JOIN onejob_replicate_source s ON s.id = a.job_id, copies
    ORDER BY c, a.id
    RETURNING 1)
INSERT INTO job_events (job_id, attempt_id, kind, actor, detail, at)
SELECT pg_temp.uuid_later(e.job_id, ms), pg_temp.uuid_later(e.attempt_id, ms), e.kind, e.actor, e.detail,
       e.at + later
FROM job_events e JOIN onejob_replicate_source s ON s.id = e.job_id, copies
ORDER BY c, e.id;
