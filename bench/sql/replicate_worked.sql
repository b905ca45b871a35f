-- docs/SCALING.md: what a million jobs leave in PostgreSQL. Run in a database that holds
-- jobs really worked by onejob (bench/growth-worked.sh: N jobs through the API and a worker
-- on onejob-fake), this copies them, with their attempts and events, :lo..:hi times over:
-- copy c gets new job and attempt ids (md5 of the old id and c), a new key hash (sha256 of
-- the old one and c), the same params, results, states and timestamps. Every constraint and
-- trigger stays in place; the job and its winning attempt are inserted in one statement, so
-- the circular foreign keys (attempt -> job, job's winner -> attempt) are checked at its end.
-- The originals are the rows that exist when a copy pass starts with :lo = 1 (kept in
-- onejob_replicate_source, created here on the first pass).
CREATE TABLE IF NOT EXISTS onejob_replicate_source AS SELECT id FROM jobs;

WITH copies AS (SELECT c FROM generate_series(:lo::int, :hi::int) AS c),
src AS (SELECT j.* FROM jobs j JOIN onejob_replicate_source s USING (id)),
new_jobs AS (
    INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params, state, version, attempts,
                      completed_by, result, error, dispatch_at, created_at, updated_at, recoveries, environment)
    SELECT md5(j.id::text || c)::uuid, j.tenant, j.user_id, sha256(j.key_hash || int4send(c)), j.kind,
           j.fingerprint, j.params, j.state, j.version, j.attempts,
           CASE WHEN j.completed_by IS NULL THEN NULL ELSE md5(j.completed_by::text || c)::uuid END,
           j.result, j.error, j.dispatch_at, j.created_at, j.updated_at, j.recoveries, j.environment
    FROM src j, copies
    RETURNING 1),
new_attempts AS (
    INSERT INTO attempts (id, job_id, number, provider, state, hedge, task_id, worker, lease_expires_at,
                          deadline_at, started_at, acknowledged_at, finished_at, error, unknown_since,
                          reconcile_at, reconcile_checks, upstream_key, key_spent)
    SELECT md5(a.id::text || c)::uuid, md5(a.job_id::text || c)::uuid, a.number, a.provider, a.state, a.hedge,
           a.task_id, a.worker, a.lease_expires_at, a.deadline_at, a.started_at, a.acknowledged_at,
           a.finished_at, a.error, a.unknown_since, a.reconcile_at, a.reconcile_checks, a.upstream_key, a.key_spent
    FROM attempts a JOIN onejob_replicate_source s ON s.id = a.job_id, copies
    RETURNING 1)
INSERT INTO job_events (job_id, attempt_id, kind, actor, detail, at)
SELECT md5(e.job_id::text || c)::uuid,
       CASE WHEN e.attempt_id IS NULL THEN NULL ELSE md5(e.attempt_id::text || c)::uuid END,
       e.kind, e.actor, e.detail, e.at
FROM job_events e JOIN onejob_replicate_source s ON s.id = e.job_id, copies
ORDER BY c, e.id;
