-- Workers look attempts up by job, and leases by worker for heartbeats. (SQLite wakes its
-- workers in-process; there is no NOTIFY.)
CREATE INDEX attempts_by_job ON attempts (job_id, number);
CREATE INDEX attempts_by_worker ON attempts (worker) WHERE state IN ('starting', 'running');

-- At most one attempt of a job is `starting` at any moment.
CREATE UNIQUE INDEX attempts_one_starting ON attempts (job_id) WHERE state = 'starting';
