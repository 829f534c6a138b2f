-- Session ids are scoped to their resource and client (issue 11 §3.5, see
-- migrations/mysql/00007_scoped_session_ids.sql): a scoped id is stored in
-- quota_usage.session_id, a TEXT column without a length, so SQLite needs no
-- change; this file keeps the two dialects' versions the same. Existing
-- rows keep their ids.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
