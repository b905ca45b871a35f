-- The job and attempt state machines, enforced where the rows live (see the PostgreSQL
-- twin): a change of `state` the domain's `can_become` does not allow is refused.
CREATE TRIGGER jobs_state_follows_the_machine BEFORE UPDATE OF state ON jobs
WHEN OLD.state IS NOT NEW.state AND (OLD.state || '>' || NEW.state) NOT IN (
    'pending>running', 'pending>cancelled', 'pending>failed',
    'running>pending', 'running>unknown', 'running>succeeded', 'running>failed', 'running>cancelled',
    'unknown>running', 'unknown>pending', 'unknown>succeeded', 'unknown>failed', 'unknown>cancelled',
    'failed>pending'
)
BEGIN SELECT RAISE(ABORT, 'onejob: a job''s state changes only as the state machine allows'); END;

CREATE TRIGGER attempts_state_follows_the_machine BEFORE UPDATE OF state ON attempts
WHEN OLD.state IS NOT NEW.state AND (OLD.state || '>' || NEW.state) NOT IN (
    'starting>running', 'starting>unknown', 'starting>succeeded', 'starting>failed',
    'starting>cancelled', 'starting>discarded',
    'running>unknown', 'running>succeeded', 'running>failed', 'running>cancelled', 'running>discarded',
    'unknown>succeeded', 'unknown>failed', 'unknown>cancelled', 'unknown>discarded'
)
BEGIN SELECT RAISE(ABORT, 'onejob: an attempt''s state changes only as the state machine allows'); END;
