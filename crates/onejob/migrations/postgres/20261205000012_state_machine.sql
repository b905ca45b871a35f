-- The job and attempt state machines, enforced where the rows live: a change of `state`
-- that the domain's `can_become` does not allow is refused by the database, whatever
-- statement (onejob's own or an operator's) makes it. Unchanged states pass untouched; the
-- store suite (tests/store/states.rs) compares these lists with the domain for every pair.
CREATE FUNCTION onejob_job_state_follows_the_machine() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.state, NEW.state) NOT IN (
        ('pending', 'running'), ('pending', 'cancelled'), ('pending', 'failed'),
        ('running', 'pending'), ('running', 'unknown'), ('running', 'succeeded'),
        ('running', 'failed'), ('running', 'cancelled'),
        ('unknown', 'running'), ('unknown', 'pending'), ('unknown', 'succeeded'),
        ('unknown', 'failed'), ('unknown', 'cancelled'),
        ('failed', 'pending')
    ) THEN
        RAISE EXCEPTION 'onejob: a job''s state changes only as the state machine allows, not from % to %',
            OLD.state, NEW.state
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER jobs_state_follows_the_machine BEFORE UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION onejob_job_state_follows_the_machine();

CREATE FUNCTION onejob_attempt_state_follows_the_machine() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.state, NEW.state) NOT IN (
        ('starting', 'running'), ('starting', 'unknown'), ('starting', 'succeeded'),
        ('starting', 'failed'), ('starting', 'cancelled'), ('starting', 'discarded'),
        ('running', 'unknown'), ('running', 'succeeded'), ('running', 'failed'),
        ('running', 'cancelled'), ('running', 'discarded'),
        ('unknown', 'succeeded'), ('unknown', 'failed'), ('unknown', 'cancelled'),
        ('unknown', 'discarded')
    ) THEN
        RAISE EXCEPTION 'onejob: an attempt''s state changes only as the state machine allows, not from % to %',
            OLD.state, NEW.state
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER attempts_state_follows_the_machine BEFORE UPDATE OF state ON attempts
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION onejob_attempt_state_follows_the_machine();
