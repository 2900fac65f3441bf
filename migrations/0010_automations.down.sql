DROP TABLE IF EXISTS webhook_deliveries;
DROP TABLE IF EXISTS automation_runs;
DROP TABLE IF EXISTS automation_events;
DROP TABLE IF EXISTS automations;
