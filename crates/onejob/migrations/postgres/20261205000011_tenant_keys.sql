-- The tenant in every job table and every key (DESIGN §5, "Past one primary: Citus").
--
-- A distributed PostgreSQL (Citus) places all rows of a tenant on one shard when `tenant`
-- is the distribution column, and then requires every primary key, unique constraint and
-- foreign key of those tables to include it. `attempts` and `job_events` get the tenant of
-- their job (copied here; written by every insert from now on), and each key and foreign
-- key names it. On one PostgreSQL this changes nothing an invariant rests on: a job id and
-- an attempt id are unique by construction (UUIDv7), and every key only gains a column.
--
-- The primary keys lead with the id, not the tenant: the worker finds an attempt or a job
-- by its id alone in places (the one index then serves both lookups, with or without the
-- tenant). Every other unique index and every foreign key leads with the tenant. The
-- `onejob migrate` of a database with the `citus` extension then distributes the three
-- tables by `tenant`, colocated (`store/postgres/citus.rs`).

-- The foreign keys that name the old keys go first.
ALTER TABLE jobs DROP CONSTRAINT jobs_winner_is_own_attempt;
ALTER TABLE attempts DROP CONSTRAINT attempts_job_id_fkey;
ALTER TABLE job_events DROP CONSTRAINT job_events_job_id_fkey;

ALTER TABLE attempts ADD COLUMN tenant text;
UPDATE attempts a SET tenant = j.tenant FROM jobs j WHERE j.id = a.job_id;
ALTER TABLE attempts ALTER COLUMN tenant SET NOT NULL;

-- The event log refuses updates: this one backfill runs with its guard off, inside the
-- migration's transaction (no other transaction sees the guard missing).
ALTER TABLE job_events ADD COLUMN tenant text;
ALTER TABLE job_events DISABLE TRIGGER job_events_append_only;
UPDATE job_events e SET tenant = j.tenant FROM jobs j WHERE j.id = e.job_id;
ALTER TABLE job_events ENABLE TRIGGER job_events_append_only;
ALTER TABLE job_events ALTER COLUMN tenant SET NOT NULL;

ALTER TABLE jobs DROP CONSTRAINT jobs_pkey;
ALTER TABLE jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id, tenant);

ALTER TABLE attempts DROP CONSTRAINT attempts_pkey;
ALTER TABLE attempts ADD CONSTRAINT attempts_pkey PRIMARY KEY (id, tenant);
ALTER TABLE attempts DROP CONSTRAINT attempts_number_per_job;
ALTER TABLE attempts ADD CONSTRAINT attempts_number_per_job UNIQUE (tenant, job_id, number);
ALTER TABLE attempts DROP CONSTRAINT attempts_job_and_id;
ALTER TABLE attempts ADD CONSTRAINT attempts_job_and_id UNIQUE (tenant, job_id, id);
DROP INDEX attempts_one_starting;
CREATE UNIQUE INDEX attempts_one_starting ON attempts (tenant, job_id) WHERE state = 'starting';

ALTER TABLE job_events DROP CONSTRAINT job_events_pkey;
ALTER TABLE job_events ADD CONSTRAINT job_events_pkey PRIMARY KEY (id, tenant);

ALTER TABLE attempts ADD CONSTRAINT attempts_job_fkey
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id);
ALTER TABLE job_events ADD CONSTRAINT job_events_job_fkey
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id);
-- The winner must be one of the job's own attempts.
ALTER TABLE jobs ADD CONSTRAINT jobs_winner_is_own_attempt
    FOREIGN KEY (tenant, id, completed_by) REFERENCES attempts (tenant, job_id, id);
