"""Configuration files; installed as the ``collector._defaults`` resource package."""
