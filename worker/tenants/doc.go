// Package tenants is the activity-idempotency audit (the seed "Temporal
// workflows/activities missing idempotency guarantees") as runnable dedup
// task types: the five audited activities, each made safe to retry with
// the pattern the audit names, each with its guarantee written on it.
//
//	| task type            | pattern                                   | a retry ...                                   |
//	|----------------------|-------------------------------------------|-----------------------------------------------|
//	| create_tenant_schema | INSERT ... ON CONFLICT DO NOTHING,        | finds the tenant and the schema, returns the  |
//	|                      | CREATE SCHEMA IF NOT EXISTS               | same result                                   |
//	| run_migrations       | check-then-act with a guard (lock + log)  | applies no migration twice, same version      |
//	| send_welcome_email   | idempotency key (worker.Step)             | returns the stored send, sends no second mail |
//	| drop_tenant_schema   | DROP SCHEMA IF EXISTS                     | finds it gone and returns the same result     |
//	| soft_delete_tenant   | check-then-act with a guard (WHERE)       | returns the first deletion's time             |
//
// `dedup worker` registers them when its config has worker.tenants
// (enabled, and the mail server the welcome email goes through); in a
// worker of your own, register Tenants.TaskTypes with worker.Register. A
// route lists them in its definition, e.g. onboarding [create_tenant_schema,
// run_migrations, send_welcome_email] and offboarding [drop_tenant_schema,
// soft_delete_tenant]. A definition's tasks run in parallel, so none of
// these depends on another having run first (run_migrations creates the
// schema too). The event's data is the Tenant.
//
// The tenants live in the worker's database (postgres.url): the table
// tenants (Setup creates it) and a schema tenant_{id} each. The worker's
// PostgreSQL user therefore needs CREATE on that database (dedup_worker,
// the least-privilege role, does not have it: give the tenant tasks'
// worker a user that does).
package tenants
