-- Session ids are scoped to their resource and client (issue 11 §3.5,
-- internal/quota scope.go): a session whose id another client's session
-- already holds is stored under "<resource>/<client>/<sessionId>", up to
-- 64 + 1 + 128 + 1 + 64 = 258 characters. Only session_id widens; the
-- unique key stays on it. Existing rows keep their (bare) ids and are not
-- rewritten. Widening a VARCHAR whose length prefix is already two bytes
-- (64 utf8mb4 characters are 256 bytes) changes only the table's metadata
-- in InnoDB (in place on MySQL 5.7+ and MariaDB 10.2+).

-- +goose Up
ALTER TABLE quota_usage
    MODIFY session_id VARCHAR(260) NOT NULL;

-- +goose Down
-- Fails (data too long, in strict mode) while a scoped id is stored: such a
-- row cannot be kept by a version that knows only bare ids.
ALTER TABLE quota_usage
    MODIFY session_id VARCHAR(64) NOT NULL;
