-- pg_prewarm lets a serving node load the chunk and document tables (and the indexes its
-- result-details fetch walks) into shared buffers when it loads an index version, so the
-- first minute after a start or a swap is not spent on cold reads. It ships with
-- PostgreSQL's contrib package; where it is missing or the role may not create extensions,
-- the migration still succeeds and the node falls back to a plain sequential read
-- (catalog/warm.py).
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_prewarm;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'pg_prewarm not available (%): serving nodes warm with plain reads', SQLERRM;
END
$$;
