"""Redis scripts, one per file; installed as the ``collector._lua`` resource package."""
