-- A job's priority (queue_settings.priority as a number, api.Job.Priority)
-- as a column, so the queue's order and positions are read without decoding
-- every queued job's document. Rows from before take it from their document.
ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 200;
UPDATE jobs SET priority = CASE doc ->> '$.queue_settings.priority'
		WHEN 'low' THEN 100 WHEN 'medium' THEN 200 WHEN 'high' THEN 300
		ELSE CAST(doc ->> '$.queue_settings.priority' AS INTEGER) END
	WHERE doc ->> '$.queue_settings.priority' IS NOT NULL;
