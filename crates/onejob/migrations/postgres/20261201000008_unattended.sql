-- Unattended resolution of unknown attempts (DESIGN §6, "Unknown -> proof").
--
-- `key_spent`: the provider itself answered a definite failure under the attempt's forwarded
-- idempotency key, so the job's next attempt on that provider sends a new key (an upstream
-- that caches answers by key would replay that failure). An attempt that failed without such
-- an answer (never received, not reached, settled or decided by an operator) keeps the key
-- in force: a late copy of it and the next attempt then deduplicate upstream. Attempts that
-- ended before this column existed renewed the key, as the code did then.
ALTER TABLE attempts ADD COLUMN key_spent boolean NOT NULL DEFAULT false;
UPDATE attempts SET key_spent = true WHERE state IN ('failed', 'cancelled');

-- Two more event kinds: `resent` (the reconciler re-sent an unknown attempt under its same
-- upstream key to a provider certified to deduplicate by key) and `exhausted` (a job left
-- with no attempt budget, e.g. after max_attempts was lowered, settled as failed). The old
-- rows satisfy the wider check, so it is added without scanning the table.
ALTER TABLE job_events DROP CONSTRAINT job_events_kind_check;
ALTER TABLE job_events ADD CONSTRAINT job_events_kind_check
    CHECK (kind IN ('created', 'replayed', 'key_conflict', 'attempt_started',
                    'attempt_unknown', 'attempt_resolved', 'won', 'race_lost', 'failover',
                    'failover_refused', 'recovered', 'cancelled', 'resent', 'exhausted')) NOT VALID;
