-- A destination's URL may carry credentials (`https://user:pass@app/hook`,
-- `...?token=...`): the sources table keeps it as the pages show it,
-- scheme, host, port and path, those masked (`config::destination::shown_url`;
-- `serve` writes every configured source so at start). Rows written before:
CREATE FUNCTION pg_temp.shown_url(url text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT regexp_replace(
               regexp_replace(regexp_replace(url, '#.*$', ''), '\?.*$', '?***'),
               '^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@', '\1***@')
$$;
UPDATE sources SET
    destination = pg_temp.shown_url(destination),
    destinations = (SELECT coalesce(jsonb_agg(jsonb_set(d, '{url}', to_jsonb(pg_temp.shown_url(d->>'url')))
                                              ORDER BY n), '[]'::jsonb)
                    FROM jsonb_array_elements(destinations) WITH ORDINALITY AS x(d, n));
