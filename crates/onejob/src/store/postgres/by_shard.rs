//! Citus's spellings, shard by shard, of the reads that span every tenant (`spanning.rs`):
//! each runs its read on every shard of one table through Citus's `run_command_on_shards`,
//! which reaches each shard over a connection of its own and reports a shard it could not
//! reach as failed instead of failing the whole; the rows of the shards that answered are
//! merged, ordered and limited as the read across the shards would have.

use crate::store::spanning::ByShard;

/// A read run shard by shard (see the module doc). `table` names the distributed table whose
/// shards the read runs on; `read` is the read on one shard as text inside a SQL literal
/// (its quotes doubled), `%%s` standing for the shard and `%1$s`, `%2$s`, … for the values
/// of `args` (SQL expressions of the statement's parameters, as text), each put in quoted
/// (PostgreSQL's `quote_nullable`, its `%` doubled for the shard name's `format`); each
/// shard answers its rows as one JSON array, read back as `columns`, of which the
/// statement returns `select` ordered and limited by `then`. Bound values cannot reach a
/// command run on the shards, hence the quoting.
macro_rules! by_shard {
    (
        table: $table:literal,
        args: $args:literal,
        read: $read:literal,
        columns: $columns:literal,
        select: $select:literal,
        then: $then:literal $(,)?
    ) => {
        concat!(
            "SELECT ",
            $select,
            " FROM run_command_on_shards('",
            $table,
            "', format('SELECT coalesce(json_agg(t), ''[]'') FROM (",
            $read,
            ") t', VARIADIC ARRAY(SELECT replace(quote_nullable(a), '%', '%%') \
             FROM unnest(ARRAY[",
            $args,
            "]::text[]) WITH ORDINALITY AS u (a, n) ORDER BY n))) AS r, \
             json_to_recordset(CASE WHEN r.success THEN r.result::json ELSE '[]' END) AS e (",
            $columns,
            ") ",
            $then
        )
    };
}

/// The reads spanning every tenant, shard by shard, as the PostgreSQL store's statements of
/// the same names (`sql.rs`; `citus.rs` for `due_first`) read them across the shards.
pub(super) const BY_SHARD: ByShard = ByShard {
    due_first: by_shard!(
        table: "jobs",
        args: "$1::text, $2::text",
        read: "SELECT tenant, dispatch_at FROM %%s WHERE dispatch_at <= now() \
               AND state = ''pending'' AND attempts = 0 AND kind = ANY(%2$s::text[]) \
               ORDER BY dispatch_at LIMIT %1$s::bigint",
        columns: "tenant text, dispatch_at timestamptz",
        select: "e.tenant",
        then: "ORDER BY e.dispatch_at LIMIT $1",
    ),
    due_jobs: by_shard!(
        table: "jobs",
        args: "$1::text",
        read: "SELECT id, tenant, dispatch_at FROM %%s WHERE dispatch_at <= now() \
               ORDER BY dispatch_at LIMIT %1$s::bigint",
        columns: "id uuid, tenant text, dispatch_at timestamptz",
        select: "e.id, e.tenant",
        then: "ORDER BY e.dispatch_at LIMIT $1",
    ),
    due_others: by_shard!(
        table: "jobs",
        args: "$1::text, $2::text",
        read: "SELECT id, tenant, dispatch_at FROM %%s WHERE dispatch_at <= now() \
               AND NOT (state = ''pending'' AND attempts = 0 AND kind = ANY(%2$s::text[])) \
               ORDER BY dispatch_at LIMIT %1$s::bigint",
        columns: "id uuid, tenant text, dispatch_at timestamptz",
        select: "e.id, e.tenant",
        then: "ORDER BY e.dispatch_at LIMIT $1",
    ),
    live_tenants: by_shard!(
        table: "attempts",
        args: "$1::text",
        read: "SELECT DISTINCT tenant FROM %%s WHERE worker = %1$s \
               AND state IN (''starting'', ''running'')",
        columns: "tenant text",
        select: "e.tenant",
        then: "ORDER BY e.tenant",
    ),
    expired_attempts: by_shard!(
        table: "attempts",
        args: "$1::text",
        read: "SELECT id, provider, tenant, started_at FROM %%s \
               WHERE state IN (''starting'', ''running'') AND (lease_expires_at < now() \
               OR deadline_at < now() - make_interval(secs => %1$s::float8)) \
               ORDER BY started_at LIMIT 100",
        columns: "id uuid, provider text, tenant text, started_at timestamptz",
        select: "e.id, e.provider, e.tenant",
        then: "ORDER BY e.started_at LIMIT 100",
    ),
    unknown_due_tenants: by_shard!(
        table: "attempts",
        args: "$1::text",
        read: "SELECT tenant, min(reconcile_at) AS due FROM %%s WHERE state = ''unknown'' \
               AND reconcile_at <= now() GROUP BY tenant ORDER BY due LIMIT %1$s::bigint",
        columns: "tenant text, due timestamptz",
        select: "e.tenant",
        then: "ORDER BY e.due LIMIT $1",
    ),
    next_due_in: by_shard!(
        table: "jobs",
        args: "",
        read: "SELECT min(dispatch_at) AS at FROM %%s WHERE dispatch_at IS NOT NULL",
        columns: "at timestamptz",
        select: "EXTRACT(EPOCH FROM (min(e.at) - now()))::float8 AS seconds",
        then: "",
    ),
};
