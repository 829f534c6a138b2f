-- A ledger row can be CANCELLED (docs/reliability.md G1): the apply that
-- wrote it answered 503 (its INSERT committed but the answer was lost and it
-- could not be read back) and gave its reservation back. The service marks
-- such a row CANCELLED with nothing charged (charged_amount 0,
-- refunded_amount = granted_amount) so that a rebuild, reconciliation and
-- the sweeper take it for settled even when Redis lost the cancelled
-- session. Adding a value at the end of an ENUM changes only the table's
-- metadata in InnoDB (an instant ALTER on MySQL 8 and MariaDB 10.3+).

-- +goose Up
ALTER TABLE quota_usage
    MODIFY status ENUM('USING','FINISHED','LEAKED','CANCELLED') NOT NULL;

-- +goose Down
-- A CANCELLED row charged nothing; before the status existed such a row was
-- settled FINISHED with nothing charged (reconciliation did that).
UPDATE quota_usage SET status = 'FINISHED' WHERE status = 'CANCELLED';
ALTER TABLE quota_usage
    MODIFY status ENUM('USING','FINISHED','LEAKED') NOT NULL;
