-- One index fewer to write for every attempt (see the PostgreSQL twin): the lease reaper's
-- query reads the live attempts through `attempts_by_worker`, and no other read used it.
DROP INDEX attempts_live_leases;
