"""The results directory: typed records, the store (the one reader and writer), schema migration, and the provenance every result embeds. Sends no request."""
