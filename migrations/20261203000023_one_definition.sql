-- A source's effective pause, defined once: an operator's override, else
-- the config file's. Every statement reads `paused`.
ALTER TABLE sources
    ADD COLUMN paused boolean NOT NULL
        GENERATED ALWAYS AS (coalesce(paused_override, config_paused)) STORED;

-- Which dead dispatches a dead-letter filter takes, defined once for the
-- Dead letters list, a bulk job's count and its steps. A SQL expression
-- function: the planner inlines it, so the dispatches' indexes still serve.
-- NULL arguments match anything.
CREATE FUNCTION dead_letter_matches(
    p dispatches, source text, dead_from timestamptz, dead_to timestamptz,
    reason text, destination text
) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p.state = 'dead'
       AND (source IS NULL OR p.source = source)
       AND (dead_from IS NULL OR p.state_changed_at >= dead_from)
       AND (dead_to IS NULL OR p.state_changed_at < dead_to)
       AND (reason IS NULL OR p.dead_reason ILIKE '%' || reason || '%')
       AND (destination IS NULL OR p.destination = destination)
$$;
