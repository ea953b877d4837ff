-- A table without a primary key has no replica identity, and Citus moves a shard without
-- blocking its writes (`citus_rebalance_start()`, `citus_drain_node()` in their default
-- mode) by logical replication, which needs one on every table of the shard's group: the
-- console's audit alone had none, so adding or draining a node failed (docs/citus.md). Its
-- rows are appended and deleted whole with their user, never updated, and may repeat: the
-- whole row is their identity.
ALTER TABLE console_views REPLICA IDENTITY FULL;
