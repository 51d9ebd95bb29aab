-- Scheduled jobs (rebuild, reembed): a cron expression, the job's arguments, and when it is due.
-- next_run_at is advanced with a compare-and-set when a run is claimed, so one due window
-- runs once however many processes look, and a long outage is caught up once, not N times.
CREATE TABLE schedules (
    schedule_id  bigserial PRIMARY KEY,
    job          text NOT NULL CHECK (job IN ('rebuild', 'reembed')),
    cron         text NOT NULL,
    args         jsonb NOT NULL DEFAULT '{}',
    enabled      boolean NOT NULL DEFAULT true,
    next_run_at  timestamptz NOT NULL,
    last_run_at  timestamptz,
    last_result  text,
    created_by   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE enabled;
