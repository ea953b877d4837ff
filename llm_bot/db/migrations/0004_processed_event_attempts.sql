-- How many times an event was claimed (each delivery that reached processing, on any
-- instance): a count of our own, since Pub/Sub counts delivery attempts only on subscriptions
-- with a dead-letter policy. An event over the limit is given up instead of retried forever.
ALTER TABLE processed_events ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0;
