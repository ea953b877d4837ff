-- Thread ids escape ':' and '%' in the connector and the channel (llm_bot/events/identity.py),
-- so a channel named 'a:b' is no longer the DM of user 'b' in channel 'a'. Rewrite the ids
-- written before, read as '<connector>:<channel>[:<user id>]' with a connector free of ':' (a
-- platform name): a thread whose every turn is one user's and whose id ends with ':' and that
-- user's id is that user's DM. Ids without ':' or '%' in their channel stay as they are.
CREATE TEMPORARY TABLE thread_renames ON COMMIT DROP AS
WITH parts AS (
    SELECT t.thread_id,
           CASE WHEN count(DISTINCT u.user_id) = 1
                 AND t.thread_id LIKE '%:%:' || replace(replace(replace(min(u.user_id),
                     '\', '\\'), '%', '\%'), '_', '\_')
                THEN min(u.user_id) END AS dm_user
      FROM conversation_threads t
      LEFT JOIN conversation_turns u ON u.thread_id = t.thread_id
     GROUP BY t.thread_id
), split AS (
    SELECT thread_id, dm_user,
           CASE WHEN dm_user IS NULL THEN thread_id
                ELSE left(thread_id, length(thread_id) - length(dm_user) - 1) END AS base
      FROM parts
), renamed AS (
    SELECT thread_id,
           split_part(base, ':', 1) || ':'
           || replace(replace(substr(base, length(split_part(base, ':', 1)) + 2), '%', '%25'),
                      ':', '%3A')
           || coalesce(':' || dm_user, '') AS new_id
      FROM split
     WHERE position(':' IN base) > 0
)
SELECT thread_id AS old_id, new_id FROM renamed WHERE new_id <> thread_id;

UPDATE conversation_turns u SET thread_id = r.new_id
  FROM thread_renames r WHERE u.thread_id = r.old_id;
UPDATE conversation_threads t SET thread_id = r.new_id
  FROM thread_renames r WHERE t.thread_id = r.old_id;
