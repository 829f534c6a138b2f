-- quota_pool_event gains ref, as in the MySQL migration of the same number:
-- the journal entry of a spare-buffer move is stored once per ref.

-- +goose Up
ALTER TABLE quota_pool_event ADD COLUMN ref TEXT NULL;
CREATE UNIQUE INDEX uq_quota_pool_event_ref ON quota_pool_event (resource_name, ref);

-- +goose Down
DROP INDEX uq_quota_pool_event_ref;
ALTER TABLE quota_pool_event DROP COLUMN ref;
