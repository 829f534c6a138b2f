-- quota_pool_event gains ref (issue 21, docs/pools.md §6): a pool event
-- journalled from a note Redis keeps until it is journalled (the spare
-- buffer an apply moved into the shared pool, pools.SpareMove) carries the
-- note's ref, unique per resource, so the apply that made the move and a
-- later drain of the notes it left store it once. NULL for every other
-- event (a unique key admits any number of NULLs).

-- +goose Up
ALTER TABLE quota_pool_event
    ADD COLUMN ref VARCHAR(100) NULL,
    ADD UNIQUE KEY uq_quota_pool_event_ref (resource_name, ref);

-- +goose Down
ALTER TABLE quota_pool_event
    DROP KEY uq_quota_pool_event_ref,
    DROP COLUMN ref;
